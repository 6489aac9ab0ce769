"""``python -m analysis.summarize compare A B``: two result folders compared, a change marked
only when it is larger than the tolerance and significant (:mod:`analysis.compute.compare`)."""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from analysis.commands.common import (
    FORMATS,
    LOOKED_FOR,
    PROG,
    _fraction,
    add_jobs,
    emit,
    say_shared_nodes,
    warn,
)
from analysis.compute.compare import (
    COMPARABLE,
    DEFAULT_ALPHA,
    DEFAULT_METRIC,
    DEFAULT_TOLERANCE,
    METRIC_NAMES,
    compare_runs,
)
from analysis.present.display import MISSING, DisplayTable, devices_header, sig
from analysis.read.frame import load_all
from scalescope.cli import OneLineParser


def build_compare_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=f"{PROG} compare",
        description="Compare two result folders. A change is marked only when it is larger "
        "than the tolerance AND significant by Welch's t-test; with fewer than two repeats "
        "per side the verdict is 'not enough repeats'.",
    )
    p.add_argument("a", metavar="A", help="reference results (folder or file)")
    p.add_argument("b", metavar="B", help="results compared with A")
    p.add_argument(
        "--metric",
        choices=COMPARABLE,
        default=DEFAULT_METRIC,
        help=f"the quantity compared (default {DEFAULT_METRIC}: the headline's steady-state "
        "throughput per device; train_time_s: the whole training, warm-up included)",
    )
    p.add_argument(
        "--tolerance",
        type=_fraction,
        default=DEFAULT_TOLERANCE,
        help="relative change below which results count as the same (0.05)",
    )
    p.add_argument(
        "--alpha",
        type=_fraction,
        default=DEFAULT_ALPHA,
        help="significance level of Welch's t-test (0.05)",
    )
    p.add_argument("--format", choices=FORMATS, default="table")
    add_jobs(p)
    return p


def _compare_table(
    frame: pd.DataFrame, metric: str, tolerance: float, alpha: float
) -> DisplayTable:
    dev = devices_header(frame["accelerator"].tolist() if len(frame) else [])
    rows = []
    for _, r in frame.iterrows():
        change = MISSING if pd.isna(r["change_rel"]) else f"{100 * r['change_rel']:+.1f}%"
        p = MISSING if pd.isna(r["p_value"]) else f"{r['p_value']:.3g}"
        rows.append(
            [
                r["series"],
                str(r["world_size"]),
                str(r["nodes"]),
                str(r["n_a"]),
                str(r["n_b"]),
                sig(r["mean_a"]),
                sig(r["mean_b"]),
                change,
                p,
                r["verdict"],
            ]
        )
    cols = [
        "Series",  # short enough not to fold on an 80-column terminal
        dev,
        "Nodes",
        "n A",
        "n B",
        "A mean",  # of the metric the title names: a long name would fold the header
        "B mean",
        "Change",
        "p (Welch)",
        "Verdict",
    ]
    return DisplayTable(
        "compare",
        f"B against A on {metric}: {METRIC_NAMES[metric]}",
        pd.DataFrame(rows, columns=cols, dtype="object"),
        caption=[
            f"Marked better/worse only when |change| > {tolerance:.0%} and Welch's t-test "
            f"p < {alpha:g}; change = (B - A) / A."
        ],
        right=set(cols[1:-1]),  # the numbers: all but the configuration and the verdict
    )


def compare(args: argparse.Namespace) -> int:
    sides = []
    shared: dict[str, list[dict[str, object]]] = {}
    for side, path in (("A", args.a), ("B", args.b)):
        loaded = load_all(path, jobs=args.jobs)
        warn(loaded.problems)
        if loaded.runs.empty:
            print(f"{PROG} compare: no finished run in {path}; {LOOKED_FOR}.", file=sys.stderr)
            return 1
        sides.append(loaded.runs)
        shared[side] = say_shared_nodes("compare", f"{side} ({path})", loaded.runs)
    frame = compare_runs(
        sides[0], sides[1], metric=args.metric, tolerance=args.tolerance, alpha=args.alpha
    )
    table = _compare_table(frame, args.metric, args.tolerance, args.alpha)
    emit(
        args.format,
        table,
        frame,
        "rows",
        {
            "kind": "scalescope-compare",
            "a": args.a,
            "b": args.b,
            "metric": args.metric,
            "metric_name": METRIC_NAMES[args.metric],
            "tolerance": args.tolerance,
            "alpha": args.alpha,
            "test": "Welch's unequal-variances t-test, two-sided",
            "shared_nodes": shared,
        },
    )
    return 0
