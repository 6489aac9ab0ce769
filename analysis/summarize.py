"""Summarise scaling runs: ``python -m analysis.summarize PATH [PATH...]``.

Reads every result record and failed job under the given folders or files, prints the
summary (``--format table|markdown|json|csv``) and writes all tables, charts, the JSON
document, ``report.md`` and ``report.html`` to ``--out`` (default ``<first PATH>/summary``),
replacing a previous summary there all at once.

``python -m analysis.summarize compare A B`` compares two result folders.

``python -m analysis.summarize check PATH... --reference ref.yaml`` is the regression gate
(``--write-reference ref.yaml`` writes a reference file from the results instead), and
``python -m analysis.summarize export PATH... --format github-action-benchmark|bencher``
writes the headline figures for CI benchmark trackers (see :mod:`analysis.compute.gate`).

Exit status: 0 when something usable was found (finished or failed jobs), 1 when nothing
was, 2 for a usage error or an output folder that must not be replaced. ``check``: 0 when
no value regressed, 1 on a significant regression (or a missing value with
``--fail-on-missing``, or no finished run at all), 2 for a bad reference file or usage.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import multiprocessing
import os
import sys
import textwrap
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.analyze import Analysis, ProjectionRequest, analyze
from analysis.compute.compare import COMPARABLE, DEFAULT_ALPHA, DEFAULT_TOLERANCE, compare_runs
from analysis.compute.gate import DEFAULT_ALPHA as GATE_ALPHA
from analysis.compute.gate import DEFAULT_TOLERANCE as GATE_TOLERANCE
from analysis.compute.gate import (
    EXPORT_FORMATS,
    REGRESSION,
    BadReference,
    check,
    export_bencher,
    export_github_action_benchmark,
    load_reference,
    reference_document,
    unreferenced,
    write_reference,
)
from analysis.compute.gate import (
    MISSING as GATE_MISSING,
)
from analysis.compute.metrics import (
    DEFAULT_ACC_TOLERANCE,
    DEFAULT_CONFIDENCE,
    DEFAULT_CV_THRESHOLD,
    DEFAULT_LOSS_TOLERANCE,
    BaselineSpec,
)
from analysis.present.html_report import report_html
from analysis.present.outdir import OutputError, check_replaceable, write_atomically
from analysis.present.report import Settings, document, dumps, report_markdown
from analysis.present.tables import (
    MISSING,
    DisplayTable,
    all_tables,
    devices_header,
    markdown,
    pct,
    rich_table,
    sig,
)
from analysis.read.frame import Loaded, load_all
from analysis.read.parse import Problem
from scalescope.atomic import write_text_atomic

PROG = "python -m analysis.summarize"
FORMATS = ("table", "markdown", "json", "csv")
CSV_TABLES = (
    "runs",
    "groups",
    "scaling",
    "amdahl",
    "precision",
    "diagnosis",
    "projection",
    "projection_check",
    "failures",
    "problems",
)
LOOKED_FOR = (
    "looked for ':::SCALESCOPE' event lines in job logs (slurm-*.out, submitit *_log.out / "
    "*_log.err, any other text file) and for result.json files in run directories"
)


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected a number between 0 and 1")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected an integer >= 1")
    return value


def _node_list(text: str) -> list[int]:
    """``4,8,16,32``: node counts, each an integer >= 1."""
    values = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected node counts separated by commas, e.g. 4,8,16,32"
            ) from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: a node count must be >= 1")
        values.append(value)
    return sorted(set(values))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Summarise scaling runs: tables, speedup analysis, failed jobs, charts. "
        f"Use '{PROG} compare A B' to compare two result folders.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="result folders (walked) or files")
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
        type=float,
        default=DEFAULT_LOSS_TOLERANCE,
        help="relative final val loss increase flagged as worse (0.05)",
    )
    p.add_argument(
        "--acc-tolerance",
        type=float,
        default=DEFAULT_ACC_TOLERANCE,
        help="absolute final val accuracy drop flagged as worse (0.01)",
    )
    p.add_argument(
        "--jobs",
        type=_positive_int,
        default=None,
        help="worker processes for reading files and drawing charts (default: one per CPU; "
        "1 = everything in this process)",
    )
    comet = p.add_argument_group("Comet scaling dashboards")
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
    proj = p.add_argument_group("projection to scales not yet run")
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
        metavar="FILE",
        help="the cluster's inter-node all-reduce at the target size: nccl-tests' "
        "all_reduce_perf output (or benchmarks/allreduce.py's), or YAML with inter_busbw_gbps "
        "(optionally inter_alpha_s, at_world_size, source)",
    )
    return p


def build_compare_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{PROG} compare",
        description="Compare two result folders. A change is marked only when it is larger "
        "than the tolerance AND significant by Welch's t-test; with fewer than two repeats "
        "per side the verdict is 'not enough repeats'.",
    )
    p.add_argument("a", metavar="A", help="reference results (folder or file)")
    p.add_argument("b", metavar="B", help="results compared with A")
    p.add_argument("--metric", choices=COMPARABLE, default="train_time_s")
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
    p.add_argument("--jobs", type=_positive_int, default=None)
    return p


def build_check_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{PROG} check",
        description="Regression gate: check per-device throughput and scaling efficiency "
        "against a reference file. A value fails only when it is below reference x "
        "(1 - tolerance) AND significantly so (one-sided test at --alpha). Exit 0: nothing "
        "regressed; 1: a regression (or a missing value with --fail-on-missing, or no "
        "finished run); 2: a bad reference file or usage.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="result folders (walked) or files")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--reference", metavar="FILE", help="the reference file (YAML) to check")
    which.add_argument(
        "--write-reference",
        metavar="FILE",
        help="write a reference file from these results (means per series and scale) "
        "instead of checking; refuses to replace FILE without --force",
    )
    p.add_argument("--force", action="store_true", help="let --write-reference replace FILE")
    p.add_argument(
        "--tolerance",
        type=_fraction,
        default=GATE_TOLERANCE,
        help="default relative tolerance written by --write-reference (0.05)",
    )
    p.add_argument(
        "--alpha",
        type=_fraction,
        default=GATE_ALPHA,
        help="significance level of the one-sided tests (0.05)",
    )
    p.add_argument(
        "--fail-on-missing",
        action="store_true",
        help="exit 1 when a referenced value has no matching result (default: shown, exit 0)",
    )
    p.add_argument("--format", choices=("table", "markdown", "json", "csv"), default="table")
    p.add_argument("--jobs", type=_positive_int, default=None)
    return p


def build_export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{PROG} export",
        description="Write per-device throughput and scaling efficiency (means with 95%% "
        "intervals) for a CI benchmark tracker: github-action-benchmark (tool: "
        "customBiggerIsBetter) or Bencher (Bencher Metric Format, adapter json).",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="result folders (walked) or files")
    p.add_argument("--format", choices=EXPORT_FORMATS, required=True)
    p.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    p.add_argument("--jobs", type=_positive_int, default=None)
    return p


# --- printing -------------------------------------------------------------------------------


def _console(stream: Any) -> Any:
    from rich.console import Console

    width = None if stream.isatty() else int(os.environ.get("COLUMNS", "160"))
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def _warn(problems: Sequence[Problem]) -> None:
    for p in problems:
        word = "warning" if p.severity == "warning" else "note"
        print(f"{PROG}: {word}: {p.file}: {p.message}", file=sys.stderr)


def _csv_frames(loaded: Loaded, analysis: Analysis) -> dict[str, pd.DataFrame]:
    runs = loaded.runs.drop(columns=["versions", "diagnosis"]).copy()
    runs["epoch_times_s"] = [";".join(f"{t:.6g}" for t in ts) for ts in runs["epoch_times_s"]]
    problems = pd.DataFrame(
        [(p.file, p.severity, p.message) for p in loaded.problems],
        columns=["file", "severity", "message"],
    )
    return {
        "runs": runs,
        "groups": analysis.groups,
        "scaling": analysis.scaling,
        "amdahl": analysis.amdahl,
        "precision": analysis.precision,
        "diagnosis": _waterfall_table(analysis),
        **(
            {
                "projection": analysis.projection.table,
                "projection_check": analysis.projection.checks,
            }
            if analysis.projection is not None
            else {}
        ),
        "failures": loaded.failures,
        "problems": problems,
    }


def _waterfall_table(analysis: Analysis) -> pd.DataFrame:
    from analysis.compute.waterfall import WATERFALL_COLUMNS

    w = analysis.waterfall
    return w.table if w is not None else pd.DataFrame(columns=WATERFALL_COLUMNS)


def _markdown_all(tables: Sequence[DisplayTable], notes: Sequence[str]) -> str:
    parts = [markdown(t) for t in tables]
    if notes:
        parts.append("## Read this first\n\n" + "".join(f"- {n}\n" for n in notes))
    return "\n".join(parts)


def _print_headline(analysis: Analysis, failures: pd.DataFrame, max_rows: int = 0) -> None:
    """The terminal's default: the headline tables, a line per failed job (its cause; at
    most ``max_rows``, 0 = all), and the notes."""
    from analysis.present.tables import failure_label, headline_tables

    console = _console(sys.stdout)
    for t in headline_tables(analysis):
        console.print(rich_table(t, narrow=True))
        console.print()
    result = analysis.projection
    if result is not None:
        for _, c in result.checks.iterrows():
            console.print(
                f"Self-check, {c['series']}: {c['world_size']} devices projected from "
                f"{c['from_world_sizes']} alone at {100 * c['predicted']:.1f}% "
                f"[{100 * c['predicted_low']:.1f}, {100 * c['predicted_high']:.1f}], measured "
                f"{100 * c['measured']:.1f}% ({'inside' if c['covered'] else 'OUTSIDE'} the "
                "interval)",
                markup=False,
            )
        if len(result.checks):
            console.print()
    if len(failures):
        console.print(f"[bold]Failed or incomplete jobs ({len(failures)})[/bold]")
        shown = failures if max_rows <= 0 else failures.iloc[:max_rows]
        for _, r in shown.iterrows():
            detail = f": {r['detail']}" if isinstance(r["detail"], str) and r["detail"] else ""
            console.print(
                f"  • {r['job_id']} ({failure_label(r)}): {r['reason_label']}{detail}",
                markup=False,
            )
        if len(shown) < len(failures):
            console.print(
                f"  … and {len(failures) - len(shown)} more (failures.csv, report.md; "
                "--max-rows 0 shows all)",
                markup=False,
            )
    _print_notes(console, analysis.notes)


def _print_notes(console: Any, notes: Sequence[str]) -> None:
    """ "Read this first": the notes, one bullet each (data, never rich markup), wrapped at
    the console's width with their continuation lines indented under the bullet's text."""
    if notes:
        console.print("[bold]Read this first[/bold]")
        for n in notes:
            text = textwrap.fill(
                n,
                width=max(40, console.width),
                initial_indent="  • ",
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
            console.print(text, markup=False, soft_wrap=True)


def _print_tables(tables: Sequence[DisplayTable], notes: Sequence[str]) -> None:
    console = _console(sys.stdout)
    for t in tables:
        if t.name != "problems":  # already on stderr as warnings
            console.print(rich_table(t))
            console.print()
    _print_notes(console, notes)


# --- writing --------------------------------------------------------------------------------


CHART_TITLES = {
    "speedup": "Speedup vs devices",
    "efficiency": "Parallel efficiency",
    "throughput": "Throughput vs devices",
    "epoch_time": "Time per epoch",
    "val_loss": "Validation loss",
}


def _save_charts(directory: Path, analysis: Analysis, loss_tolerance: float) -> dict[str, str]:
    """Draw every chart into ``directory``; returns each one's SVG text by file stem, for
    report.html (the diagnosis charts are written as PNG only: their SVG stays in memory)."""
    import matplotlib

    from analysis.present import charts
    from analysis.present.html_report import figure_svg

    # No timestamps and no random ids in the files (matplotlib salts SVG ids at random unless
    # told otherwise): a summary of the same inputs is byte-identical.
    with matplotlib.rc_context({"svg.hashsalt": "scalescope"}):
        return _draw_charts(directory, analysis, loss_tolerance, charts.CHARTS, figure_svg)


def _draw_charts(
    directory: Path,
    analysis: Analysis,
    loss_tolerance: float,
    chart_funcs: Any,
    figure_svg: Callable[[Any], str],
) -> dict[str, str]:
    svgs = {}
    frames = {"scaling": analysis.scaling, "groups": analysis.groups}
    for name, (frame_name, func) in chart_funcs.items():
        extra = {"loss_tolerance": loss_tolerance} if name == "val_loss" else {}
        fig = func(frames[frame_name], **extra)
        for ext in ("png", "svg"):
            meta = {"Date": None} if ext == "svg" else {"Software": None}
            fig.savefig(directory / f"{name}.{ext}", metadata=meta)
        svgs[name] = (directory / f"{name}.svg").read_text(encoding="utf-8")
    for name, fig in [*_diagnosis_figures(analysis), *_projection_figures(analysis)]:
        fig.savefig(directory / f"{name}.png", metadata={"Software": None})
        svgs[name] = figure_svg(fig)
    return svgs


def _projection_charts(analysis: Analysis) -> list[tuple[str, str]]:
    """(series, file stem) of each projected series' chart (``projection_<slug>``)."""
    from analysis.compute.waterfall import chart_slugs

    result = analysis.projection
    if result is None or result.table.empty:
        return []
    names = list(dict.fromkeys(result.table["series"]))
    slugs = chart_slugs(names)
    return [(name, f"projection_{slugs[name]}") for name in names]


def _projection_figures(analysis: Analysis) -> list[tuple[str, Any]]:
    from analysis.present import charts

    result = analysis.projection
    return [
        (stem, charts.projection_chart(analysis.scaling, result.table, series))
        for series, stem in _projection_charts(analysis)
    ]


def _diagnosis_charts(analysis: Analysis) -> list[tuple[str, str, str]]:
    """(kind, series, file stem) of each series' waterfall (``diagnosis_<slug>``) and
    per-rank chart (``ranks_<slug>``), in series order (slug:
    :func:`analysis.compute.waterfall.chart_slugs`); series without any breakdown get none."""
    from analysis.compute.waterfall import chart_series, chart_slugs

    w = analysis.waterfall
    if w is None:
        return []
    slugs = chart_slugs(list(dict.fromkeys(w.table["series"])))
    out = []
    for series in chart_series(w):
        out.append(("diagnosis", series, f"diagnosis_{slugs[series]}"))
        if (w.ranks["series"] == series).any():
            out.append(("ranks", series, f"ranks_{slugs[series]}"))
    return out


def diagnosis_chart_links(analysis: Analysis) -> list[tuple[str, str]]:
    """(title, relative path) of the diagnosis charts, for report.md."""
    titles = {"diagnosis": "Where the step time went", "ranks": "Per-rank step time"}
    return [
        (f"{titles[kind]}: {series}", f"charts/{stem}.png")
        for kind, series, stem in _diagnosis_charts(analysis)
    ]


def _diagnosis_figures(analysis: Analysis) -> list[tuple[str, Any]]:
    from analysis.present import charts

    w = analysis.waterfall
    out = []
    for kind, series, stem in _diagnosis_charts(analysis):
        assert w is not None
        if kind == "diagnosis":
            out.append((stem, charts.step_parts_chart(w.table, series)))
        else:
            out.append((stem, charts.ranks_chart(w.ranks, series)))
    return out


def _chart_child(conn: Any, directory: Path, analysis: Analysis, loss_tolerance: float) -> None:
    try:
        conn.send(_save_charts(directory, analysis, loss_tolerance))
    except BaseException as exc:  # the parent re-raises it
        conn.send(exc if isinstance(exc, OSError) else RuntimeError(f"charts: {exc!r}"))


def _start_charts(
    directory: Path, analysis: Analysis, loss_tolerance: float, jobs: int | None = None
) -> Callable[[], dict[str, str]]:
    """Render the charts in a forked process while this one writes the tables (matplotlib's
    import and drawing are a third of a big summary's time); returns the function that waits
    for it, re-raises its error and returns the charts' SVG text. With ``jobs == 1`` (no
    other process wanted) or without fork, renders here and now."""
    directory.mkdir()
    if jobs == 1 or "fork" not in multiprocessing.get_all_start_methods():
        svgs = _save_charts(directory, analysis, loss_tolerance)
        return lambda: svgs
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    sys.stdout.flush()  # else the child would print our buffered output a second time
    sys.stderr.flush()
    proc = ctx.Process(
        target=_chart_child, args=(send, directory, analysis, loss_tolerance), daemon=True
    )
    proc.start()
    send.close()

    def wait() -> dict[str, str]:
        try:
            answer = receive.recv()
        except EOFError:
            answer = RuntimeError("the chart process died without a word")
        proc.join()
        if isinstance(answer, BaseException):
            raise answer
        return dict(answer)

    return wait


def _write_outputs(
    target: Path,
    loaded: Loaded,
    analysis: Analysis,
    tables: Sequence[DisplayTable],
    doc: dict[str, Any],
    doc_text: str,
    with_charts: bool,
    jobs: int | None = None,
) -> Path:
    tolerance = float(doc["settings"]["loss_tolerance"])
    with_charts = with_charts and len(loaded.runs) > 0

    def fill(tmp: Path) -> None:
        charts_done = (
            _start_charts(tmp / "charts", analysis, tolerance, jobs) if with_charts else None
        )
        try:
            for name, frame in _csv_frames(loaded, analysis).items():
                frame.to_csv(tmp / f"{name}.csv", index=False)
            (tmp / "summary.json").write_text(doc_text, encoding="utf-8")
            links = [(title, f"charts/{name}.png") for name, title in CHART_TITLES.items()]
            links += diagnosis_chart_links(analysis)
            links += [
                (f"Projected scaling: {series}", f"charts/{stem}.png")
                for series, stem in _projection_charts(analysis)
            ]
            (tmp / "report.md").write_text(
                report_markdown(doc=doc, tables=tables, charts=links if with_charts else []),
                encoding="utf-8",
            )
        except BaseException:
            if charts_done is not None:  # never leave the chart process writing behind us
                with contextlib.suppress(BaseException):
                    charts_done()
            raise
        svgs = charts_done() if charts_done is not None else None
        drawn = None if svgs is None else [(title, svgs[Path(path).stem]) for title, path in links]
        (tmp / "report.html").write_text(
            report_html(doc=doc, tables=tables, charts=drawn), encoding="utf-8"
        )

    return write_atomically(target, fill)


def _log_to_comet(args: argparse.Namespace, doc: dict[str, Any], written: Path, runs: Any) -> None:
    """The scaling-summary experiments (analysis.present.comet); a failure is a warning line, never
    a failed summary (the files are written already)."""
    from analysis.present.comet import log_scaling_summaries

    try:
        lines = log_scaling_summaries(
            doc,
            written,
            runs,
            mode=args.comet,
            project=args.comet_project,
            workspace=args.comet_workspace,
        )
    except Exception as exc:  # comet_ml or the server: the summary stands
        from scalescope.job.tracking import KEY_ENV, redact

        why = redact(f"{type(exc).__name__}: {exc}", [os.environ.get(KEY_ENV, "")])
        print(f"{PROG}: warning: comet: {why}", file=sys.stderr)
    else:
        for line in lines:
            # the jobs' reasons name their config key; here the user's word was --comet
            line = line.replace(f"tracking.mode={args.comet}", f"--comet {args.comet}")
            print(f"{PROG}: comet: {line}", file=sys.stderr)
    if args.comet_view:
        from analysis.present.comet import publish_scaling_view

        made, line = publish_scaling_view(
            project=args.comet_project, workspace=args.comet_workspace
        )
        print(f"{PROG}: {'' if made else 'warning: '}comet: {line}", file=sys.stderr)


def _default_out(first: str) -> Path:
    path = Path(first)
    return (path if path.is_dir() else path.parent) / "summary"


# --- commands -------------------------------------------------------------------------------


def summarize(args: argparse.Namespace) -> int:
    try:
        baseline = BaselineSpec.parse(args.baseline) if args.baseline else None
    except ValueError as exc:
        print(f"{PROG}: error: --baseline: {exc}", file=sys.stderr)
        return 2
    profile = None
    if args.comet_view and args.comet in (None, "offline"):
        need = "--comet-view needs --comet auto or online" + (
            " (an offline archive has no server to hold a view)" if args.comet else ""
        )
        print(f"{PROG}: error: {need}", file=sys.stderr)
        return 2
    if args.comet is not None and args.no_write:
        print(f"{PROG}: error: --comet logs the written summary: drop --no-write", file=sys.stderr)
        return 2
    if args.format == "csv" and args.table.startswith("projection") and args.project is None:
        print(f"{PROG}: error: --table {args.table} needs --project NODES", file=sys.stderr)
        return 2
    if args.network is not None or args.devices_per_node is not None:
        if args.project is None:
            flag = "--network" if args.network is not None else "--devices-per-node"
            print(f"{PROG}: error: {flag} needs --project NODES", file=sys.stderr)
            return 2
    if args.network is not None:
        from analysis.read.network_profile import read_profile

        try:
            profile = read_profile(args.network)
        except ValueError as exc:
            print(f"{PROG}: error: --network: {exc}", file=sys.stderr)
            return 2
    target = None if args.no_write else Path(args.out) if args.out else _default_out(args.paths[0])
    if target is not None:
        check_replaceable(target.absolute())
    prefetch = None
    if target is not None and not args.no_charts:
        # matplotlib's import (about a second) overlaps the reading, where this process
        # mostly waits for its workers; the chart process forked later inherits it.
        prefetch = threading.Thread(
            target=importlib.import_module, args=("analysis.present.charts",)
        )
        prefetch.start()
    loaded = load_all(args.paths, jobs=args.jobs, exclude=[target] if target else [])
    if prefetch is not None:
        prefetch.join()
    # Everything read stays alive until exit: spare the cyclic collector rescanning it.
    gc.freeze()
    _warn(loaded.problems)
    if loaded.runs.empty and loaded.failures.empty:
        print(
            f"{PROG}: nothing usable in {', '.join(args.paths)}: no result record and no "
            f"failed job; {LOOKED_FOR}.",
            file=sys.stderr,
        )
        return 1
    analysis = analyze(
        loaded.runs,
        baseline=baseline,
        confidence=args.confidence,
        cv_threshold=args.cv_threshold,
        loss_tolerance=args.loss_tolerance,
        acc_tolerance=args.acc_tolerance,
        project=(
            ProjectionRequest(args.project, args.devices_per_node, profile)
            if args.project is not None
            else None
        ),
    )
    tables = all_tables(
        loaded.runs, loaded.failures, loaded.problems, analysis, max_rows=args.max_rows
    )
    settings = Settings(
        args.baseline, args.confidence, args.cv_threshold, args.loss_tolerance, args.acc_tolerance
    )
    doc = document(
        inputs=args.paths,
        files_read=loaded.files_read,
        runs=loaded.runs,
        failures=loaded.failures,
        problems=loaded.problems,
        analysis=analysis,
        settings=settings,
    )
    doc_text = dumps(doc) if args.format == "json" or target is not None else ""
    if args.format == "table" and args.wide:
        _print_tables(tables, analysis.notes)
    elif args.format == "table":
        _print_headline(analysis, loaded.failures, args.max_rows)
    elif args.format == "markdown":
        sys.stdout.write(_markdown_all(tables, analysis.notes))
    elif args.format == "json":
        sys.stdout.write(doc_text)
    else:
        _csv_frames(loaded, analysis)[args.table].to_csv(sys.stdout, index=False)
    if target is not None:
        written = _write_outputs(
            target, loaded, analysis, tables, doc, doc_text, not args.no_charts, args.jobs
        )
        print(
            f"{PROG}: wrote {written} (report.md, report.html, summary.json, CSV tables"
            f"{', charts' if not args.no_charts and len(loaded.runs) else ''})",
            file=sys.stderr,
        )
        if args.comet is not None:
            _log_to_comet(args, doc, written, loaded.runs)
        if args.format == "table" and not args.wide:
            # The path on a line of its own: it can be as long as the output folder's.
            print(
                "Every table, chart and paragraph (also in report.md; the numbers in "
                f"summary.json and the CSV files):\n  {written / 'report.html'}\n"
                "--wide prints every table here."
            )
    elif args.format == "table" and not args.wide:
        print("Nothing written (--no-write); --wide prints every table here.")
    return 0


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
        "Configuration",
        dev,
        "Nodes",
        "n A",
        "n B",
        f"A mean {metric}",
        f"B mean {metric}",
        "Change",
        "p (Welch)",
        "Verdict",
    ]
    return DisplayTable(
        "compare",
        f"Comparison of {metric}: B against A",
        pd.DataFrame(rows, columns=cols, dtype="object"),
        caption=[
            f"Marked better/worse only when |change| > {tolerance:.0%} and Welch's t-test "
            f"p < {alpha:g}; change = (B - A) / A."
        ],
        right={
            dev,
            "Nodes",
            "n A",
            "n B",
            f"A mean {metric}",
            f"B mean {metric}",
            "Change",
            "p (Welch)",
        },
    )


def compare(args: argparse.Namespace) -> int:
    sides = []
    for path in (args.a, args.b):
        loaded = load_all(path, jobs=args.jobs)
        _warn(loaded.problems)
        if loaded.runs.empty:
            print(f"{PROG} compare: no finished run in {path}; {LOOKED_FOR}.", file=sys.stderr)
            return 1
        sides.append(loaded.runs)
    frame = compare_runs(
        sides[0], sides[1], metric=args.metric, tolerance=args.tolerance, alpha=args.alpha
    )
    table = _compare_table(frame, args.metric, args.tolerance, args.alpha)
    _emit(
        args.format,
        table,
        frame,
        "rows",
        {
            "kind": "scalescope-compare",
            "a": args.a,
            "b": args.b,
            "metric": args.metric,
            "tolerance": args.tolerance,
            "alpha": args.alpha,
            "test": "Welch's unequal-variances t-test, two-sided",
        },
    )
    return 0


def _emit(
    fmt: str, table: DisplayTable, frame: pd.DataFrame, rows_key: str, head: dict[str, Any]
) -> None:
    """One result table on stdout as a rich table, Markdown, JSON (``head`` plus the rows
    under ``rows_key``) or CSV."""
    if fmt == "table":
        _console(sys.stdout).print(rich_table(table, narrow=True))
    elif fmt == "markdown":
        sys.stdout.write(markdown(table))
    elif fmt == "json":
        from analysis.present.report import SUMMARY_SCHEMA_VERSION, records

        doc = {"schema_version": SUMMARY_SCHEMA_VERSION, **head, rows_key: records(frame)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        frame.to_csv(sys.stdout, index=False)


def _gate_value(metric: str, x: Any) -> str:
    return (
        pct(x) if metric in ("parallel_efficiency", "per_device_throughput_efficiency") else sig(x)
    )


GATE_METRICS = {
    "samples_per_s": "throughput",
    "samples_per_s_per_device": "throughput/device",
    "parallel_efficiency": "efficiency",
    "per_device_throughput_efficiency": "efficiency (weak)",
}
"""Short names of the gate's metrics in its terminal and Markdown table (CSV and JSON keep
the record's names)."""


def _check_table(frame: pd.DataFrame, alpha: float, n_unchecked: int) -> DisplayTable:
    rows = []
    tolerances = {float(t) for t in frame["tolerance"]} if len(frame) else set()
    one_tolerance = len(tolerances) == 1
    for _, r in frame.iterrows():
        m = r["metric"]
        measured = _gate_value(m, r["measured"])
        if not (pd.isna(r["ci_low"]) or pd.isna(r["ci_high"])):
            measured += f" [{_gate_value(m, r['ci_low'])}, {_gate_value(m, r['ci_high'])}]"
        rows.append(
            [
                r["series"],
                f"{r['nodes']}x{r['devices_per_node']}",
                GATE_METRICS.get(m, m),
                _gate_value(m, r["reference"]),
                _gate_value(m, r["bound"])
                + ("" if one_tolerance else f" (-{100 * r['tolerance']:g}%)"),
                measured,
                str(r["n"]),
                MISSING if pd.isna(r["p_value"]) else f"{r['p_value']:.3g}",
                r["verdict"],
            ]
        )
    bound = f"Bound (-{100 * next(iter(tolerances)):g}%)" if one_tolerance else "Bound"
    cols = [
        "Series",
        "Scale",
        "Metric",
        "Reference",
        bound,
        "Measured [95% CI]",
        "n",
        "p",
        "Verdict",
    ]
    caption = [
        f"REGRESSION: below reference x (1 - tolerance) and significant (one-sided p < "
        f"{alpha:g}); p is tested only for values below their bound. Throughput: t-test of "
        "the repeats' log values against the bound; efficiency: the delta-method interval of "
        "the ratio of means (log scale, Welch df). One run per side: no test, never a "
        "regression."
    ]
    if n_unchecked:
        caption.append(f"{n_unchecked} measured value(s) have no reference and are not checked.")
    return DisplayTable(
        "check",
        "Regression gate",
        pd.DataFrame(rows, columns=cols, dtype="object"),
        caption=caption,
        right={"Reference", bound, "Measured [95% CI]", "n", "p"},
    )


def _finished_runs(args: argparse.Namespace, command: str, consequence: str) -> Loaded | None:
    """The records under ``args.paths`` (problems warned on stderr), or None with one line
    saying there was no finished run."""
    loaded = load_all(args.paths, jobs=args.jobs)
    _warn(loaded.problems)
    if loaded.runs.empty:
        print(
            f"{PROG} {command}: no finished run in {', '.join(args.paths)}: {consequence}; "
            f"{LOOKED_FOR}.",
            file=sys.stderr,
        )
        return None
    return loaded


def gate(args: argparse.Namespace) -> int:
    if args.reference:
        try:
            expected = load_reference(args.reference)
        except BadReference as exc:
            print(f"{PROG} check: error: {exc}", file=sys.stderr)
            return 2
    loaded = _finished_runs(args, "check", "nothing to check")
    if loaded is None:
        return 1
    if args.write_reference:
        doc = reference_document(loaded.runs, args.tolerance)
        try:
            path = write_reference(args.write_reference, doc, args.force)
        except FileExistsError as exc:
            print(f"{PROG} check: error: {exc}", file=sys.stderr)
            return 2
        n = sum(len(s["scales"]) for s in doc["series"])
        print(
            f"{PROG} check: wrote {path} ({len(doc['series'])} series, {n} scale(s))",
            file=sys.stderr,
        )
        return 0
    frame = check(loaded.runs, expected, args.alpha)
    n_unchecked = len(unreferenced(loaded.runs, expected))
    table = _check_table(frame, args.alpha, n_unchecked)
    head = {"kind": "scalescope-check", "reference": args.reference, "alpha": args.alpha}
    _emit(args.format, table, frame, "checks", head)
    regressions = int((frame["verdict"] == REGRESSION).sum())
    missing = int((frame["verdict"] == GATE_MISSING).sum())
    summary = f"{len(frame)} check(s): {regressions} regression(s), {missing} missing"
    failed = regressions > 0 or (args.fail_on_missing and missing > 0)
    print(f"{PROG} check: {summary}{'' if failed else '; passed'}", file=sys.stderr)
    return 1 if failed else 0


def export(args: argparse.Namespace) -> int:
    loaded = _finished_runs(args, "export", "nothing to export")
    if loaded is None:
        return 1
    if args.format == "bencher":
        data: Any = export_bencher(loaded.runs)
    else:
        data = export_github_action_benchmark(loaded.runs)
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if args.output:
        write_text_atomic(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0


COMMANDS: dict[str, tuple[Callable[[], argparse.ArgumentParser], Callable[..., int]]] = {
    "compare": (build_compare_parser, compare),
    "check": (build_check_parser, gate),
    "export": (build_export_parser, export),
}


def summarize_sweep(folder: Path, *, project_nodes: Sequence[int] = ()) -> int:
    """The summary a sweep makes of its own folder (written beside its logs, printed): the
    defaults of ``python -m analysis.summarize FOLDER``, projected to ``project_nodes``."""
    args = build_parser().parse_args([str(folder)])
    args.project = list(project_nodes) or None
    return _guarded(summarize, args)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = COMMANDS.get(argv[0]) if argv else None
    if command is not None:
        args = command[0]().parse_args(argv[1:])
        run: Callable[[argparse.Namespace], int] = command[1]
    else:
        args = build_parser().parse_args(argv)
        run = summarize
    return _guarded(run, args)


def _guarded(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``run(args)`` with the command line's answers to what can go wrong outside it."""
    try:
        return run(args)
    except OutputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (| head): not an error
        return 0
    except OSError as exc:  # writing the summary: disk full, permissions...
        print(f"{PROG}: error: cannot write the summary: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
