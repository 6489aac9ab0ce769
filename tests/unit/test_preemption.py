"""SIGTERM stops every rank at the same step, within seconds, and the record says why."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from core_helpers import two_rank_run
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.entry import EXIT_STOPPED
from scalescope.job.preemption import CHECK_INTERVAL_S, next_interval_steps
from scalescope.record import read_result_json


@given(
    every=st.integers(1, 10_000),
    elapsed_s=st.floats(0.0, 1e4),
    steps=st.integers(0, 10_000),
    interval_s=st.floats(0.1, 10.0),
)
def test_interval_is_at_least_one_and_grows_at_most_twofold(
    every: int, elapsed_s: float, steps: int, interval_s: float
) -> None:
    nxt = next_interval_steps(every, elapsed_s, steps, interval_s)
    assert 1 <= nxt <= 2 * every
    # the same inputs give the same answer: ranks that share them stay in lockstep
    assert nxt == next_interval_steps(every, elapsed_s, steps, interval_s)


@given(step_s=st.floats(CHECK_INTERVAL_S, 3600.0), every=st.integers(1, 1000))
def test_slow_steps_are_checked_every_step(step_s: float, every: int) -> None:
    assert next_interval_steps(every, step_s * 10, 10, CHECK_INTERVAL_S) == 1


@given(step_s=st.floats(1e-5, 1.0), every=st.integers(1, 1000))
def test_fast_steps_are_checked_about_once_per_interval(step_s: float, every: int) -> None:
    nxt = next_interval_steps(every, step_s * 50, 50, CHECK_INTERVAL_S)
    assert nxt * step_s <= CHECK_INTERVAL_S * (1 + 1e-9) or nxt == 1


def test_growth_from_one_reaches_the_interval() -> None:
    every = 1
    for _ in range(20):
        every = next_interval_steps(every, 0.001 * every, every, CHECK_INTERVAL_S)
    assert every == int(CHECK_INTERVAL_S / 0.001)


def test_sigterm_with_slow_steps_stops_both_ranks_and_records_why(tmp_path: Path) -> None:
    """Like Slurm at a time limit: SIGTERM to every process, SIGKILL after a 5 s grace
    period (the local cluster's KillWait). Steps take 1 s and a call holds 8 of them."""
    args = ("trainer.max_epochs=1000", "trainer.steps_per_call=8", "faults.step_sleep_s=1.0")
    # settle: both ranks up and stepping
    with two_rank_run(tmp_path, *args, "tracking.mode=off", settle_s=12) as (proc, log):
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            rc = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    text = log.read_text()
    assert rc == EXIT_STOPPED, text[-3000:]
    assert "STOPPED EARLY (sigterm)" in text
    assert "scalescope train: error: stopped early (sigterm) at step" in text
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
