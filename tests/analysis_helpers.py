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

import record_factory

from scalescope.record import ResultRecord, StartEvent, encode

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "logs"
GOLDEN = REPO / "tests" / "golden" / "analysis"


make_identity = record_factory.identity
"""A CPU spiral run of ``world`` (job ``1000``, 1x1, strong, fp32, global batch 256 unless
told otherwise)."""


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
    steps_per_epoch = train_samples // ident.global_batch_size
    optional: dict[str, Any] = {"versions": versions} if versions else {}
    return record_factory.record(
        ident,
        epoch_times_s=[epoch + warmup_extra_s] + [epoch] * (epochs - 1),
        train_samples=train_samples,
        setup_time_s=setup_s,
        val_time_s=epochs * 0.5,
        val_loss=val_loss,
        val_acc=val_acc,
        steady=steady,
        device_name=device_name,
        # the figures of equal later epochs, as written (not re-summed)
        mean_epoch_time_excl_first_s=epoch if epochs > 1 else None,
        step_time_s=epoch / max(1, steps_per_epoch),
        predicted_epoch_time_s=epoch,
        **({"steady_time_s": epoch * (epochs - 1)} if steady and epochs > 1 else {}),
        **optional,
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


def write_runs(folder: Path, times: dict[int, list[float]]) -> Path:
    """One log per run in ``folder`` (its start event and its record), from {world size (1, 2
    or 4 devices on one node): [train_time_s of each repeat]}; job ids are the world size and
    the repeat (``"101"``)."""
    worlds = {1: (1, 1), 2: (1, 2), 4: (1, 4)}
    for world, values in times.items():
        for i, t in enumerate(values):
            r = make_result(f"{world}{i:02d}", world=worlds[world], train_time_s=t)
            write_log(folder / f"slurm-{world}{i:02d}.out", start_of(r), r)
    return folder


def with_restart(record: ResultRecord, restart: int) -> ResultRecord:
    ident = replace(
        record.identity, restart_count=restart, run_id=f"{record.identity.job_id}.r{restart}"
    )
    return replace(record, identity=ident)
