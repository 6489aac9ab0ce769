"""``python -m analysis.summarize``'s command line: its parser and its option groups (the
command itself is :mod:`analysis.commands.summarize`)."""

from __future__ import annotations

import argparse

from analysis.commands.common import (
    FORMATS,
    PROG,
    _fraction,
    _node_list,
    _positive_int,
    _tolerance,
    add_jobs,
    add_paths,
)
from analysis.commands.plan_options import add_plan_arguments
from analysis.compute.metrics import (
    DEFAULT_ACC_TOLERANCE,
    DEFAULT_CONFIDENCE,
    DEFAULT_CV_THRESHOLD,
    DEFAULT_LOSS_TOLERANCE,
)
from scalescope.cli import OneLineParser

CSV_TABLES = (
    "runs",
    "groups",
    "scaling",
    "amdahl",
    "precision",
    "diagnosis",
    "projection",
    "projection_check",
    "plan",
    "failures",
    "problems",
)

# --- the command line -------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Summarise scaling runs: tables, speedup analysis, failed jobs, charts. "
        f"Use '{PROG} compare A B' to compare two result folders.",
    )
    add_paths(p)
    _add_output_arguments(p)
    _add_analysis_arguments(p)
    add_jobs(
        p,
        "worker processes for reading files and drawing charts (default: one per CPU; "
        "1 = everything in this process)",
    )
    _add_comet_arguments(p.add_argument_group("Comet scaling dashboards"))
    _add_projection_arguments(p.add_argument_group("projection to scales not yet run"))
    add_plan_arguments(p)
    return p


def _add_output_arguments(p: argparse.ArgumentParser) -> None:
    """What is printed and what is written."""
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="what to print on stdout (default: table)",
    )
    p.add_argument(
        "--table",
        choices=CSV_TABLES,
        default="runs",
        help="which table --format csv prints (all are written to --out)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument(
        "--out",
        metavar="DIR",
        help="write every table, chart, summary.json, report.md and report.html here "
        "(default: <first PATH>/summary)",
    )
    out.add_argument("--no-write", action="store_true", help="print only, write nothing")
    p.add_argument(
        "--wide",
        action="store_true",
        help="print every table in the terminal (default: a headline table per series, "
        "Read this first and where the files are; the rest is in report.md, report.html "
        "and the CSV files)",
    )
    p.add_argument("--no-charts", action="store_true", help="skip the charts (faster)")
    p.add_argument(
        "--max-rows",
        type=int,
        default=200,
        metavar="N",
        help="per-job tables (runs, failures) show at most N rows on the terminal, "
        "in markdown and in report.md; 0 = all. CSV and JSON always hold every row "
        "(default 200)",
    )


def _add_analysis_arguments(p: argparse.ArgumentParser) -> None:
    """The baseline and the statistics' settings."""
    p.add_argument(
        "--baseline",
        metavar="N|NxD",
        help="baseline scale: a world size (4) or nodes x devices per node (1x4); "
        "default: the 1-device run, else the smallest world size",
    )
    p.add_argument(
        "--confidence",
        type=_fraction,
        default=DEFAULT_CONFIDENCE,
        help="confidence level of the intervals (default 0.95)",
    )
    p.add_argument(
        "--cv-threshold",
        type=_fraction,
        default=DEFAULT_CV_THRESHOLD,
        help="flag a configuration whose training time CV exceeds this (0.10)",
    )
    p.add_argument(
        "--loss-tolerance",
        type=_tolerance,
        default=DEFAULT_LOSS_TOLERANCE,
        help="relative final val loss increase flagged as worse (0.05)",
    )
    p.add_argument(
        "--acc-tolerance",
        type=_tolerance,
        default=DEFAULT_ACC_TOLERANCE,
        help="absolute final val accuracy drop flagged as worse (0.01)",
    )


def _add_comet_arguments(comet: argparse._ArgumentGroup) -> None:
    comet.add_argument(
        "--comet",
        nargs="?",
        const="auto",
        choices=("auto", "online", "offline"),
        metavar="MODE",
        help="log one scaling-summary experiment per series to Comet (metrics at step = world "
        "size, the tables, charts and report.html): auto (online with COMET_API_KEY and a "
        "reachable server, else an offline archive), online or offline; the default MODE is "
        "auto",
    )
    comet.add_argument(
        "--comet-project",
        default="scalescope-scaling",
        metavar="NAME",
        help="Comet project of the summary experiments (default scalescope-scaling)",
    )
    comet.add_argument(
        "--comet-workspace", metavar="NAME", help="Comet workspace (default: the key's)"
    )
    comet.add_argument(
        "--comet-view",
        action="store_true",
        help="also create or update the project view 'scalescope scaling' (line panels of "
        "efficiency, speedup, per-device throughput and the waterfall's parts against step = "
        "world size) with comet_ml.views; a comet_ml without it (3.58) copies a view of that "
        "name made by hand once in the workspace instead. Needs --comet auto or online, "
        "COMET_API_KEY and a reachable server (untried against a real server)",
    )


def _add_projection_arguments(proj: argparse._ArgumentGroup) -> None:
    proj.add_argument(
        "--project",
        type=_node_list,
        metavar="NODES",
        help="project each series to these node counts, e.g. 4,8,16,32: a table with "
        "prediction intervals, what-ifs, the 75%% crossing, a chart and a self-check",
    )
    proj.add_argument(
        "--devices-per-node",
        type=_positive_int,
        metavar="N",
        help="devices per node of the projected scales (default: the sweep's largest)",
    )
    proj.add_argument(
        "--network",
        metavar="PATH",
        help="the cluster's inter-node all-reduce at the target size: nccl-tests' "
        "all_reduce_perf output (or benchmarks/allreduce.py's) across nodes; earlier "
        "scalescope runs across nodes on the same cluster, any workload (a folder or a log: "
        "what their all-reduce sweeps measured); or YAML with inter_busbw_gbps (measured, "
        "GB/s) or inter_line_rate_gbit_s (the stated line rate, Gb/s a node: an upper bound, "
        "the share achieved spanned), optionally inter_alpha_s, at_world_size, source",
    )
