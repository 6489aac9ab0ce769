"""Builders for the analysis tests: synthetic records made through scalescope.record.

Kept out of conftest.py on purpose (that file belongs to the job-side tests); import what
you need: ``from analysis_helpers import make_result, write_log``.

The command runs two ways: :func:`summarize_main` calls ``analysis.summarize.main`` in this
process with ``--jobs 1`` (the unit tier), :func:`run_summarize` starts it as a user does
(tests/integration only). Both see the same terminal width and working folder.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scalescope.record import Identity, ResultRecord, StartEvent, encode

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "logs"
GOLDEN = REPO / "tests" / "golden" / "analysis"


def make_identity(
    job_id: str = "1000",
    *,
    world: tuple[int, int] = (1, 1),
    restart_count: int = 0,
    scaling_mode: str = "strong",
    precision: str = "32",
    accelerator: str = "cpu",
    config_name: str = "spiral",
    global_batch_size: int = 256,
    array: tuple[str, int] | None = None,
    cluster: str | None = None,
) -> Identity:
    nodes, devices = world
    n = nodes * devices
    per_device = global_batch_size // n if scaling_mode == "strong" else global_batch_size
    return Identity(
        run_id=f"{job_id}.r{restart_count}",
        job_id=job_id,
        array_job_id=array[0] if array else None,
        array_task_id=array[1] if array else None,
        restart_count=restart_count,
        launcher="slurm",
        config_name=config_name,
        workload="spiral",
        scaling_mode=scaling_mode,
        precision=precision,
        accelerator=accelerator,
        nodes=nodes,
        devices_per_node=devices,
        world_size=n,
        per_device_batch_size=per_device,
        global_batch_size=per_device * n,
        sweep_id="sweep-test",
        run_dir=f"outputs/runs/{job_id}",
        started_at="2025-01-01T10:00:00+00:00",
        cluster=cluster,
    )


def make_result(
    job_id: str = "1000",
    *,
    train_time_s: float = 100.0,
    epochs: int = 4,
    val_loss: float | None = 0.12,
    val_acc: float | None = 0.95,
    train_samples: int = 8000,
    setup_s: float = 5.0,
    warmup_extra_s: float = 0.0,
    steady: bool = True,
    device_name: str = "cpu",
    versions: dict[str, str] | None = None,
    **identity: Any,
) -> ResultRecord:
    """A finished run whose epochs take ``train_time_s / epochs`` each, plus
    ``warmup_extra_s`` in the first (the warm-up); ``steady`` adds the steady-state fields
    (epochs 2.. are the steady state), as records of this version carry them."""
    ident = make_identity(job_id, **identity)
    epoch = train_time_s / epochs
    epoch_times = [epoch + warmup_extra_s] + [epoch] * (epochs - 1)
    train_time_s = sum(epoch_times)
    samples_per_s = train_samples * epochs / train_time_s
    steps_per_epoch = train_samples // ident.global_batch_size
    steady_s = epoch * (epochs - 1) if steady and epochs > 1 else None
    steady_rate = train_samples * (epochs - 1) / steady_s if steady_s else None
    return ResultRecord(
        identity=ident,
        node_names=[f"node{i + 1}" for i in range(ident.nodes)],
        device_name=device_name,
        train_samples=train_samples,
        val_samples=2000,
        epochs=epochs,
        steps=epochs * (train_samples // ident.global_batch_size),
        steps_per_epoch=train_samples // ident.global_batch_size,
        setup_time_s=setup_s,
        train_time_s=train_time_s,
        val_time_s=epochs * 0.5,
        job_time_s=setup_s + train_time_s + epochs * 0.5,
        epoch_times_s=epoch_times,
        mean_epoch_time_s=train_time_s / epochs,
        mean_epoch_time_excl_first_s=epoch if epochs > 1 else None,
        samples_per_s=samples_per_s,
        samples_per_s_per_device=samples_per_s / ident.world_size,
        step_time_s=epoch / max(1, train_samples // ident.global_batch_size),
        predicted_epoch_time_s=epoch,
        val_loss_final=val_loss,
        val_acc_final=val_acc,
        val_loss_best=val_loss,
        val_acc_best=val_acc,
        peak_mem_gib=None,
        peak_host_rss_gib=[0.5] * ident.world_size,
        model_flops_per_sample=None,
        mfu=None,
        versions=versions or {"python": "3.11.2", "torch": "2.13.0+cpu", "lightning": "2.6.6"},
        config={"name": ident.config_name},
        finished_at="2025-01-01T10:05:00+00:00",
        warmup_steps=steps_per_epoch if steady_s else None,
        steady_steps=steps_per_epoch * (epochs - 1) if steady_s else None,
        steady_time_s=steady_s,
        steady_samples_per_s=steady_rate,
        steady_samples_per_s_per_device=steady_rate / ident.world_size if steady_rate else None,
    )


def start_of(record: ResultRecord) -> StartEvent:
    return StartEvent(identity=record.identity)


def noise(n: int = 20, rank: int = 0) -> list[str]:
    out = []
    for i in range(n):
        out.append(
            f"{rank}: node1:{1000 + rank}:{2000 + rank} [0] NCCL INFO Channel {i:02d}/02 : "
            "0[0] -> 1[1]"
        )
        out.append(
            "/lib/python3.11/site-packages/lightning/pytorch/trainer/connectors/"
            "data_connector.py:425: The 'train_dataloader' does not have many workers"
        )
    return out


def write_log(path: Path, *lines: str | StartEvent | ResultRecord, prefix: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = []
    for line in lines:
        text.append(prefix + encode(line) if not isinstance(line, str) else line)
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


COLUMNS = "160"  # the terminal width of every table the tests read, in either way


def run_summarize(
    *args: str | os.PathLike[str], env: dict[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """The real command, in a subprocess, as a user runs it (integration tests only)."""
    full_env = {**os.environ, "COLUMNS": COLUMNS, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "analysis.summarize", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=300,
    )


@dataclass(frozen=True)
class Result:
    """What :func:`summarize_main` returns: the fields of a finished subprocess."""

    returncode: int
    stdout: str
    stderr: str


def in_process_argv(args: list[str]) -> list[str]:
    """``args`` with ``--jobs 1`` after the subcommand (compare, check, export), if any,
    else first: every parser takes it, and 1 starts no process."""
    from analysis.summarize import COMMANDS

    if any(a == "--jobs" or a.startswith("--jobs=") for a in args):
        return args
    if args and args[0] in COMMANDS:
        return [args[0], "--jobs", "1", *args[1:]]
    return ["--jobs", "1", *args]


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _working_folder(path: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def summarize_main(
    *args: str | os.PathLike[str], env: dict[str, str] | None = None, cwd: Path = REPO
) -> Result:
    """``python -m analysis.summarize ARGS --jobs 1``, run in this process: the same
    arguments, terminal width (COLUMNS), environment additions and working folder as
    :func:`run_summarize`, stdout and stderr captured, the exit status of an argparse
    error included."""
    import analysis.summarize

    argv = in_process_argv([str(a) for a in args])
    out, err = io.StringIO(), io.StringIO()
    with (
        _environment({"COLUMNS": COLUMNS, **(env or {})}),
        _working_folder(cwd),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = analysis.summarize.main(argv)
        except SystemExit as exc:  # argparse: usage errors (2), --help (0)
            if isinstance(exc.code, int) or exc.code is None:
                code = exc.code or 0
            else:  # as the interpreter does with sys.exit("message")
                print(exc.code, file=sys.stderr)
                code = 1
        finally:
            gc.unfreeze()  # the command freezes what it read: it lives until exit there
    return Result(code, out.getvalue(), err.getvalue())


def with_restart(record: ResultRecord, restart: int) -> ResultRecord:
    ident = replace(
        record.identity, restart_count=restart, run_id=f"{record.identity.job_id}.r{restart}"
    )
    return replace(record, identity=ident)
