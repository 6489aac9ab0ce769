"""Builders and runners for the job-side tests (record, config, topology, workload, train).

Kept out of conftest.py (another area's fixtures live there); import what you need:
``from core_helpers import make_identity, make_result, run_train``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import record_factory

from scalescope.record import (
    Identity,
    RecordError,
    ResultRecord,
    StartEvent,
    decode_line,
    find_marker,
)

REPO = Path(__file__).resolve().parents[1]

CPU = "trainer.accelerator=cpu"
"""The tests' runs are CPU processes (gloo ranks), on a machine with a GPU as on one without:
``auto`` would put a 2-process run on a node's one GPU and refuse it. Every training process a
test starts says so (run_train and two_rank_run put it first, so a test may still ask for a
GPU after it; the Slurm helpers add it to every job's overrides)."""

TINY = (
    CPU,
    "trainer.max_epochs=2",
    "workload.num_samples=2000",
    "trainer.batch_size=64",
    # Quoted: a bare `off` is read as YAML 1.1 false (see the note in test_config.py).
    "tracking.mode='off'",
)
"""Overrides that make a real training run take a few seconds on two shared CPU cores."""

TINY_GPT = (
    "workload.name=gpt",
    "workload.preset=tiny",
    "workload.train_sequences=256",
    "workload.val_sequences=64",
    "workload.lr=0.01",
    "trainer.batch_size=32",
    "trainer.max_epochs=3",
    "trainer.accelerator=cpu",
    "trainer.warmup_steps=2",
    "trainer.log_every_n_steps=4",
    "tracking.mode=off",
)
"""The gpt workload's tiny preset shrunk to a few seconds a run on two shared CPU cores."""

TRAIN_TIMEOUT_S = 600
"""Generous: the machine's two cores are shared with other test runs."""


def make_identity(**changes: Any) -> Identity:
    """A run as srun would start it: array task 3 of job 81234, second attempt, 2x4 ranks."""
    base: dict[str, Any] = {
        "run_id": "81230_3.r1",
        "per_device_batch_size": 512,
        "array_job_id": "81230",
        "array_task_id": 3,
        "sweep_id": "spiral-gpu-scaling-20250301T120000Z",
        "run_dir": "/scratch/u/outputs/sweeps/spiral-gpu-scaling/runs/spiral/81230_3.r1",
        "started_at": "2025-03-01T12:00:07+00:00",
    }
    base.update(changes)
    ident = record_factory.identity(
        base.pop("job_id", "81234"),
        world=(base.pop("nodes", 2), base.pop("devices_per_node", 4)),
        restart_count=base.pop("restart_count", 1),
        precision=base.pop("precision", "bf16-mixed"),
        accelerator=base.pop("accelerator", "gpu"),
        **base,
    )
    # the global batch as given, like every other field: a test may set one without the other
    return replace(ident, global_batch_size=changes.get("global_batch_size", 4096))


def make_result(identity: Identity | None = None, **changes: Any) -> ResultRecord:
    """A finished 2-node job with every field filled the way the trainer fills it."""
    ident = identity or make_identity()
    base: dict[str, Any] = {
        "node_names": ["gpu017"] * 4 + ["gpu018"] * 4,
        "device_name": "NVIDIA A100-SXM4-80GB",
        "steps_per_epoch": 781,
        "samples_per_s": 3905 * 4096 / 193.9375,
        "step_time_s": 0.0487,
        "val_loss_final": 0.0123,
        "val_acc_final": 0.9981,
        "val_loss_best": 0.0119,
        "val_acc_best": 0.9984,
        "peak_mem_gib": [3.5, 3.5, 3.25, 3.5, 3.5, 3.5, 3.25, 3.5],
        "peak_host_rss_gib": [2.0] * 8,
        "model_flops_per_sample": 201_326_592.0,
        "mfu": 0.41,
        "versions": {
            "python": "3.11.7",
            "torch": "2.5.1+cu124",
            "lightning": "2.6.6",
            "cuda": "12.4",
            "nccl": "2.21.5",
            "scalescope": "0.1.0+gabc1234",
        },
        "config": {
            "name": "spiral",
            "trainer": {"batch_size": 4096, "precision": "bf16-mixed", "devices": 4},
            "workload": {"name": "spiral", "hidden_sizes": [2048, 2048, 2048, 2048]},
            "sweep_id": "spiral-gpu-scaling-20250301T120000Z",
        },
        "finished_at": "2025-03-01T12:03:52+00:00",
        "tracking": {"mode": "offline", "archive": "/scratch/u/outputs/comet/abc.zip"},
        "steady": False,
    }
    result = record_factory.record(
        ident,
        epoch_times_s=[41.5, 38.25, 38.0, 38.125, 38.0625],
        train_samples=3_200_000,
        val_samples=800_000,
        setup_time_s=23.75,
        val_time_s=6.5,
        **base,
    )
    # a field a test sets is set as given, the others stay as they were (a test may make the
    # record inconsistent on purpose: a NaN epoch time beside a finite training time)
    return replace(result, **changes)


def make_start(**changes: Any) -> StartEvent:
    return StartEvent(identity=make_identity(**changes))


# --- running the real trainer --------------------------------------------------------------


@dataclass(frozen=True)
class TrainRun:
    """One finished ``python -m scalescope.train`` process."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    output_dir: Path

    @property
    def combined(self) -> str:
        return self.stdout + self.stderr

    def events(self) -> list[StartEvent | ResultRecord]:
        """Every event in stdout and stderr; a broken event line fails the test."""
        out: list[StartEvent | ResultRecord] = []
        for line in self.combined.splitlines():
            if find_marker(line) < 0:
                continue
            try:
                event = decode_line(line)
            except RecordError as exc:  # pragma: no cover - shown when it happens
                raise AssertionError(f"broken event line {line!r}: {exc}") from None
            assert event is not None
            out.append(event)
        return out

    def starts(self) -> list[StartEvent]:
        return [e for e in self.events() if isinstance(e, StartEvent)]

    def results(self) -> list[ResultRecord]:
        return [e for e in self.events() if isinstance(e, ResultRecord)]

    def describe(self) -> str:
        return (
            f"scalescope.train {' '.join(self.args)} exited {self.returncode}\n"
            f"--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"
        )


def default_sigint() -> None:
    """In a child about to exec: SIGINT back to its default, as in a terminal. A test run
    started in the background of a non-interactive shell (``cmd &``, nohup) inherits SIGINT
    ignored, and Python then never raises KeyboardInterrupt: a Ctrl-C test would test
    nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def pretend_cores(monkeypatch: Any, cores: int) -> None:
    """This process may use ``cores`` cores, whatever the machine has."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without anything that would make a local run look like a Slurm task,
    a submitit task, a Lightning child or a tracked experiment."""
    drop_prefixes = ("SLURM_", "SUBMITIT_", "COMET_", "SCALESCOPE_")
    drop = {"LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop_prefixes) and k not in drop}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_train(
    cwd: Path,
    *args: str,
    output_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    module_args: Sequence[str] = (),
) -> TrainRun:
    """``python -m scalescope.train <module_args> [output_dir=...] <args>`` in ``cwd``: its
    ranks forked from a preloaded interpreter (tests/zygote.py;
    ``SCALESCOPE_TEST_FRESH_PROCESSES=1`` starts fresh ones instead), rank 0 starting the
    others as in any local run."""
    import zygote

    argv = list(module_args)
    if output_dir is not None:
        argv.append(f"output_dir={output_dir}")
    argv += [CPU, *args] if "--help" not in module_args else list(args)
    proc = zygote.run(
        "scalescope.train",
        argv,
        cwd=cwd,
        env=clean_env(env),
        server_env=clean_env(),
        timeout=TRAIN_TIMEOUT_S,
    )
    return TrainRun(
        args=tuple(argv),
        returncode=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        output_dir=output_dir or cwd,
    )


DEMOS = "lightning.pytorch.demos.boring_classes"
"""Lightning's own demo classes: modules this project did not write."""


def run_demo(
    output_dir: Path, model: str, datamodule: str, *args: str, devices: int = 2
) -> TrainRun:
    """One of Lightning's demo modules with one of its data modules, unmodified, under
    ``scalescope train`` (tracking off) at ``devices`` processes."""
    return run_train(
        REPO,
        "tracking.mode='off'",
        f"trainer.devices={devices}",
        f"workload.name={DEMOS}:{model}",
        f"workload.datamodule={DEMOS}:{datamodule}",
        *args,
        output_dir=output_dir,
    )


def slow_exit_env(seconds: float) -> dict[str, str]:
    """Environment that makes rank 0 of a local run spend ``seconds`` in an atexit handler
    (tests/slow_exit): a teardown slower than Lightning's child observer polls (5 s), as on a
    busy machine, so a race between rank 0's exit and the observer is certain, not rare."""
    return {
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO / "tests" / "slow_exit"), os.environ.get("PYTHONPATH")) if p
        ),
        "SCALESCOPE_TEST_SLOW_EXIT_S": str(seconds),
    }


@contextlib.contextmanager
def two_rank_run(
    tmp_path: Path,
    *args: str,
    settle_s: float,
    startup_s: float = 180.0,
    ready: str = "scalescope: tracking",
    env: Mapping[str, str] | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A 2-process ``python -m scalescope.train`` in its own session (so a signal can reach
    the whole group, as a terminal's Ctrl-C or Slurm's does), its output in ``log.txt``.

    Yields ``(process, log)`` once rank 0 has printed ``ready`` (its tracking line by
    default) and ``settle_s`` more seconds have passed; kills the group on the way out.
    """
    log = tmp_path / "log.txt"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scalescope.train",
                f"output_dir={tmp_path}",
                CPU,
                "trainer.devices=2",
                *args,
            ],
            cwd=tmp_path,
            env=clean_env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_sigint,
        )
    try:
        deadline = time.monotonic() + startup_s
        while ready not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        time.sleep(settle_s)
        yield proc, log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left, stopped ranks included
        proc.wait()
