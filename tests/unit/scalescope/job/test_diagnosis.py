"""The record's diagnosis section rank 0 assembles from every rank's gathered part."""

from __future__ import annotations

from typing import Any

import pytest
from diagnosis_helpers import windows

from scalescope.job.cross_rank import combine_calibration
from scalescope.job.diagnosis import assemble, merge_nvml


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


def _assemble(parts: list[dict[str, Any]], calibration: Any = None) -> dict[str, Any]:
    if calibration is None:
        calibration = combine_calibration([windows(r) for r in range(len(parts))])
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
    d = _assemble([_part(0, "a", 0.010, 0.011), late], combine_calibration([windows(0), skipped]))
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
