"""The all-reduce's cost model (scalescope.allreduce_model), shared by the job and the
analysis: DDP's buckets, the latency + bandwidth fit and what it predicts for a step."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from allreduce_model_helpers import model_time_s, sweep
from hypothesis import given
from hypothesis import strategies as st

from scalescope.allreduce_model import (
    DDP_BUCKET_CAP_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    HOROVOD_FUSION_THRESHOLD_BYTES,
    MIB,
    bucket_caps,
    estimate_bucket_bytes,
    fit_model,
    fit_time_s,
    predicted_step_s,
    split_into_buckets,
)


@given(st.floats(1e3, 1e10), st.floats(1e5, 1e9))
def test_rebucketing_keeps_every_byte_and_an_explicit_cap_for_the_first_bucket_too(
    total: float, cap: float
) -> None:
    buckets = split_into_buckets(int(total), "ddp", cap / 2**20)
    assert sum(buckets) == int(total)
    assert all(b <= int(cap) for b in buckets)
    assert all(b == int(cap) for b in buckets[:-1])  # the first bucket too: no 1 MiB one


def test_ddp_buckets_are_one_mib_first_then_25_mib() -> None:
    assert DDP_FIRST_BUCKET_BYTES == torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
    assert split_into_buckets(500) == [500]
    mib = 2**20
    assert split_into_buckets(60 * mib) == [mib, 25 * mib, 25 * mib, 9 * mib]
    assert split_into_buckets(26 * mib) == [mib, DDP_BUCKET_CAP_BYTES]
    assert split_into_buckets(0) == []


def test_an_explicit_ddp_cap_is_in_mib_and_caps_the_first_bucket_too() -> None:
    """DDP's rule (torch/nn/parallel/distributed.py, _BucketCapacityConfig.create): only the
    default cap comes with the 1 MiB first bucket; bucket_cap_mb=100 makes 100 MiB buckets
    from the first. VGG-16's 553,430,176 bytes: five of 104,857,600 and the rest."""
    assert bucket_caps("ddp") == (MIB, 25 * MIB)
    assert bucket_caps("ddp", 100) == (100 * MIB, 100 * MIB)
    assert split_into_buckets(553_430_176, "ddp", 100) == [104_857_600] * 5 + [29_142_176]
    # the same 25 MiB cap, stated: its first bucket is 25 MiB, not 1
    assert split_into_buckets(60 * MIB, "ddp", 25) == [25 * MIB, 25 * MIB, 10 * MIB]


def test_bucket_directions() -> None:
    total = 300 * MIB
    small, large = split_into_buckets(total, "ddp", 10), split_into_buckets(total, "ddp", 100)
    assert len(large) < len(small) and large[0] > small[0]  # a larger cap: fewer, larger
    assert split_into_buckets(total)[0] < split_into_buckets(total, "ddp", 25)[0]
    # Horovod's fusion buffer (64 MiB by default) has no small first one; a larger
    # threshold fuses more
    assert HOROVOD_FUSION_THRESHOLD_BYTES == 64 * MIB
    assert split_into_buckets(total, "horovod") == [64 * MIB] * 4 + [44 * MIB]
    assert len(split_into_buckets(total, "horovod", 128)) < len(
        split_into_buckets(total, "horovod")
    )
    # a method whose grouping is not known: one message, or buckets of the cap it states
    assert split_into_buckets(total, "paddle") == [total]
    assert split_into_buckets(total, "paddle", 100) == [100 * MIB] * 3


@given(st.integers(min_value=1, max_value=10**11))
def test_ddp_buckets_cover_the_gradients_exactly(nbytes: int) -> None:
    buckets = split_into_buckets(nbytes)
    assert sum(buckets) == nbytes
    assert buckets[0] <= DDP_FIRST_BUCKET_BYTES
    assert all(0 < b <= DDP_BUCKET_CAP_BYTES for b in buckets)


@given(
    st.lists(
        st.tuples(st.integers(1, 10**8), st.sampled_from(["torch.float32", "torch.bfloat16"])),
        max_size=40,
    ),
    st.integers(1, 10**7),
    st.integers(1, 10**8),
)
def test_estimated_buckets_cover_every_parameter_once(
    params: list[tuple[int, str]], first_cap: int, cap: int
) -> None:
    buckets = estimate_bucket_bytes(params, first_cap, cap)
    assert sum(buckets) == sum(b for b, _ in params)
    assert all(b > 0 for b in buckets)
    # At most one open (under its cap) bucket per dtype is left over.
    under = [b for b in buckets if b < min(first_cap, cap)]
    assert len(under) <= len({d for _, d in params})


@given(
    alpha=st.floats(1e-6, 1e-2),
    busbw=st.floats(0.1, 1000.0),
    world=st.integers(2, 1024),
    top=st.integers(1, 22),
)
def test_the_fit_recovers_a_noise_free_model_exactly(
    alpha: float, busbw: float, world: int, top: int
) -> None:
    sizes = sweep(top)
    fit = fit_model([(n, model_time_s(alpha, busbw, world, n)) for n in sizes], world)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    assert fit["busbw_gbps"] == pytest.approx(busbw, rel=1e-6)
    assert fit["rel_rms"] == pytest.approx(0.0, abs=1e-9)
    assert fit["points"] == len(sizes)


@st.composite
def noisy_sweeps(draw: st.DrawFn) -> tuple[float, float, int, list[int], list[float], float]:
    """A model, a sweep that reaches its bandwidth-bound sizes (the largest message's
    bandwidth term at least 16 alpha, as a sweep up to 8 MiB or beyond does on a real
    network), and multiplicative noise of at most ``r`` on every point (any pattern)."""
    alpha = draw(st.floats(1e-6, 1e-2))
    busbw = draw(st.floats(0.1, 1000.0))
    world = draw(st.integers(2, 64))
    r = draw(st.floats(0.0, 0.05))
    per_byte = 2 * (world - 1) / world / (busbw * 1e9)
    top = 11  # 8 MiB at least
    while 4096 * 2**top * per_byte < 16 * alpha:
        top += 1
    sizes = sweep(top)
    noise = draw(st.lists(st.floats(-r, r), min_size=len(sizes), max_size=len(sizes)))
    return alpha, busbw, world, sizes, noise, r


@given(noisy_sweeps())
def test_the_fit_recovers_alpha_and_beta_from_noisy_points(
    case: tuple[float, float, int, list[int], list[float], float],
) -> None:
    alpha, busbw, world, sizes, noise, r = case
    true = [model_time_s(alpha, busbw, world, n) for n in sizes]
    fit = fit_model([(n, t * (1 + e)) for n, t, e in zip(sizes, true, noise, strict=True)], world)
    # The fit is the (non-negative) least-squares projection of the weighted points, and the
    # true model lies in that set, so the fitted curve is no further from the truth than the
    # points are: at every size, relative to the true time, within
    # delta = sqrt(m) * r / (1 - r) * (1 + r).
    m = len(sizes)
    delta = math.sqrt(m) * r / (1 - r) * (1 + r)
    for n, t in zip(sizes, true, strict=True):
        assert abs(fit_time_s(fit, n, world) - t) <= delta * t + 1e-12 * t
    # The smallest and the largest size pin the line down: the slope errs by at most
    # delta * (t_min + t_max) / (n_max - n_min), which, with the largest bandwidth-bound
    # (beta n_max >= 16 alpha, so t_max <= 17/16 beta n_max) and n_max >= 2048 n_min, is
    # at most 2 * 17/16 * 2048/2047 delta < 2.13 delta of beta; alpha errs by what is left
    # at the smallest size.
    per_byte = 2 * (world - 1) / world / (busbw * 1e9)
    fitted_per_byte = 2 * (world - 1) / world / (fit["busbw_gbps"] * 1e9)
    slope_bound = 2.13 * delta * per_byte
    assert abs(fitted_per_byte - per_byte) <= slope_bound + 1e-12 * per_byte
    assert abs(fit["alpha_s"] - alpha) <= delta * true[0] + slope_bound * sizes[0] + 1e-12 * true[0]
    assert fit["rel_rms"] <= r / (1 - r) + 1e-12


def test_a_seeded_noisy_sweep_gives_its_model_back_within_its_standard_errors() -> None:
    rng = np.random.default_rng(7)
    alpha, busbw, world = 50e-6, 20.0, 8  # 50 us, 20 GB/s
    sizes = sweep(14)  # 4 KiB .. 64 MiB
    times = [model_time_s(alpha, busbw, world, n) * (1 + rng.normal(0, 0.02)) for n in sizes]
    fit = fit_model(list(zip(sizes, times, strict=True)), world)
    assert fit["note"] is None and fit["points"] == 15
    assert abs(fit["alpha_s"] - alpha) <= 3 * fit["alpha_se_s"]
    assert abs(fit["busbw_gbps"] - busbw) <= 3 * fit["busbw_se_gbps"]
    assert fit["busbw_gbps"] == pytest.approx(busbw, rel=0.05)
    assert 0.005 < fit["rel_rms"] < 0.05  # the 2% noise, seen as relative residuals


def test_the_fit_keeps_latency_and_bandwidth_non_negative() -> None:
    # Pure bandwidth with noise that tilts the free fit to a negative latency.
    world = 2
    sizes = sweep(8)
    times = [n / 1e9 * (1.0 + (0.01 if i == 0 else 0.0)) for i, n in enumerate(sizes)]
    times[0] = sizes[0] / 1e9 * 0.9  # the smallest message faster than any latency allows
    fit = fit_model(list(zip(sizes, times, strict=True)), world)
    assert fit["alpha_s"] == 0.0 and fit["alpha_se_s"] is None
    assert fit["busbw_gbps"] > 0 and fit["busbw_se_gbps"] > 0
    assert fit["note"].startswith("latency held at 0")
    # Every size takes the same time: latency only, no bandwidth to report.
    flat = fit_model([(n, 1e-3 * (1 - 1e-4 * i)) for i, n in enumerate(sizes)], world)
    assert flat["busbw_gbps"] is None and flat["busbw_se_gbps"] is None
    assert flat["alpha_s"] == pytest.approx(1e-3, rel=1e-3)
    assert fit_time_s(flat, 10**9, world) == flat["alpha_s"]
    assert flat["note"].startswith("no bandwidth term")


def test_the_fit_needs_two_sizes_and_says_so() -> None:
    one = fit_model([(4096, 1e-4)], 2)
    assert one["alpha_s"] is None and one["busbw_gbps"] is None and one["points"] == 1
    assert one["note"] == "1 size(s) measured: a latency + bandwidth fit needs two"
    with pytest.raises(ValueError, match="no fitted model"):
        fit_time_s(one, 4096, 2)
    two = fit_model([(4096, 1e-4), (8192, 1.5e-4)], 2)
    assert two["alpha_s"] == pytest.approx(5e-5)
    assert two["busbw_gbps"] == pytest.approx(4096 / 5e-5 / 1e9)
    assert two["alpha_se_s"] is None and two["busbw_se_gbps"] is None
    assert two["note"] == "an exact fit through two sizes: no standard errors"


def test_a_bucket_beyond_the_sweep_is_predicted_by_the_fit_not_scaled_from_one_point() -> None:
    # 1 ms latency, 1 GB/s busbw, 2 ranks; measured up to 1 MiB, where latency is half the time.
    alpha, busbw, world = 1e-3, 1.0, 2
    sizes = sweep(8)
    fit = fit_model([(n, model_time_s(alpha, busbw, world, n)) for n in sizes], world)
    bucket = 100 * 2**20
    expected = alpha + bucket / 1e9  # one latency, and the bytes at busbw
    assert predicted_step_s(fit, [bucket], world) == pytest.approx(expected)
    scaled_up = model_time_s(alpha, busbw, world, sizes[-1]) * bucket / sizes[-1]
    assert scaled_up > 1.9 * expected  # what the old linear scale-up would have said
    # Several buckets: each pays its latency, one after another.
    buckets = [4096, 2**20, bucket]
    assert predicted_step_s(fit, buckets, world) == pytest.approx(
        sum(model_time_s(alpha, busbw, world, b) for b in buckets)
    )
