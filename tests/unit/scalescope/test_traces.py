"""Reading profiler traces (scalescope.traces): top operations by self time, communication
labelled whatever the backend calls it, on a real gloo trace and on an NCCL one."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from analysis_helpers import REPO
from hypothesis import given
from hypothesis import strategies as st

from scalescope.traces import (
    collective_kernels,
    is_communication,
    profiled_steps,
    read_trace,
    short_name,
    top_operations,
)

TRACES = REPO / "tests" / "fixtures" / "traces"


def test_a_real_gloo_trace_ranks_the_matmuls_first_and_labels_the_collectives() -> None:
    top = top_operations(read_trace(TRACES / "gloo_ddp_rank0.json.gz"), n=20)
    assert top["on"] == "cpu"
    assert top["ops"][0]["name"] == "aten::mm"
    # the profiler's own key_averages() gave aten::mm 629.884 ms of self CPU time
    assert top["ops"][0]["self_s"] == pytest.approx(0.629884, abs=1e-6)
    comm = {o["name"] for o in top["ops"] if o["communication"]}
    assert "gloo:all_reduce" in comm
    assert not any(o["communication"] for o in top["ops"] if o["name"].startswith("aten::"))
    assert 0 < top["communication_s"] < top["total_s"]
    # a wrapper does not outrank what it calls: self time, not total
    names = [o["name"] for o in top["ops"]]
    assert "DistributedDataParallel.forward" not in names[:5]


def test_an_nccl_trace_is_counted_on_the_device_with_its_kernels_labelled() -> None:
    trace = read_trace(TRACES / "nccl_ddp_rank1.json")
    top = top_operations(trace)
    assert top["on"] == "device"
    assert profiled_steps(trace) == [5, 6]
    first = top["ops"][0]
    assert "gemm" in first["name"] and not first["communication"]
    labelled = {short_name(o["name"]): o["communication"] for o in top["ops"]}
    assert labelled["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"] is True
    assert labelled["ncclDevKernel_Broadcast_RING_LL"] is True
    assert labelled["Memcpy HtoD (Pinned -> Device)"] is False
    assert top["communication_s"] == pytest.approx(2 * (900 + 40) / 1e6)
    # the host's c10d operator is not counted where the device's time is
    assert all(o["name"] != "c10d::allreduce_" for o in top["ops"])


@pytest.mark.parametrize(
    ("name", "comm"),
    [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", True),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", True),
        ("void ncclKernel_ReduceScatter_fp32", True),
        ("nccl:all_reduce", True),
        ("gloo:broadcast", True),
        ("c10d::allreduce_", True),
        ("record_param_comms", True),
        ("aten::mm", False),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", False),
        ("void at::native::vectorized_elementwise_kernel<4>", False),
        ("DistributedDataParallel.forward", False),
    ],
)
def test_communication_is_named_by_backend_and_version(name: str, comm: bool) -> None:
    assert is_communication(name) is comm


def test_a_file_that_is_not_a_trace_is_refused_with_its_name(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"events": []}))
    with pytest.raises(ValueError, match=r"x\.json: not a Chrome trace"):
        read_trace(bad)
    good = tmp_path / "t.json.gz"
    with gzip.open(good, "wt") as f:
        json.dump({"traceEvents": []}, f)
    assert top_operations(read_trace(good))["ops"] == []


def test_short_names_drop_the_argument_list() -> None:
    assert short_name("void foo<int>(float*, int)") == "foo<int>"
    assert len(short_name("k" * 200, width=30)) == 30


@st.composite
def nested_events(draw: st.DrawFn) -> list[dict[str, object]]:
    """Properly nested intervals on one thread: each child inside its parent."""
    events: list[dict[str, object]] = []

    def fill(start: float, end: float, depth: int) -> None:
        t = start
        for _ in range(draw(st.integers(0, 3 if depth < 3 else 0))):
            if end - t < 4:
                return
            a = t + draw(st.integers(0, int((end - t) // 4)))
            b = a + draw(st.integers(1, max(1, int(end - a) - 1)))
            events.append({"ph": "X", "cat": "cpu_op", "name": f"op{depth}", "ts": a, "dur": b - a})
            fill(a, b, depth + 1)
            t = b

    fill(0, 10_000, 0)
    return events


@given(nested_events())
def test_self_times_add_up_to_the_time_covered_by_the_outermost_events(events: list) -> None:
    """Every microsecond under an operator is some operator's self time, once."""
    top = top_operations({"traceEvents": events}, n=1000)
    outer: list[tuple[float, float]] = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        start, end = e["ts"], e["ts"] + e["dur"]
        if not outer or start >= outer[-1][1]:
            outer.append((start, end))
    covered = sum(b - a for a, b in outer) / 1e6
    assert top["total_s"] == pytest.approx(covered, abs=1e-9)
    assert all(o["self_s"] >= -1e-12 for o in top["ops"])


def test_collective_kernels_count_their_union_and_the_part_no_other_kernel_ran_beside() -> None:
    """Two buckets' all-reduces back to back on the communication stream (2-5 ms, 5-8 ms)
    and an all-gather queued inside them (6-7 ms) ran 6 ms in all; compute kernels ran 0-3
    ms and 4-6.5 ms, beside them for 1 + 2.5 ms, so the collectives ran alone 2.5 ms. A copy
    during the collectives is not a kernel: it changes neither figure."""

    def kernel(name: str, start_ms: float, end_ms: float, cat: str = "kernel") -> dict:
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "ts": 1e3 * start_ms,
            "dur": 1e3 * (end_ms - start_ms),
            "pid": 0,
            "tid": 7,
        }

    events = [
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 2.0, 5.0),
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float(x)", 5.0, 8.0),
        kernel("ncclDevKernel_AllGather_RING_LL(x)", 6.0, 7.0),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 0.0, 3.0),
        kernel("void at::native::elementwise_kernel<128, 2>", 4.0, 6.5),
        kernel("Memcpy DtoD (Device -> Device)", 7.0, 9.0, cat="gpu_memcpy"),
    ]
    got = collective_kernels({"traceEvents": events})
    assert got["kernels"] == 5 and got["collective_kernels"] == 3
    assert got["kernel_s"] == pytest.approx(0.006)
    assert got["alone_s"] == pytest.approx(0.0025)
    # per operation: the all-reduces ran 6 ms, 3.5 beside compute; the all-gather 1 ms, 0.5
    # beside compute (6-6.5 ms): each operation's own lone time, whatever other collective ran
    assert got["by_operation"] == {
        "all_gather": {"calls": 1, "alone_s": pytest.approx(0.0005)},
        "all_reduce": {"calls": 2, "alone_s": pytest.approx(0.0025)},
    }
    assert collective_kernels({"traceEvents": events[3:]}) == {
        "kernels": 2,
        "collective_kernels": 0,
        "kernel_s": 0.0,
        "alone_s": 0.0,
        "by_operation": {},
    }
