"""Compute split into GPU work and host overhead (scalescope.job.diagnosis.compute_split):
from NVML's steady-state utilisation, the rank rows of the diagnosis section and, on several
GPUs, the time the collectives' kernels ran alone (scalescope.job.diagnosis.comm_kernels, from
a profiler trace read by scalescope.traces.collective_kernels)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.diagnosis.comm_kernels import measured
from scalescope.job.diagnosis.compute_split import CPU_REASON, compute_split
from scalescope.traces import collective_kernels


def _rank(
    rank: int, *, compute: float, comm: float = 0.0, inp: float = 0.0, wait: float = 0.0
) -> dict:
    return {
        "rank": rank,
        "local_rank": rank,
        "node": "gpu1",
        "step_time_s": inp + compute + comm,
        "input_wait_s": inp,
        "comm_wait_s": comm,
        "compute_s": compute,
        "syncs_per_step": 1.0,
        "wait_s": wait,
    }


def _kernel(name: str, start_ms: float, end_ms: float) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "ts": 1e3 * start_ms,
        "dur": 1e3 * (end_ms - start_ms),
        "pid": 0,
        "tid": 7,
    }


ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _constructed_step() -> dict:
    """One synced step as the profiler sees it: 4 ms of compute kernels (0-3 ms, and 5-6 ms
    beside the all-reduce), the first bucket's all-reduce kernel from 4 to 12 ms; a copy
    (not a kernel) counts for neither."""
    events = [
        _kernel("ampere_sgemm_128x64_nn", 0.0, 3.0),
        _kernel(ALLREDUCE, 4.0, 12.0),
        _kernel("void at::native::vectorized_elementwise_kernel<4>", 5.0, 6.0),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 3e3, "dur": 9e3},
    ]
    return {"traceEvents": events}


def _calibration(*parts: dict) -> dict:
    return {"status": "measured", "reason": None, "comm_kernels": list(parts)}


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


def test_the_collectives_kernels_running_beside_backward_are_not_compute_work() -> None:
    """The constructed case (issue 32): a 12 ms step, 10 ms of compute of which 4 ms are
    compute kernels, a 2 ms communication wait, the all-reduce kernel from 4 to 12 ms. NVML
    reads 11 of 12 ms busy (91.7%); the all-reduce ran 8 ms, 7 of them alone, so the GPU's
    work is 11 - 7 = 4 ms and it idles 60% of compute. Subtracting the wait alone gave
    (10 - (11 - 2)) / 10 = 10%."""
    part = measured(collective_kernels(_constructed_step()), passes=1)
    assert (part["kernel_s"], part["alone_s"]) == (pytest.approx(0.008), pytest.approx(0.007))
    ranks = [_rank(0, compute=0.010, comm=0.002), _rank(1, compute=0.010, comm=0.002)]
    split = compute_split(
        ranks, _nvml(100 * 11 / 12, 100 * 11 / 12), "cuda_events", _calibration(part, part)
    )
    assert split["collectives_source"] == "comm_kernels"
    for row in split["ranks"]:
        assert row["gpu_idle_share"] == pytest.approx(0.60, abs=0.10)
        assert row["gpu_work_s"] == pytest.approx(0.004)
        assert (row["comm_kernel_s"], row["comm_alone_s"]) == (
            pytest.approx(0.008),
            pytest.approx(0.007),
        )
    assert split["gpu_idle_share"] == pytest.approx(0.60)


ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
REDUCE_SCATTER = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _fsdp_synced_pass() -> dict:
    """One synced FSDP pass as the profiler sees it: a 2 ms all-gather alone (0-2 ms), 8 ms
    of compute kernels (2-10 ms), a 1 ms reduce-scatter alone (10-11 ms)."""
    return {
        "traceEvents": [
            _kernel(ALLGATHER, 0.0, 2.0),
            _kernel("ampere_sgemm_128x64_nn", 2.0, 10.0),
            _kernel(REDUCE_SCATTER, 10.0, 11.0),
        ]
    }


def test_every_micro_batchs_lone_gathers_are_counted_under_fsdp() -> None:
    """The constructed case of the HSDP issue: accumulation 2, 8 ms of compute kernels per
    micro-batch, a 2 ms lone all-gather on each and a 1 ms lone reduce-scatter on the synced
    one, a 25 ms step with 20 ms of compute, NVML 84% (21 ms busy). The collectives ran alone
    2 + 2 + 1 = 5 ms: 16.0 ms of GPU work, 20% idle. Counting one synced pass per step (3 ms)
    read 18.0 ms and 10%."""
    part = measured(collective_kernels(_fsdp_synced_pass()), passes=1)
    assert part["alone_s"] == pytest.approx(0.003)
    assert part["by_operation"] == {
        "all_gather": {"calls": 1.0, "alone_s": pytest.approx(0.002)},
        "reduce_scatter": {"calls": 1.0, "alone_s": pytest.approx(0.001)},
    }
    row = {
        **_rank(0, compute=0.020, comm=0.005),
        "syncs_per_step": 1.0,
        "collectives_per_step": {
            "all_gather": {"count": 2.0, "bytes": 2e6},
            "reduce_scatter": {"count": 1.0, "bytes": 1e6},
        },
    }
    split = compute_split(
        [row, {**row, "rank": 1, "local_rank": 1}],
        _nvml(84.0, 84.0),
        "cuda_events",
        _calibration(part, part),
    )
    for got in split["ranks"]:
        assert got["comm_alone_s"] == pytest.approx(0.005)
        assert got["gpu_work_s"] == pytest.approx(0.016)
        assert got["gpu_idle_share"] == pytest.approx(0.20, abs=0.01)


def test_a_wait_for_a_slower_rank_is_the_collective_spinning_alone() -> None:
    """The profiled window starts every rank together: it holds no wait for a slower rank.
    A rank that waited 1.5 ms a step for its peer in the steady state spun its all-reduce
    kernel alone that long as well: at 10.5 of 12 ms busy, 6 ms measured alone per pass and
    1.5 ms of waiting leave 3 ms of GPU work in 10 ms of compute (70% idle)."""
    part = {"status": "measured", "kernel_s": 0.0065, "alone_s": 0.006}
    ranks = [_rank(0, compute=0.010, comm=0.002, wait=0.0015), _rank(1, compute=0.010, comm=0.002)]
    split = compute_split(
        ranks, _nvml(100 * 10.5 / 12, 100 * 10.5 / 12), "cuda_events", _calibration(part, part)
    )
    waiting, other = split["ranks"]
    assert waiting["comm_alone_s"] == pytest.approx(0.0075)
    assert waiting["comm_kernel_s"] == pytest.approx(0.008)
    assert waiting["gpu_idle_share"] == pytest.approx(0.70)
    assert other["gpu_idle_share"] == pytest.approx(0.55)  # 10.5 - 6 = 4.5 ms of work


def test_several_ranks_without_the_collectives_kernel_time_have_no_split() -> None:
    ranks = [_rank(0, compute=0.010, comm=0.002), _rank(1, compute=0.010, comm=0.002)]
    off = {"status": "skipped", "reason": "diagnosis.calibration_steps=0", "comm_kernels": None}
    split = compute_split(ranks, _nvml(90.0, 90.0), "cuda_events", off)
    assert split["status"] == "not recorded"
    assert split["reason"] == (
        "the collectives' kernel time was not measured "
        "(calibration skipped: diagnosis.calibration_steps=0)"
    )
    unmeasured = {"status": "not measured", "reason": "the profiler recorded no kernel"}
    split = compute_split(
        ranks, _nvml(90.0, 90.0), "cuda_events", _calibration(unmeasured, unmeasured)
    )
    assert split["reason"].endswith("(the profiler recorded no kernel)")
    part = {"status": "measured", "kernel_s": 0.002, "alone_s": 0.001}
    one = compute_split(ranks, _nvml(90.0, 90.0), "cuda_events", _calibration(part, unmeasured))
    assert one["status"] == "recorded" and one["reason"] == "1 of 2 ranks"
    assert [r["rank"] for r in one["ranks"]] == [0]


def test_unsampled_gpus_and_missing_nvml_say_so() -> None:
    off = compute_split([_rank(0, compute=0.01)], {"status": "off", "reason": "x"}, "cuda_events")
    assert off["status"] == "not recorded" and "NVML did not sample the GPUs (x)" in off["reason"]
    partial = compute_split(
        [_rank(0, compute=0.01), _rank(1, compute=0.01)],
        _nvml(50.0),
        "cuda_events",
        _calibration(*[{"status": "measured", "kernel_s": 0.0, "alone_s": 0.0}] * 2),
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
    """Holds by construction (the overhead is compute less the work, the work clamped to
    [0, compute]): asserted once, here, as a guard on the clamp."""
    rank = _rank(0, compute=compute, comm=comm, inp=inp)
    split = compute_split([rank], _nvml(util), "cuda_events")
    (row,) = split["ranks"]
    assert 0 <= row["gpu_work_s"] <= compute
    assert row["gpu_work_s"] + row["host_overhead_s"] == pytest.approx(compute)
    assert 0 <= row["gpu_idle_share"] <= 1
