"""The diagnosis when a rank dies or fails, with real processes (2 ranks, gloo): a rank that
dies before the gather ends the job with a reason; one that dies in the calibration, or whose
pass raises inside a calibration window, leaves the record with the calibration's reason, and
no rank sits out the collective timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from core_helpers import REPO, TINY, run_train
from diagnosis_helpers import diag, only_result, summarize_in_process

pytestmark = pytest.mark.timeout(600)


# --- ranks that die --------------------------------------------------------------------------


def test_a_rank_that_dies_before_the_gather_ends_the_job_with_a_reason(tmp_path: Path) -> None:
    run = run_train(
        REPO,
        *TINY,
        "trainer.devices=2",
        "trainer.collective_timeout_s=30",
        "faults.exit_rank=1",
        "faults.exit_at=gather",
        output_dir=tmp_path,
    )
    assert run.returncode != 0, run.describe()
    assert not run.results()
    assert not list(tmp_path.rglob("result.json"))
    log = tmp_path / "slurm-local.out"
    log.write_text(run.combined)
    rc, out, err = summarize_in_process(str(log), "--no-write", "--format", "json")
    assert rc == 0, err
    (row,) = json.loads(out)["failures"]
    assert row["reason"] == "collective_error", row
    print(f"rank 1 died before the gather: {row['reason']}: {row['detail']}")


def test_a_rank_that_dies_in_the_calibration_leaves_the_record(tmp_path: Path) -> None:
    """The timings were gathered before the calibration: rank 0 learns of the death in the
    calibration's agreement, records it as the calibration's reason and writes the record;
    the job still fails (rank 1 exited 1)."""
    run = run_train(
        REPO,
        *TINY,
        "trainer.devices=2",
        "trainer.collective_timeout_s=30",
        "faults.exit_rank=1",
        "faults.exit_at=calibration",
        output_dir=tmp_path,
    )
    assert run.returncode != 0, run.describe()
    (result,) = run.results()
    assert len(list(tmp_path.rglob("result.json"))) == 1
    d = diag(result)
    assert d["status"] == "recorded" and d["step_waits"]["steps"] == d["steady_steps"]
    cal = d["calibration"]
    assert cal["status"] == "failed" and cal["exposed_comm_s"] is None, cal
    assert "by peer" in cal["reason"] or "reset" in cal["reason"], cal
    print(f"rank 1 died in the calibration: {cal['reason']}")


@pytest.mark.parametrize("rank", [1, 0])
def test_an_error_inside_a_calibration_window_ends_every_rank_with_the_record(
    tmp_path: Path, rank: int
) -> None:
    """A pass that raises inside a synced window (an out-of-memory, say) leaves its peers
    inside that pass's collectives. Every rank must still end well within the collective
    timeout, and rank 0 write the record with a reason naming the window, whichever rank
    failed. Before, the ranks met in mismatched collectives and sat out the timeout, and
    no record was written."""
    timeout_s = 60
    started = time.monotonic()
    run = run_train(
        REPO,
        *TINY,
        "trainer.devices=2",
        f"trainer.collective_timeout_s={timeout_s}",
        f"faults.window_error_rank={rank}",
        output_dir=tmp_path,
    )
    took = time.monotonic() - started
    result = only_result(run)  # the training ran whole: the job succeeds
    assert took < timeout_s, f"{took:.0f} s: a rank sat out the collective timeout"
    d = diag(result)
    assert d["status"] == "recorded" and d["step_waits"]["steps"] == d["steady_steps"]
    cal = d["calibration"]
    assert cal["status"] == "failed" and cal["exposed_comm_s"] is None, cal
    assert cal["reason"] == (
        f"calibration window 2 of {2 * cal_windows()} (synced) failed on rank {rank}: "
        "RuntimeError: injected by faults.window_error_rank"
    ), cal
    print(f"rank {rank} raised in a window: ended in {took:.1f} s; {cal['reason']}")


def cal_windows() -> int:
    """Pairs of calibration windows by default (the spiral's passes all fit the budget)."""
    from scalescope.config import DiagnosisConfig

    return DiagnosisConfig().calibration_windows
