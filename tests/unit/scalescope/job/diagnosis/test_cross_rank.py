"""The diagnosis' cross-rank reductions: each rank's per-step waits against each step's least
over the ranks, and every rank's calibration windows combined."""

from __future__ import annotations

import pytest
from diagnosis_helpers import windows

from scalescope.job.diagnosis.cross_rank import combine_calibration, step_wait_stats


def test_step_wait_stats_against_the_least_wait_of_each_step_and_collective() -> None:
    """Worked by hand: two steps, two collectives. In step 1 this rank waited 5 ms in the
    all-reduce where the least was 1 ms, and 0 in the broadcast where the least was 0; in
    step 2 it waited 4 ms in the broadcast (least 0) and 2 ms in the all-reduce (least 2).
    Exposed per step: 1 and 2 ms; its wait for others: 4 and 4 ms. A step whose all-reduce
    was not timed (NaN) does not count; a broadcast that did not run adds nothing."""
    import numpy as np

    nan = np.nan
    mine = np.array([[0.005, 0.002, nan, 0.003], [0.0, 0.004, 0.001, nan]])
    least = np.array([[0.001, 0.002, 0.001, 0.003], [0.0, 0.0, 0.0, np.inf]])
    stats = step_wait_stats(mine, least)
    assert stats is not None and stats["steps"] == 3
    assert stats["exposed_s"] == pytest.approx((0.001 + 0.002 + 0.003) / 3)
    assert stats["wait_s"] == pytest.approx((0.004 + 0.004 + 0.0) / 3)
    assert stats["wait_se_s"] == pytest.approx(np.std([0.004, 0.004, 0.0], ddof=1) / np.sqrt(3))
    assert stats["by_collective"]["broadcast"]["wait_s"] == pytest.approx(0.004 / 3)
    assert stats["by_collective"]["gradient"]["wait_s"] == pytest.approx(0.004 / 3)
    assert step_wait_stats(mine[:, :1], least[:, :1])["exposed_se_s"] is None
    assert step_wait_stats(mine[:, 2:3], least[:, 2:3]) is None  # no all-reduce timed


def test_calibration_pairs_are_differenced_and_never_clipped() -> None:
    """Per pair: the median synced window minus the slowest rank's no_sync window; the
    estimate is the median of the pairs, negative when noise says so."""
    a = {**windows(0), "fwd_bwd_windows_s": [0.010, 0.012, 0.011]}
    a["fwd_bwd_sync_windows_s"] = [0.011, 0.010, 0.013]
    b = {**windows(1), "fwd_bwd_windows_s": [0.011, 0.011, 0.010]}
    b["fwd_bwd_sync_windows_s"] = [0.013, 0.010, 0.011]
    cal = combine_calibration([a, b])
    assert cal["paired_diffs_s"] == pytest.approx([0.001, -0.002, 0.001])
    assert cal["exposed_comm_s"] == pytest.approx(0.001)
    flipped = combine_calibration(
        [
            {**a, "fwd_bwd_sync_windows_s": [0.009, 0.009, 0.009]},
            {**b, "fwd_bwd_sync_windows_s": [0.009] * 3},
        ]
    )
    assert flipped["exposed_comm_s"] == pytest.approx(-0.002)  # noise shows, unclipped


def test_the_overlap_slowdown_is_the_median_pair_of_each_ranks_difference() -> None:
    a = {
        **windows(0),
        "to_last_grad_windows_s": [0.008, 0.008],
        "to_last_grad_sync_windows_s": [0.011, 0.010],
    }
    b = {
        **windows(1),
        "to_last_grad_windows_s": [0.009, 0.008],
        "to_last_grad_sync_windows_s": [0.010, 0.012],
    }
    cal = combine_calibration([a, b])
    assert cal["overlap_diffs_s"] == pytest.approx([0.002, 0.003])
    assert cal["overlap_slowdown_s"] == pytest.approx(0.0025)
    assert combine_calibration([windows(0), b])["overlap_slowdown_s"] is None  # one rank unmarked
