"""The all-reduce baseline: the pure arithmetic, and real gloo process groups of 1 to 3 ranks."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.allreduce import (
    DDP_BUCKET_CAP_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    SKIPPED_ONE_DEVICE,
    allreduce_baseline,
    backend_name,
    bus_factor,
    ddp_bucket_bytes,
    gradient_bytes,
    interpolate_time_s,
    predicted_step_s,
    size_row,
    sweep_sizes,
)

# --- pure arithmetic ------------------------------------------------------------------------------


def test_sweep_sizes_double_from_4_kib_and_end_at_the_gradient_size() -> None:
    assert sweep_sizes(300_000) == [4096 * 2**k for k in range(7)] + [300_000]
    assert sweep_sizes(65536) == [4096, 8192, 16384, 32768, 65536]
    # whole float32 elements: 300_001 bytes is 75_000 elements
    assert sweep_sizes(300_001)[-1] == 300_000
    assert sweep_sizes(1000) == [1000]
    assert sweep_sizes(2) == [4]


def test_ddp_buckets_are_one_mib_first_then_25_mib() -> None:
    assert DDP_FIRST_BUCKET_BYTES == torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
    assert ddp_bucket_bytes(500) == [500]
    mib = 2**20
    assert ddp_bucket_bytes(60 * mib) == [mib, 25 * mib, 25 * mib, 9 * mib]
    assert ddp_bucket_bytes(26 * mib) == [mib, DDP_BUCKET_CAP_BYTES]
    assert ddp_bucket_bytes(0) == []


@given(st.integers(min_value=1, max_value=10**11))
def test_ddp_buckets_cover_the_gradients_exactly(nbytes: int) -> None:
    buckets = ddp_bucket_bytes(nbytes)
    assert sum(buckets) == nbytes
    assert buckets[0] <= DDP_FIRST_BUCKET_BYTES
    assert all(0 < b <= DDP_BUCKET_CAP_BYTES for b in buckets)


def test_backend_is_the_one_carrying_the_device() -> None:
    assert backend_name("gloo", "cpu") == "gloo"
    assert backend_name("nccl", "cuda") == "nccl"
    assert backend_name("cpu:gloo,cuda:nccl", "cuda") == "nccl"
    assert backend_name("cpu:gloo,cuda:nccl", "cpu") == "gloo"


def test_size_row_formulas() -> None:
    row = size_row(8_000_000, 0.002, 4)
    assert row["algbw_gbps"] == pytest.approx(4.0)  # 8e6 B / 2 ms = 4e9 B/s
    assert row["busbw_gbps"] == pytest.approx(4.0 * 2 * 3 / 4)
    assert bus_factor(2) == 1.0
    assert bus_factor(8) == pytest.approx(1.75)


ROWS = [size_row(4096, 1e-4, 2), size_row(65536, 4e-4, 2), size_row(1048576, 4e-3, 2)]


def test_interpolation_is_exact_at_measured_sizes_and_log_log_between() -> None:
    for r in ROWS:
        assert interpolate_time_s(ROWS, r["bytes"]) == pytest.approx(r["time_s"])
    # halfway in log(bytes) between 4096 and 65536 is 16384: the geometric mean of the times
    assert interpolate_time_s(ROWS, 16384) == pytest.approx(math.sqrt(1e-4 * 4e-4))
    # below the smallest: latency-bound, the smallest's time
    assert interpolate_time_s(ROWS, 100) == pytest.approx(1e-4)
    # above the largest: at the largest size's bandwidth
    assert interpolate_time_s(ROWS, 4 * 1048576) == pytest.approx(4 * 4e-3)
    assert predicted_step_s(ROWS, [4096, 1048576]) == pytest.approx(1e-4 + 4e-3)


@given(
    st.lists(st.floats(min_value=1e-6, max_value=1.0), min_size=2, max_size=8),
    st.integers(min_value=1, max_value=2**30),
)
def test_interpolation_stays_between_its_neighbours(times: list[float], nbytes: int) -> None:
    times = sorted(times)
    rows = [size_row(4096 * 2**k, t, 2) for k, t in enumerate(times)]
    t = interpolate_time_s(rows, nbytes)
    sizes = [r["bytes"] for r in rows]
    if nbytes <= sizes[-1]:
        below = max(
            [r for r in rows if r["bytes"] <= nbytes], key=lambda r: r["bytes"], default=rows[0]
        )
        above = min([r for r in rows if r["bytes"] >= nbytes], key=lambda r: r["bytes"])
        assert below["time_s"] * (1 - 1e-9) <= t <= above["time_s"] * (1 + 1e-9)
    else:
        assert t == pytest.approx(times[-1] * nbytes / sizes[-1])


def test_gradient_bytes_counts_trainable_parameters_once_in_their_dtype() -> None:
    lin = torch.nn.Linear(10, 4)  # 44 float32 parameters
    frozen = torch.nn.Linear(3, 3)
    frozen.requires_grad_(False)
    half = torch.nn.Linear(2, 2).half()  # 6 float16 parameters
    model = torch.nn.Sequential(lin, frozen, half, lin)  # lin shared: counted once
    assert gradient_bytes(model) == 44 * 4 + 6 * 2


def test_no_process_group_is_skipped_with_the_reason() -> None:
    assert not torch.distributed.is_initialized()
    s = allreduce_baseline(gradient_bytes=1000, device=torch.device("cpu"))
    assert s["status"] == "skipped"
    assert s["reason"] == SKIPPED_ONE_DEVICE == "1 device: nothing to all-reduce"
    assert s["sizes"] == [] and s["busbw_gbps"] is None and s["predicted_step_s"] is None


# --- real gloo process groups ---------------------------------------------------------------------
