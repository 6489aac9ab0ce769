"""Summarise scaling runs: ``python -m analysis.summarize PATH [PATH...]``.

Reads every result record and failed job under the given folders or files, prints the
summary (``--format table|markdown|json|csv``) and writes all tables, charts, the JSON
document, ``report.md`` and ``report.html`` to ``--out`` (default ``<first PATH>/summary``),
replacing a previous summary there all at once.

Exit status: 0 when something usable was found (finished or failed jobs), 1 when nothing
was, 2 for a usage error or an output folder that must not be replaced.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.analyze import Analysis, ProjectionRequest, analyze
from analysis.commands.common import (
    LOOKED_FOR,
    PROG,
    fill,
    guarded,
    rich_console,
    warn,
)
from analysis.commands.findings_text import print_findings
from analysis.commands.plan_options import (
    PLAN_ONLY,
    named_problem,
    plan_names,
    plan_request,
    print_plan,
    sweep_plan_names,
)
from analysis.commands.summarize_args import build_parser
from analysis.compute.metrics import (
    BaselineSpec,
)
from analysis.compute.plan import PlanError, PlanRequest
from analysis.present.display import DisplayTable
from analysis.present.plan.text import study_markdown
from analysis.present.report.outdir import check_replaceable
from analysis.present.report.report import FINDINGS_SECTIONS, Settings, document, dumps
from analysis.present.report.summary_files import csv_frames, write_outputs
from analysis.present.tables.tables import all_tables, markdown, rich_table
from analysis.read.frame import Loaded, load_all, written
from scalescope.errors import described


class _UsageError(Exception):
    """A bad value or combination of arguments: one line on stderr, exit status 2."""


def _plan(args: argparse.Namespace) -> PlanRequest | None:
    defaults = {n: build_parser().get_default(n) for n in PLAN_ONLY}
    try:
        return plan_request(args, defaults)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None


def _baseline(args: argparse.Namespace) -> BaselineSpec | None:
    try:
        return BaselineSpec.parse(args.baseline) if args.baseline else None
    except ValueError as exc:
        raise _UsageError(f"--baseline: {exc}") from None


def _check_combinations(args: argparse.Namespace) -> None:
    """Arguments that need another one, or exclude it."""
    if args.comet_view and args.comet in (None, "offline"):
        need = "--comet-view needs --comet auto or online" + (
            " (an offline archive has no server to hold a view)" if args.comet else ""
        )
        raise _UsageError(need)
    if args.comet is not None and args.no_write:
        raise _UsageError("--comet logs the written summary: drop --no-write")
    if args.format == "csv" and args.table.startswith("projection") and args.project is None:
        raise _UsageError(f"--table {args.table} needs --project NODES")
    if args.format == "csv" and args.table == "plan" and args.plan_work is None:
        raise _UsageError("--table plan needs --plan-work N")
    if args.network is not None or args.devices_per_node is not None:
        if args.project is None:
            flag = "--network" if args.network is not None else "--devices-per-node"
            raise _UsageError(f"{flag} needs --project NODES")


def _check_paths(args: argparse.Namespace) -> None:
    """Nothing to read at all is a usage error; one path missing beside others that exist
    is a warning, and the rest is read."""
    if not any(os.path.exists(path) for path in args.paths):
        raise _UsageError(f"{args.paths[0]}: no such file or folder")


def _network_profile(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.network is None:
        return None
    from analysis.compute.projection.network_runs import read_network

    try:
        return read_network(args.network)
    except ValueError as exc:
        raise _UsageError(f"--network: {exc}") from None


# --- printing -------------------------------------------------------------------------------


def _markdown_all(tables: Sequence[DisplayTable], notes: Sequence[str]) -> str:
    parts = [markdown(t) for t in tables]
    if notes:
        parts.append("## Read this first\n\n" + "".join(f"- {n}\n" for n in notes))
    return "\n".join(parts)


def _print_headline(analysis: Analysis, failures: pd.DataFrame, max_rows: int = 0) -> None:
    """The terminal's default: the headline tables, a line per failed job (its cause; at
    most ``max_rows``, 0 = all), and the notes."""
    from analysis.present.tables.headline_tables import headline_tables
    from analysis.present.tables.runs_tables import failure_job_ids, failure_label

    console = rich_console(sys.stdout)
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
        job_ids = failure_job_ids(failures)
        for i, r in shown.iterrows():
            detail = f": {r['detail']}" if isinstance(r["detail"], str) and r["detail"] else ""
            console.print(
                f"  • {job_ids[i]} ({failure_label(r)}): {r['reason_label']}{detail}",
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
    the terminal's width with their continuation lines indented under the bullet's text; one
    line each where no width is known (:func:`analysis.commands.common.fill`)."""
    if notes:
        console.print("[bold]Read this first[/bold]")
        for n in notes:
            text = fill(console, n, initial_indent="  • ", subsequent_indent="    ")
            console.print(text, markup=False, soft_wrap=True)


def _print_tables(tables: Sequence[DisplayTable], notes: Sequence[str]) -> None:
    console = rich_console(sys.stdout)
    for t in tables:
        if t.name != "problems":  # already on stderr as warnings
            console.print(rich_table(t))
            console.print()
    _print_notes(console, notes)


# --- writing --------------------------------------------------------------------------------


def _log_to_comet(args: argparse.Namespace, doc: dict[str, Any], written: Path, runs: Any) -> None:
    """The scaling-summary experiments (analysis.present.report.comet); a failure is a warning
    line, never a failed summary (the files are written already)."""
    from analysis.present.report.comet import log_scaling_summaries

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
        from scalescope.job.tracking.comet import KEY_ENV, redact

        why = redact(described(exc), [os.environ.get(KEY_ENV, "")])
        print(f"{PROG}: warning: comet: {why}", file=sys.stderr)
    else:
        for line in lines:
            # the jobs' reasons name their config key; here the user's word was --comet
            line = line.replace(f"tracking.mode={args.comet}", f"--comet {args.comet}")
            print(f"{PROG}: comet: {line}", file=sys.stderr)
    if args.comet_view:
        from analysis.present.report.comet import publish_scaling_view

        made, line = publish_scaling_view(
            project=args.comet_project, workspace=args.comet_workspace
        )
        print(f"{PROG}: {'' if made else 'warning: '}comet: {line}", file=sys.stderr)


def _default_out(first: str) -> Path:
    path = Path(first)
    return (path if path.is_dir() else path.parent) / "summary"


def _report_written(
    args: argparse.Namespace, written: Path, loaded: Loaded, doc: dict[str, Any]
) -> None:
    """Where the summary went, on stderr; Comet where asked; the report's path on stdout
    under the headline view."""
    # The folder on a line of its own, as on stdout: it can be as long as the output folder's.
    print(
        f"{PROG}: wrote report.md, report.html, summary.json, CSV tables"
        f"{', charts' if not args.no_charts and len(loaded.runs) else ''} in\n  {written}",
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


# --- the command ----------------------------------------------------------------------------


def _read(args: argparse.Namespace, target: Path | None) -> Loaded:
    """Every record and failed job under the paths (the output folder left out), its
    problems warned on stderr."""
    prefetch = None
    if target is not None and not args.no_charts:
        # matplotlib's import (about a second) overlaps the reading, where this process
        # mostly waits for its workers; the chart process forked later inherits it.
        prefetch = threading.Thread(
            target=importlib.import_module, args=("analysis.present.charts.charts",)
        )
        prefetch.start()
    loaded = load_all(args.paths, jobs=args.jobs, exclude=[target] if target else [])
    if prefetch is not None:
        prefetch.join()
    # Everything read stays alive until exit: spare the cyclic collector rescanning it.
    gc.freeze()
    warn(loaded.problems)
    return loaded


def _analyze(
    args: argparse.Namespace,
    loaded: Loaded,
    baseline: BaselineSpec | None,
    profile: dict[str, Any] | None,
    plan: PlanRequest | None = None,
) -> Analysis:
    return analyze(
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
        plan=plan,
    )


def _document(args: argparse.Namespace, loaded: Loaded, analysis: Analysis) -> dict[str, Any]:
    """summary.json's document."""
    settings = Settings(
        args.baseline, args.confidence, args.cv_threshold, args.loss_tolerance, args.acc_tolerance
    )
    return document(
        inputs=args.paths,
        files_read=loaded.files_read,
        runs=loaded.runs,
        failures=loaded.failures,
        problems=loaded.problems,
        analysis=analysis,
        settings=settings,
    )


def _print(
    args: argparse.Namespace,
    loaded: Loaded,
    analysis: Analysis,
    tables: Sequence[DisplayTable],
    doc: dict[str, Any],
    doc_text: str,
) -> None:
    """The summary on stdout in the asked ``--format``."""
    if args.format == "table" and args.wide:
        _print_tables(tables, analysis.notes)
        print_findings(doc, [key for key, *_ in FINDINGS_SECTIONS])
        print_plan(doc)
    elif args.format == "table":
        _print_headline(analysis, loaded.failures, args.max_rows)
        print_findings(doc)
        print_plan(doc)
    elif args.format == "markdown":
        sys.stdout.write(_markdown_all(tables, analysis.notes))
        sys.stdout.write("\n".join(["", *study_markdown(doc)]) if doc.get("plan_study") else "")
    elif args.format == "json":
        sys.stdout.write(doc_text)
    else:
        written(csv_frames(loaded, analysis)[args.table]).to_csv(sys.stdout, index=False)


def _discard_stdout() -> None:
    """Send what is left for stdout nowhere: its reader closed the pipe (``| head``). The
    descriptor itself is pointed at the null device, so the interpreter's last flush finds
    nothing to fail on either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no descriptor (a captured stream)
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    finally:
        os.close(devnull)


def summarize(args: argparse.Namespace) -> int:
    try:
        baseline = _baseline(args)
        _check_combinations(args)
        _check_paths(args)
        profile = _network_profile(args)
        plan = _plan(args)
    except _UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    target = None if args.no_write else Path(args.out) if args.out else _default_out(args.paths[0])
    if target is not None:
        check_replaceable(target.absolute())
    loaded = _read(args, target)
    if loaded.runs.empty and loaded.failures.empty:
        print(
            f"{PROG}: nothing usable in {', '.join(args.paths)}: no result record and no "
            f"failed job; {LOOKED_FOR}.",
            file=sys.stderr,
        )
        return 1
    try:
        analysis = _analyze(args, loaded, baseline, profile, plan)
    except PlanError as exc:  # a unit the records do not count: nothing written
        print(f"{PROG}: error: {named_problem(str(exc), plan_names(args))}", file=sys.stderr)
        return 2
    tables = all_tables(
        loaded.runs, loaded.failures, loaded.problems, analysis, max_rows=args.max_rows
    )
    doc = _document(args, loaded, analysis)
    doc_text = dumps(doc) if args.format == "json" or target is not None else ""
    try:
        _print(args, loaded, analysis, tables, doc, doc_text)
    except BrokenPipeError:  # | head: the reader has what it wanted; the files still follow
        _discard_stdout()
    if target is not None:
        written = write_outputs(
            target, loaded, analysis, tables, doc, doc_text, not args.no_charts, args.jobs
        )
        _report_written(args, written, loaded, doc)
    elif args.format == "table" and not args.wide:
        print("Nothing written (--no-write); --wide prints every table here.")
    return 0


def summarize_sweep(
    folder: Path,
    *,
    project_nodes: Sequence[int] = (),
    plan: Mapping[str, Any] | None = None,
    sweep_file: str | os.PathLike[str] | None = None,
    network: str | os.PathLike[str] | None = None,
) -> int:
    """The summary a sweep makes of its own folder (written beside its logs, printed): the
    defaults of ``python -m analysis.summarize FOLDER``, projected to ``project_nodes``,
    planned as the sweep file's ``plan:`` says (its keys: ``work``, ``unit``, ``floor``,
    ``charge_factor``, ``price_per_gpu_hour``). Its errors name the sweep file's keys
    (``sweep_file: plan.unit``), not the options the user never typed. ``network``: the
    sweep file's ``project_network`` (``--network``)."""
    args = build_parser().parse_args([str(folder)])
    args.project = list(project_nodes) or None
    if network is not None:
        args.network = str(network)
    if plan:
        args.plan_work = plan.get("work")
        args.plan_unit = plan.get("unit", args.plan_unit)
        args.plan_floor = plan.get("floor", args.plan_floor)
        args.plan_charge = plan.get("charge", args.plan_charge)
        args.plan_charge_factor = plan.get("charge_factor")
        args.plan_price = plan.get("price_per_gpu_hour")
        args.plan_names = sweep_plan_names(None if sweep_file is None else str(sweep_file))
    return guarded(summarize, args)
