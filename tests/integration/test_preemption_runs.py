"""SIGTERM to both ranks of a real run, as Slurm sends at a time limit."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
from core_helpers import slow_exit_env, two_rank_run
from resnet_helpers import RESNET

from scalescope.job.clocks.timing import READY_LINE
from scalescope.job.run.fitting import EXIT_STOPPED
from scalescope.record import read_result_json


def test_sigterm_with_slow_steps_stops_both_ranks_and_records_why(tmp_path: Path) -> None:
    """Like Slurm at a time limit: SIGTERM to every process, SIGKILL after a 5 s grace
    period (half the local cluster's KillWait, a sixth of Slurm's default). Steps take 1 s and
    a call holds 8 of them.

    The record must be complete within the grace period. Rank 0's exit is then made slower
    than Lightning's child observer polls (tests/slow_exit), as on a busy machine: every rank
    exits 143 on purpose, and the observer, seeing rank 1's, SIGKILLed rank 0 while it tore
    down (exit -9) until rank 0 took its children over.
    """
    args = ("trainer.max_epochs=1000", "trainer.steps_per_call=8", "faults.step_sleep_s=1.0")
    # settle: training started on both ranks (after the all-reduce baseline), a few 1 s steps in
    with two_rank_run(
        tmp_path,
        *args,
        "tracking.mode=off",
        ready=READY_LINE,
        settle_s=4,
        env=slow_exit_env(7),
    ) as (proc, log):
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not list(tmp_path.rglob("result.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(tmp_path.rglob("result.json")), "no record 5 s after SIGTERM"
        rc = proc.wait(timeout=60)
    text = log.read_text()
    assert rc == EXIT_STOPPED, text[-3000:]
    assert "STOPPED EARLY (sigterm)" in text
    # rank 0 says it for both
    assert text.count("scalescope train: error: stopped early (sigterm) at step") == 1, text
    (path,) = tmp_path.rglob("result.json")
    record = read_result_json(path)
    assert record.stop_reason == "sigterm"
    assert record.identity.world_size == 2
    assert record.steps >= 1
    assert record.config["faults"]["step_sleep_s"] == 1.0
    # Stopped inside its first epoch: no complete steady-state epoch, so no step breakdown
    # (not figures from a partial epoch), and the calibration says why it did not run.
    d = record.diagnosis
    assert d is not None and d["status"] == "recorded"
    assert all("step_time_s" not in r for r in d["ranks"]), d["ranks"]
    assert d["calibration"]["status"] == "skipped"
    assert d["calibration"]["reason"] == "training stopped before its end"


def test_sigterm_to_the_loader_workers_too_stops_and_records(tmp_path: Path) -> None:
    """Slurm signals every process of the step, a rank's DataLoader workers with it. torch's
    worker dies of a SIGTERM its parent did not send, and its rank raised "DataLoader worker
    ... is killed by signal: Terminated" at once: no record, the job read as a crash. The
    workers now live through it, and the ranks stop as they do without workers."""
    with two_rank_run(
        tmp_path,
        *RESNET,
        f"workload.cache_dir={tmp_path / 'cache'}",
        "workload.num_workers=2",
        "trainer.max_epochs=1000",
        ready=READY_LINE,
        settle_s=3,
    ) as (proc, log):
        workers = _workers_under(proc.pid)
        assert workers, "no DataLoader workers under the ranks"
        os.killpg(proc.pid, signal.SIGTERM)  # every process of the group, as slurmstepd's
        rc = proc.wait(timeout=90)
        # the ranks ended their workers on the way out (checked before the run's context
        # SIGKILLs whatever is left of the group)
        _, left = psutil.wait_procs(workers, timeout=30)
        assert not left, left
    text = log.read_text()
    assert "killed by signal" not in text, text[-3000:]
    assert rc == EXIT_STOPPED, text[-3000:]
    (path,) = tmp_path.rglob("result.json")
    record = read_result_json(path)
    assert record.stop_reason == "sigterm" and record.identity.world_size == 2
    assert record.config["workload"]["num_workers"] == 2


def _workers_under(launcher: int) -> list[psutil.Process]:
    """The DataLoader workers under the ranks: torch names each worker's main thread, and so
    the process, ``pt_data_worker``."""
    below = psutil.Process(launcher).children(recursive=True)
    return [p for p in below if p.name() == "pt_data_worker"]
