"""Compute split into GPU work and host overhead (scalescope.job.diagnosis.compute_split):
from NVML's
steady-state utilisation and the rank rows of the diagnosis section."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.diagnosis.compute_split import CPU_REASON, compute_split


def _rank(rank: int, *, compute: float, comm: float = 0.0, inp: float = 0.0) -> dict:
    return {
        "rank": rank,
        "local_rank": rank,
        "node": "gpu1",
        "step_time_s": inp + compute + comm,
        "input_wait_s": inp,
        "comm_wait_s": comm,
        "compute_s": compute,
    }


def _nvml(*utils: float) -> dict:
    gpus = [{"node": "gpu1", "index": i, "util_mean_pct": u} for i, u in enumerate(utils)]
    return {"status": "sampled", "reason": None, "gpus": gpus}


def test_a_cpu_run_is_not_recorded_and_says_why() -> None:
    split = compute_split([_rank(0, compute=0.01)], {"status": "unavailable"}, "wall")
    assert split == {
        "status": "not recorded",
        "reason": CPU_REASON,
        "source": None,
        "ranks": None,
    }


def test_a_launch_bound_step_idles_the_gpu_inside_compute() -> None:
    """The resnet small case: 6 ms compute, 0.7 ms input, the GPU 44% busy."""
    split = compute_split([_rank(0, compute=0.006, inp=0.0007)], _nvml(44.0), "cuda_events")
    (row,) = split["ranks"]
    assert row["gpu_work_s"] == pytest.approx(0.44 * 0.0067)
    assert row["gpu_idle_share"] == pytest.approx(1 - 0.44 * 0.0067 / 0.006)
    assert split["gpu_idle_share"] == row["gpu_idle_share"]


def test_the_collectives_kernels_are_not_counted_as_compute_work() -> None:
    """Two ranks, 10 ms compute and 5 ms communication wait, GPU 100% busy: the NCCL kernels
    fill the wait, the compute kernels the compute: nothing idles."""
    ranks = [_rank(0, compute=0.010, comm=0.005), _rank(1, compute=0.010, comm=0.005)]
    split = compute_split(ranks, _nvml(100.0, 100.0), "cuda_events")
    assert [r["gpu_idle_share"] for r in split["ranks"]] == pytest.approx([0.0, 0.0], abs=1e-12)


def test_unsampled_gpus_and_missing_nvml_say_so() -> None:
    off = compute_split([_rank(0, compute=0.01)], {"status": "off", "reason": "x"}, "cuda_events")
    assert off["status"] == "not recorded" and "NVML did not sample the GPUs (x)" in off["reason"]
    partial = compute_split(
        [_rank(0, compute=0.01), _rank(1, compute=0.01)], _nvml(50.0), "cuda_events"
    )
    assert partial["status"] == "recorded" and partial["reason"] == "1 of 2 ranks"
    none = compute_split([_rank(3, compute=0.01)], _nvml(50.0), "cuda_events")
    assert none["status"] == "not recorded"


@given(
    st.floats(0, 100),
    st.floats(1e-4, 1.0),
    st.floats(0, 1.0),
    st.floats(0, 1.0),
)
def test_work_and_overhead_add_up_to_compute(util, compute, comm, inp) -> None:
    rank = _rank(0, compute=compute, comm=comm, inp=inp)
    split = compute_split([rank], _nvml(util), "cuda_events")
    (row,) = split["ranks"]
    assert 0 <= row["gpu_work_s"] <= compute
    assert row["gpu_work_s"] + row["host_overhead_s"] == pytest.approx(compute)
    assert 0 <= row["gpu_idle_share"] <= 1
