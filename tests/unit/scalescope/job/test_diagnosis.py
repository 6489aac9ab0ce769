"""Pure parts of the job-side diagnosis: the calibration's budget plan and the record section
rank 0 assembles from every rank's gathered part."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.diagnosis import (
    assemble,
    calibration_plan,
    combine_calibration,
    merge_nvml,
    step_wait_stats,
)


@given(
    pass_s=st.floats(1e-6, 100.0),
    steps=st.integers(1, 64),
    windows=st.integers(1, 8),
    budget_s=st.floats(0.01, 600.0),
)
def test_the_calibration_plan_keeps_to_its_budget(
    pass_s: float, steps: int, windows: int, budget_s: float
) -> None:
    k, w = calibration_plan(pass_s, steps, windows, budget_s)
    if 2 * pass_s > budget_s * (1 + 1e-9):
        assert (k, w) == (0, 0)  # not even one pair fits: no calibration at all
        return
    assert 1 <= k <= steps and 1 <= w <= windows
    assert 2 * k * w * pass_s <= budget_s * (1 + 1e-9)
    if 2 * steps * windows * pass_s <= budget_s * (1 - 1e-9):
        assert (k, w) == (steps, windows)  # a budget that affords everything changes nothing


def test_a_slow_pass_takes_passes_off_before_windows() -> None:
    # 8 passes x 2 windows x 2 kinds = 32 passes wanted; 5 s at 0.5 s a pass affords 10.
    assert calibration_plan(0.5, 8, 2, 5.0) == (2, 2)
    assert calibration_plan(2.0, 8, 2, 5.0) == (1, 1)
    assert calibration_plan(2.5, 8, 4, 3.0) == (0, 0)  # gpt on 2 CPU cores: skipped


def _part(rank: int, node: str, own: float, comm: float, **over: Any) -> dict[str, Any]:
    step = own + comm
    d = {
        "clock": "wall",
        "step_time_s": step,
        "input_wait_s": 0.001,
        "comm_wait_s": comm,
        "compute_s": own - 0.001,
        # of the communication wait, 1 ms is the all-reduce; the rest is waiting for others
        "step_waits": {
            "steps": 100,
            "exposed_s": 0.001,
            "exposed_se_s": 1e-5,
            "wait_s": comm - 0.001,
            "wait_se_s": 1e-5,
        },
    }
    d.update(over)
    return {"node": node, "local_rank": rank % 2, "peak_dev": None, "rss": 0.4, "diagnosis": d}


def _windows(rank: int) -> dict[str, Any]:
    """One rank's calibration windows: no_sync 10 ms (+1 ms per rank), synced 4 ms more."""
    return {
        "status": "measured",
        "reason": None,
        "steps": 8,
        "windows": 2,
        "fwd_bwd_windows_s": [0.010 + rank * 0.001] * 2,
        "fwd_bwd_sync_windows_s": [0.014 + rank * 0.001] * 2,
        "seconds": 0.5,
    }


def _assemble(parts: list[dict[str, Any]], calibration: Any = None) -> dict[str, Any]:
    if calibration is None:
        calibration = combine_calibration([_windows(r) for r in range(len(parts))])
    return assemble(
        per_rank=parts,
        steady_steps=100,
        per_device_batch_size=32,
        allreduce={"status": "measured", "seconds": 0.2},
        nvml={"status": "unavailable", "reason": "CPU run: no GPU to sample"},
        calibration=calibration,
        calibration_steps=8,
    )


def test_the_slowest_and_the_typical_rank_and_the_skew() -> None:
    # Rank 2 needs 30 ms on its own, the others 10-11 ms: the others wait for it.
    parts = [
        _part(0, "n1", 0.010, 0.021),
        _part(1, "n1", 0.011, 0.020),
        _part(2, "n2", 0.030, 0.001),
        _part(3, "n2", 0.0105, 0.0205),
    ]
    d = _assemble(parts)
    assert d["status"] == "recorded"
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3]
    assert d["slowest_rank"] == 2 and d["slowest_node"] == "n2"
    assert d["typical_rank"] == 3  # lower median of 10, 10.5, 11, 30 ms
    assert d["rank_skew"] == pytest.approx((0.030 - 0.0105) / 0.0105)
    cal = d["calibration"]
    assert cal["fwd_bwd_s"] == pytest.approx(0.013)  # the slowest rank's no_sync pass
    assert cal["fwd_bwd_sync_s"] == pytest.approx(0.0155)  # median of the synced ones
    assert cal["exposed_comm_s"] == pytest.approx(0.0025)
    assert d["overhead_s"] == {"calibration": 0.5, "allreduce_baseline": 0.2}


def test_two_ranks_count_one_slow_rank_whole_as_skew() -> None:
    d = _assemble([_part(0, "a", 0.010, 0.011), _part(1, "b", 0.020, 0.001)])
    assert d["typical_rank"] == 0 and d["slowest_rank"] == 1
    assert d["rank_skew"] == pytest.approx(1.0)


def test_a_rank_without_figures_leaves_skew_unknown_and_calibration_says_why() -> None:
    late = _part(1, "b", 0.010, 0.01)
    for key in ("step_time_s", "input_wait_s", "comm_wait_s", "compute_s"):
        del late["diagnosis"][key]
    skipped = {"status": "skipped", "reason": "training stopped"}
    d = _assemble([_part(0, "a", 0.010, 0.011), late], combine_calibration([_windows(0), skipped]))
    assert d["slowest_rank"] is None and d["rank_skew"] is None  # unknown, not 0
    assert d["calibration"]["status"] == "skipped"
    assert d["calibration"]["exposed_comm_s"] is None
    assert d["calibration"]["reason"] == "training stopped"


def test_nvml_sections_of_several_nodes_merge() -> None:
    gpu = {"node": "n1", "index": 0, "util_mean_pct": 90.0}
    sampled = {"status": "sampled", "reason": None, "interval_s": 1.0, "gpus": [gpu]}
    other = {**sampled, "gpus": [{**gpu, "node": "n2"}]}
    merged = merge_nvml([sampled, None, other, None])
    assert merged["status"] == "sampled"
    assert [g["node"] for g in merged["gpus"]] == ["n1", "n2"]
    none = merge_nvml([{"status": "unavailable", "reason": "no driver", "interval_s": 1.0}])
    assert none["status"] == "unavailable" and none["gpus"] is None
    assert none["reason"] == "no driver"


def test_each_ranks_wait_for_others_and_the_exposed_all_reduce() -> None:
    d = _assemble([_part(0, "a", 0.010, 0.011), _part(1, "b", 0.020, 0.001)])
    fast, slow = d["ranks"]
    assert fast["wait_s"] == pytest.approx(0.010) and fast["exposed_comm_s"] == pytest.approx(0.001)
    assert slow["wait_s"] == pytest.approx(0.0) and slow["exposed_comm_s"] == pytest.approx(0.001)
    assert d["step_waits"]["exposed_s"] == 0.001 and d["step_waits"]["steps"] == 100


def test_one_device_waits_for_nobody() -> None:
    part = _part(0, "a", 0.010, 0.0)
    del part["diagnosis"]["step_waits"]
    skipped = {"status": "skipped", "reason": "1 device: nothing to all-reduce"}
    (row,) = _assemble([part], skipped)["ranks"]
    assert (row["wait_s"], row["exposed_comm_s"]) == (0.0, 0.0)


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
    a = {**_windows(0), "fwd_bwd_windows_s": [0.010, 0.012, 0.011]}
    a["fwd_bwd_sync_windows_s"] = [0.011, 0.010, 0.013]
    b = {**_windows(1), "fwd_bwd_windows_s": [0.011, 0.011, 0.010]}
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
        **_windows(0),
        "to_last_grad_windows_s": [0.008, 0.008],
        "to_last_grad_sync_windows_s": [0.011, 0.010],
    }
    b = {
        **_windows(1),
        "to_last_grad_windows_s": [0.009, 0.008],
        "to_last_grad_sync_windows_s": [0.010, 0.012],
    }
    cal = combine_calibration([a, b])
    assert cal["overlap_diffs_s"] == pytest.approx([0.002, 0.003])
    assert cal["overlap_slowdown_s"] == pytest.approx(0.0025)
    assert combine_calibration([_windows(0), b])["overlap_slowdown_s"] is None  # one rank unmarked


def test_a_pair_the_training_steps_show_too_long_runs_nothing() -> None:
    """gpt on two CPU cores: 2.5 s a step, so one pair of one-pass windows (5 s) exceeds the
    3 s budget: the training steps say so, and not even the trial pass runs."""
    from types import SimpleNamespace

    from scalescope.job.diagnosis import _pass_estimate, pair_exceeds_budget

    gathered = SimpleNamespace(
        per_rank=[{"diagnosis": {"compute_s": 2.1}}, {"diagnosis": {"compute_s": 2.5}}]
    )
    estimate = _pass_estimate(gathered, 1)
    assert estimate == 2.5
    assert pair_exceeds_budget(estimate, 3.0) == (
        "one pair of one-pass windows (about 5 s, from the training steps' compute per "
        "micro-batch) would exceed diagnosis.calibration_budget_s (3 s)"
    )
    assert pair_exceeds_budget(1.5, 3.0) is None  # exactly fits: the trial pass decides
    assert pair_exceeds_budget(None, 3.0) is None
    # a rank without the figure: no estimate
    assert _pass_estimate(SimpleNamespace(per_rank=[{"diagnosis": {}}, {}]), 1) is None
    assert _pass_estimate(None, 1) is None


def test_the_budget_is_checked_per_pass_not_per_accumulated_step() -> None:
    """Accumulation 8, a 1 s optimizer step and a 1.5 s budget: a pass is one micro-batch,
    about 1/8 s, so a pair of one-pass windows (0.25 s) fits and the trial pass decides."""
    from types import SimpleNamespace

    from scalescope.job.diagnosis import _pass_estimate, pair_exceeds_budget

    gathered = SimpleNamespace(per_rank=[{"diagnosis": {"compute_s": 1.0}}] * 2)
    assert _pass_estimate(gathered, 8) == pytest.approx(0.125)
    assert pair_exceeds_budget(_pass_estimate(gathered, 8), 1.5) is None
    assert pair_exceeds_budget(_pass_estimate(gathered, 1), 1.5) is not None  # the old check


def _intervals_into_steps(device: Any) -> None:
    """Three intervals of known length into per-step series: two in step 0 of the broadcast
    (they add up, as the broadcasts of one step's micro-batches do), one in step 2 of the
    gradient; step 1 keeps NaN in both, so the ranks' series stay aligned."""
    import time

    import numpy as np
    import torch

    from scalescope.job.diagnosis import COLLECTIVES, _clock_for

    clock = _clock_for(device, COLLECTIVES)
    spin = (
        (lambda s: torch.cuda._sleep(int(s * 1.4e9)))  # about s seconds of GPU work
        if device.type == "cuda"
        else time.sleep
    )
    for key, step, seconds in (
        ("broadcast", 0, 0.02),
        ("broadcast", 0, 0.03),
        ("gradient", 2, 0.05),
    ):
        start = clock.mark()
        spin(seconds)
        clock.add("comm_wait_s", start, clock.mark())
        clock.add(key, start, clock.mark(), step=step)
    clock.settle()
    bcast, grad = clock.steps["broadcast"], clock.steps["gradient"]
    assert bcast[0] == pytest.approx(0.05, rel=0.5) and grad[2] == pytest.approx(0.05, rel=0.5)
    assert np.isnan(bcast[1]) and np.isnan(grad[1]) and np.isnan(grad[0]) and np.isnan(bcast[2])
    assert clock.totals["comm_wait_s"] == pytest.approx(bcast[0] + grad[2], rel=0.1)


def test_the_wall_clock_adds_intervals_into_their_step() -> None:
    import torch

    _intervals_into_steps(torch.device("cpu"))


@pytest.mark.gpu
def test_cuda_events_add_intervals_into_their_step() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    _intervals_into_steps(torch.device("cuda", torch.cuda.current_device()))
