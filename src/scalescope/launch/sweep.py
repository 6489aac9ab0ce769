"""``scalescope sweep``: validate a sweep, submit it with submitit, watch it, summarise it.

::

    scalescope sweep --config configs/sweeps/local.yaml                  # local CPU sweep, waits
    scalescope sweep --config configs/sweeps/gpu_scaling.yaml \\
        --cluster configs/clusters/<site>.yaml --dry-run                 # resources + sbatch
    scalescope sweep --config configs/sweeps/slurm_local.yaml \\
        --cluster configs/clusters/local.yaml --wait                     # submit, watch, summary

Executor: ``auto`` (the default) submits to Slurm when ``sinfo`` answers within a few
seconds and runs locally otherwise; ``--executor slurm|local`` forces one. A local sweep
runs one job at a time (``--max-parallel``) and always waits; Ctrl-C cancels the running
job and keeps finished ones. A local shape of more CPU processes than this machine's cores
gets a warning on stderr: their sharing would count against its efficiency. Jobs are
submitted round by round (every shape once per round, shuffled within it), never as one
shape's block of repeats. Everything goes to
``<output_dir>/sweeps/<sweep_id>/``: one submitit folder per job (logs carry the
``:::SCALESCOPE`` result record), the run directories, and ``sweep.json`` (every job's
shape, repeat, round, order, state and log paths).

This is the only module of the sweep that prints.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, described
from .dry_run import _jobs_breakdown, _round_orders, _what_is_shuffled, dry_run_lines

if TYPE_CHECKING:
    from .monitor import SweepWatch
    from .sweep_config import SweepPlan

# Nothing heavy at import time: `scalescope --help` builds every subcommand's parser.

LOCAL_POLL_S = 1.0
SLURM_POLL_S = 3.0
INTERRUPT_REFRESH_S = 10.0
"""The most an interrupted Slurm sweep spends asking where its jobs stand before it says."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", required=True, help="sweep file, e.g. configs/sweeps/local.yaml"
    )
    parser.add_argument(
        "--cluster",
        default=None,
        help="cluster profile (configs/clusters/*.yaml); needed for Slurm",
    )
    parser.add_argument(
        "--executor",
        choices=("auto", "slurm", "local"),
        default="auto",
        help="auto: Slurm when sinfo answers, else this machine (default: auto)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs per shape (overrides the file)"
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="train-config overrides for every run, after the sweep file's, e.g. "
        "trainer.max_epochs=1",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate and print every job's resources (and the sbatch script); submit nothing",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="Slurm: watch the jobs until they end, then summarise (local sweeps always wait)",
    )
    parser.add_argument(
        "--max-parallel",
        type=int,
        default=None,
        help="jobs of the sweep running at once. local: default 1 (the cores are shared); "
        "slurm: kept by Slurm dependencies, default the profile's max_parallel (1 in the "
        "local cluster's profile, whose nodes share one machine), else no limit",
    )
    parser.add_argument(
        "--sweep-id", default=None, help="folder name of the sweep (default: <name>-<UTC time>)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the order seed (over the sweep file's order_seed): a --dry-run prints the seed "
        "it drew; pass it here to submit that very order",
    )
    _add_summary_options(parser)


_PROJECT = (
    "the projection's node counts are the sweep file's project_nodes key (e.g. project_nodes: "
    "[2, 4]); a finished sweep: python -m analysis.summarize <sweep folder> --project 2,4"
)
_PLAN = (
    "the training to plan is the sweep file's plan key (e.g. plan: {work: 2e11, unit: "
    "tokens}); a finished sweep: python -m analysis.summarize <sweep folder> --plan-work 2e11"
)
SUMMARY_ONLY = {
    "--project": _PROJECT,
    **{
        f"--plan-{name}": _PLAN
        for name in ("work", "unit", "floor", "charge", "charge-factor", "price")
    },
}
"""The summary's options a sweep takes from its file instead, and what to say instead of
argparse's "unrecognized arguments"."""


def _add_summary_options(parser: argparse.ArgumentParser) -> None:
    """The summary's ``--project`` and ``--plan-*`` options, hidden: given to a sweep, they are
    refused in one line that names the sweep file's key (:func:`_refuse_summary_options`)."""
    for flag in SUMMARY_ONLY:
        parser.add_argument(flag, dest=f"summary{flag}", help=argparse.SUPPRESS)


def _refuse_summary_options(args: argparse.Namespace) -> None:
    for flag, why in SUMMARY_ONLY.items():
        if getattr(args, f"summary{flag}", None) is not None:
            raise ConfigError(f"{flag}: not an option of scalescope sweep: {why}")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    _refuse_summary_options(args)

    console = Console(highlight=False, soft_wrap=True)
    plan, why = _plan(args)
    if args.dry_run:
        if plan.executor == "slurm":  # refused as the submission would, where sinfo answers
            from .executor import SINFO_TIMEOUT_S
            from .slurm_info import check_plan_partitions

            check_plan_partitions(plan, sinfo_timeout_s=SINFO_TIMEOUT_S)
        new_sweep_dir(plan, create=False)
        _warn_core_sharing(plan)
        at_once = max_parallel(plan, args.max_parallel)
        console.print("\n".join(dry_run_lines(plan, why, at_once)), markup=False)
        return 0
    return _launch(plan, why, args, console)


# --- planning ---------------------------------------------------------------------------------


def _plan(args: argparse.Namespace) -> tuple[SweepPlan, str]:
    from ..config.files import parse_overrides
    from .executor import choose_executor
    from .sweep_config import load_sweep_config, plan_sweep

    if args.max_parallel is not None and args.max_parallel < 1:
        raise ConfigError(f"--max-parallel: must be > 0, got {args.max_parallel}")
    sweep = load_sweep_config(args.config)
    profile = None
    if args.cluster:
        from .cluster import load_profile

        profile = load_profile(args.cluster)
    executor, why = choose_executor(args.executor)
    plan = plan_sweep(
        sweep,
        args.config,
        executor=executor,
        profile=profile,
        sweep_id=args.sweep_id,
        repeats=args.repeats,
        extra_overrides=parse_overrides(args.overrides),
        order_seed=args.seed,
    )
    return plan, why


def max_parallel(plan: SweepPlan, requested: int | None) -> int | None:
    """Jobs of the sweep running at once: ``--max-parallel``; else one on this machine (jobs
    side by side share its cores, and each would be timed as if alone); else the profile's
    ``max_parallel`` on Slurm; else no limit (None)."""
    if requested is not None:
        return requested
    if plan.executor == "local":
        return 1
    return plan.profile.max_parallel if plan.profile is not None else None


def new_sweep_dir(plan: SweepPlan, *, create: bool) -> None:
    """Refuse a sweep folder that exists: earlier results are never overwritten. A dry run
    asks too (``create=False``), so that it fails where the submission would; the submission
    creates the folder, and a sweep started under the same id a moment earlier still loses."""
    taken = plan.sweep_dir.exists()
    if create and not taken:
        try:
            plan.sweep_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            taken = True
    if taken:
        raise ConfigError(
            f"sweep folder {plan.sweep_dir} exists: earlier results are never overwritten; "
            "pass another --sweep-id"
        )


def _node_cores(plan: SweepPlan) -> int | None:
    """The cores of a node the sweep's jobs run on, where the launcher knows them: this
    machine's for the local executor; None on Slurm, whose profile names no cores per node
    (Slurm gives each task its ``cpus_per_task``)."""
    from ..procinfo import usable_cores

    return usable_cores() if plan.executor == "local" else None


def core_sharing_lines(plan: SweepPlan, cores: int | None) -> list[str]:
    """A line for each shape that puts more CPU processes on a node than ``cores`` (None:
    unknown, nothing said), once per shape whatever its precisions, accumulations and
    strategies. A job with GPUs runs one process per GPU and is never one of them."""
    from ..procinfo import core_sharing

    if cores is None:
        return []
    lines: dict[str, str] = {}
    for sp in plan.shapes:
        if sp.resources.gpus_per_node or sp.shape.label in lines:
            continue
        note = core_sharing(sp.shape.devices_per_node, cores)
        if note is not None:
            lines[sp.shape.label] = f"shape {sp.shape.label}: {note}"
    return list(lines.values())


def _warn_core_sharing(plan: SweepPlan) -> None:
    """Said by the dry run and the submission alike, before anything runs; never an error."""
    for line in core_sharing_lines(plan, _node_cores(plan)):
        print(f"scalescope sweep: warning: {line}", file=sys.stderr, flush=True)


# --- launching and watching -------------------------------------------------------------------


def _launch(plan: SweepPlan, why: str, args: argparse.Namespace, console: Any) -> int:
    from .executor import Launcher, render_sbatch, require_slurm
    from .monitor import SweepWatch
    from .slurm_info import check_plan_partitions

    if plan.executor == "slurm":
        require_slurm()
        check_plan_partitions(plan)  # the partition's nodes, their CPUs and GPUs, as sinfo says
        for sp in plan.shapes:  # submitit checks the parameters while rendering: fail before any
            render_sbatch(plan, sp)
    new_sweep_dir(plan, create=True)
    _warn_core_sharing(plan)
    local = plan.executor == "local"
    at_once = max_parallel(plan, args.max_parallel)
    launcher = Launcher(plan, max_parallel=None if local else at_once)
    watch = SweepWatch(plan, launcher, max_parallel=(at_once or 1) if local else 1)
    console.print(
        f"sweep {plan.sweep_id}: {plan.num_jobs} jobs ({_jobs_breakdown(plan)}), "
        f"executor {plan.executor} ({why})",
        markup=False,
    )
    console.print(f"logs: {plan.sweep_dir}", markup=False)
    console.print(
        f"order: {_what_is_shuffled(plan)} shuffled with seed {plan.order_seed} "
        f"({plan.seed_source}): " + "; ".join(_round_orders(plan)),
        markup=False,
    )
    _write_manifest(plan, watch)
    if not local:
        try:
            watch.submit_slurm()
        finally:  # also when sbatch refused a job midway: what became of every job
            _write_manifest(plan, watch)
        for h in watch.handles:
            console.print(
                f"  submitted {h.job_id}  shape {h.label}  repeat {h.repeat}  log {h.stdout}",
                markup=False,
            )
        if not args.wait:
            console.print(
                "not waiting (--wait watches them): squeue --me shows the queue; "
                f"python -m analysis.summarize {plan.sweep_dir} summarises once they ended",
                markup=False,
            )
            return 0
    elif not args.wait:
        console.print("local jobs run from this process: waiting for them", markup=False)

    try:
        _watch(watch, console, LOCAL_POLL_S if local else SLURM_POLL_S)
    except KeyboardInterrupt:
        return _interrupted(watch, plan, console)
    _write_manifest(plan, watch)
    _tidy(plan)
    # On a terminal the live table stays on screen with its final states.
    return _report(watch, plan, console, show_table=not console.is_terminal)


def _state_style(state: str) -> str:
    return {"COMPLETED": "green", "RUNNING": "cyan", "FAILED": "red", "CANCELLED": "yellow"}.get(
        state, "white" if state in ("PENDING", "WAITING") else "red"
    )


def status_table(watch: SweepWatch) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"sweep {watch.plan.sweep_id}", title_justify="left")
    # A job pending for a reason that will not clear says so, with its scancel.
    notes = any(st.active and st.detail for _, st in watch.rows())
    for col, justify in (
        ("job", "right"),
        ("shape", "left"),
        ("world", "right"),
        ("repeat", "right"),
        ("state", "left"),
        ("elapsed", "right"),
        *((("note", "left"),) if notes else ()),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for h, st in watch.rows():
        elapsed = "" if st.elapsed_s is None else f"{st.elapsed_s:.0f} s"
        cells: list[Any] = [
            h.job_id or "-",
            h.label,
            str(h.shape.world_size),
            str(h.repeat),
            Text(st.state, style=_state_style(st.state)),
            elapsed,
        ]
        if notes:
            cells.append(Text(st.detail or "", style="yellow") if st.active else "")
        table.add_row(*cells)
    return table


def _line(h: Any, st: Any) -> str:
    detail = f"  {st.detail}" if st.detail and st.state != "COMPLETED" else ""
    elapsed = "" if st.elapsed_s is None or st.active else f"  {st.elapsed_s:.0f} s"
    where = f"  {h.job_id or '-'}  shape {h.label}  repeat {h.repeat}"
    return f"{where}  {st.state}{elapsed}{detail}"


def _watch(watch: SweepWatch, console: Any, poll_s: float) -> None:
    """Poll until every job ended: a live table and progress bar on a terminal, one line per
    state change otherwise (logs, CI, tests)."""
    from rich.console import Group
    from rich.live import Live
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not console.is_terminal:
        while True:
            for h in watch.poll():
                console.print(_line(h, watch.status_of(h)), markup=False)
            if watch.finished:
                return
            time.sleep(poll_s)

    progress = Progress(
        TextColumn("jobs ended"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task("jobs", total=len(watch.handles))
    with Live(console=console, refresh_per_second=4) as live:
        while True:
            watch.poll()
            ended = sum(1 for _, st in watch.rows() if not st.active)
            progress.update(task, completed=ended)
            live.update(Group(status_table(watch), progress))
            if watch.finished:
                return
            time.sleep(poll_s)


def _tidy(plan: SweepPlan) -> None:
    # submitit's local controller creates its folder argument literally ("%j"), empty.
    with contextlib.suppress(OSError):
        (plan.sweep_dir / "%j").rmdir()


def _interrupted(watch: SweepWatch, plan: SweepPlan, console: Any) -> int:
    # A second Ctrl-C must not leave half-stopped processes behind: ignore it while cleaning up.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # The last poll may be seconds old: a job may have ended or started since.
        stale = watch.refresh(INTERRUPT_REFRESH_S)
        finished = [h for h, st in watch.rows() if st.state == "COMPLETED"]
        if plan.executor == "local":
            cancelled, never = watch.cancel()
            what = ", ".join(f"{h.job_id} ({h.label} repeat {h.repeat})" for h in cancelled)
            console.print(
                f"interrupted: cancelled {what or 'no running job'}; {len(never)} not started; "
                f"{len(finished)} finished result(s) kept in {plan.sweep_dir}",
                markup=False,
            )
        else:
            active = [h.job_id for h, st in watch.rows() if st.active and h.job_id]
            stays = (
                f"{len(active)} job(s) stay on Slurm (scancel {' '.join(active)} stops them)"
                if active
                else "no job stays on Slurm"
            )
            seen = f"; states as last seen: {stale}" if stale else ""
            console.print(
                f"interrupted: stopped watching; {stays}{seen}; logs in {plan.sweep_dir}",
                markup=False,
            )
        _write_manifest(plan, watch)
        _tidy(plan)
        if finished or plan.executor != "local":  # what has finished can be summarised now
            console.print(
                f"summarise them: python -m analysis.summarize {plan.sweep_dir}", markup=False
            )
    finally:
        signal.signal(signal.SIGINT, previous)
    return 130


def failed_logs(h: Any, st: Any) -> tuple[Path | None, Path | None]:
    """The logs of the task a failed job's detail is about (``st.task``), else task 0's."""
    if st.task and getattr(h, "job", None) is not None:
        paths = h.task_paths(st.task)
        return Path(paths.stdout), Path(paths.stderr)
    return h.stdout, h.stderr


def _report(watch: SweepWatch, plan: SweepPlan, console: Any, *, show_table: bool) -> int:
    if show_table:
        console.print(status_table(watch))
    failed = watch.failed
    for h, st in failed:
        out, err = failed_logs(h, st)
        console.print(
            f"{st.state} {h.job_id} (shape {h.label} repeat {h.repeat}): {st.detail}; "
            f"log {out}, errors {err}",
            markup=False,
        )
    rc = run_summary(plan, console)
    if rc is None:
        console.print(
            f"results: {plan.sweep_dir} (each job's log holds its :::SCALESCOPE record)",
            markup=False,
        )
        rc = 0
    if failed:
        console.print(f"{len(failed)} of {len(watch.handles)} jobs did not complete", markup=False)
        return 1
    return rc


def run_summary(plan: SweepPlan, console: Any) -> int | None:
    """The summary of the sweep's folder (``analysis.summarize.summarize_sweep``, a typed
    call) as its sweep file asks (projection, its network, plan), when the analysis package
    is installed beside the launcher."""
    try:
        found = importlib.util.find_spec("analysis.summarize") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return None
    module = importlib.import_module("analysis.summarize")
    summarize_sweep = getattr(module, "summarize_sweep", None)
    if not callable(summarize_sweep):
        return None
    try:
        kw: dict[str, Any] = {}  # an older analysis takes neither
        if plan.summary_plan:  # its errors name the sweep file's keys (plan.unit), not --plan-unit
            kw = {"plan": dict(plan.summary_plan), "sweep_file": plan.sweep_file}
        if plan.project_network is not None:
            kw["network"] = plan.project_network
        return int(
            summarize_sweep(plan.sweep_dir, project_nodes=tuple(plan.project_nodes), **kw) or 0
        )
    except Exception as exc:
        console.print(f"summary failed: {described(exc)}", markup=False)
        return 1


# --- the sweep's own record -------------------------------------------------------------------


def manifest(plan: SweepPlan, watch: SweepWatch) -> dict[str, Any]:
    """sweep.json: which job ran which shape and repeat, and how it ended (failures included)."""
    jobs = []
    for order, (h, st) in enumerate(watch.rows()):
        jobs.append(
            {
                "job_id": h.job_id,
                "shape": h.label,
                "nodes": h.shape.nodes,
                "devices_per_node": h.shape.devices_per_node,
                "world_size": h.shape.world_size,
                "precision": h.plan.precision,
                "accumulate_grad_batches": h.plan.accumulate,
                **({"strategy": h.plan.strategy} if h.plan.strategy_axis else {}),
                "repeat": h.repeat,
                "round": h.repeat + 1,
                "profiled": h.plan.profiles(h.repeat),
                "order": order,
                "cluster": plan.cluster,
                "state": st.state,
                "detail": st.detail,
                "elapsed_s": st.elapsed_s,
                "stdout": None if h.stdout is None else str(h.stdout),
                "stderr": None if h.stderr is None else str(h.stderr),
            }
        )
    return {
        "sweep_id": plan.sweep_id,
        "name": plan.name,
        "executor": plan.executor,
        "profile": plan.profile.name if plan.profile else None,
        "sweep_file": str(plan.sweep_file.resolve()),
        "train_config": str(plan.train_config_file.resolve()),
        "repeats": plan.repeats,
        "profile_repeat": plan.profile_repeat,
        "order_seed": plan.order_seed,
        "cluster": plan.cluster,
        "shapes": [
            {
                "shape": sp.shape.label,
                "world_size": sp.shape.world_size,
                "precision": sp.precision,
                "accumulate_grad_batches": sp.accumulate,
                **({"strategy": sp.strategy} if sp.strategy_axis else {}),
                "global_batch_size": sp.global_batch_size,
                "per_device_batch_size": sp.per_device_batch_size,
                "config": sp.config_dict(),
            }
            for sp in plan.shapes
        ],
        "jobs": jobs,
        "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv,
    }


def _write_manifest(plan: SweepPlan, watch: SweepWatch) -> None:
    from ..record import write_json_atomic

    write_json_atomic(plan.sweep_dir / "sweep.json", json.loads(json.dumps(manifest(plan, watch))))
