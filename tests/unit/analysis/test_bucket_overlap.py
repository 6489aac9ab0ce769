"""The bucket timeline with readiness (analysis.compute.projection.step_time.bucket_overlap) and the
step model's exposed communication when the record says when each bucket was ready: cases worked by
hand, each against what the byte-proportional assumption gives for them."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from projection_helpers import series

from analysis.compute.projection.step_time.bucket_overlap import (
    exposed_after_backward,
    ready_shares,
)
from analysis.compute.projection.step_time.step_model import Level, Network, StepModel, fit_series
from analysis.compute.run_parts import run_parts
from analysis.present.report.projection_text import readiness_sentence


def test_a_bucket_ready_early_is_hidden_where_bytes_would_expose_it() -> None:
    """Backward 100 ms, one bucket of every gradient taking 30 ms. Ready at 10% of backward
    (the record): it ends at 40 ms, all hidden. In proportion to bytes it is ready at 100 ms
    and exposed whole."""
    assert exposed_after_backward([0.030], [100e6], 0.100, [0.10]) == 0.0
    assert exposed_after_backward([0.030], [100e6], 0.100) == pytest.approx(0.030)
    # ready at 90%: 90 + 30 = 120 ms, 20 ms exposed
    assert exposed_after_backward([0.030], [100e6], 0.100, [0.90]) == pytest.approx(0.020)


def test_buckets_launch_in_order_whatever_their_readiness() -> None:
    """Backward 100 ms; 10 ms then 20 ms all-reduces. The second bucket ready at 5% still
    waits for the first, ready at 95%: 95 + 10 = 105, then 125 ms: 25 ms exposed."""
    got = exposed_after_backward([0.010, 0.020], [1e6, 2e6], 0.100, [0.95, 0.05])
    assert got == pytest.approx(0.025)


def test_recorded_buckets_get_their_shares_back_and_other_buckets_the_curve() -> None:
    recorded, shares = [90.0, 10.0], [0.1, 1.0]
    assert ready_shares(recorded, shares, recorded) == pytest.approx([0.1, 1.0])
    # the same buckets in half the bytes (gradients in bf16): the same shares
    assert ready_shares(recorded, shares, [45.0, 5.0]) == pytest.approx([0.1, 1.0])
    # one bucket of everything: ready with the last byte
    assert ready_shares(recorded, shares, [100.0]) == pytest.approx([1.0])
    # buckets of 45, 50 and 5 bytes: 45 is halfway into the first recorded bucket (curve
    # from (0, 0) to (0.9, 0.1): 0.05); 95 is halfway into the second (0.1 to 1.0: 0.55)
    assert ready_shares(recorded, shares, [45.0, 50.0, 5.0]) == pytest.approx([0.05, 0.55, 1.0])
    # a later bucket recorded ready earlier than one before it waits for it (running max)
    assert ready_shares([1.0, 1.0], [0.8, 0.3], [1.0, 1.0]) == pytest.approx([0.8, 0.8])
    # by bytes is the diagonal: one recorded bucket at 100% gives each end its byte share
    assert ready_shares([4.0], [1.0], [1.0, 3.0]) == pytest.approx([0.25, 1.0])


def _vgg_like(ready: tuple[float, ...]) -> StepModel:
    """Two ranks, all-reduce t = bytes / 1 GB/s (no latency); 30 ms of compute a step, so
    backward is 20 ms. A 9 MB bucket sent first (the fully connected layers: the first
    gradients backward produces), then a 1 MB one."""
    level = Level(0.0, 1.0, 2, "by hand")
    return StepModel(
        per_device_batch=1,
        accumulate=1,
        compute_fixed_s=0.0,
        compute_per_sample_s=0.030,
        input_per_sample_s=0.0,
        overlap_s=0.0,
        other_s=0.0,
        sigma_share=0.0,
        bucket_bytes=(9e6, 1e6),
        network=Network(level, None),
        anchor_world=2,
        anchor_nodes=1,
        exposed_offset_s=0.0,
        baseline_step_s=0.030,
        baseline_batch=1,
        baseline_world=1,
        scaling_mode="weak",
        bucket_ready=ready,
    )


def test_the_step_model_exposes_what_the_recorded_readiness_says() -> None:
    """By hand: recorded ready at 10% and 100% of 20 ms: the 9 ms all-reduce runs 2-11 ms,
    the 1 ms one 20-21 ms: 1 ms exposed. In proportion to bytes the 9 MB bucket is ready at
    18 ms, ends at 27 ms, and the last one at 28 ms: 8 ms exposed."""
    recorded = _vgg_like((0.1, 1.0))
    assert recorded.modelled_exposed(2, 1, recorded.bucket_bytes, 1, 1.0, 1) == pytest.approx(0.001)
    by_bytes = _vgg_like(())
    assert by_bytes.modelled_exposed(2, 1, by_bytes.bucket_bytes, 1, 1.0, 1) == pytest.approx(0.008)
    # the bf16 what-if halves both buckets: 4.5 ms from 2 ms, 0.5 ms from 20 ms
    half = (4.5e6, 0.5e6)
    assert recorded.modelled_exposed(2, 1, half, 1, 1.0, 1) == pytest.approx(0.0005)


def test_the_fit_takes_the_anchors_recorded_readiness_and_older_records_keep_bytes() -> None:
    pts, base = series(buckets=(9_000_000, 1_000_000))
    assert fit_series(pts, base, "weak").model.bucket_ready == ()  # type: ignore[union-attr]
    anchor = pts[1]
    runs = [
        replace(p, bucket_ready_share=(s, 1.0))
        for p, s in zip(anchor.parts, (0.1, 0.2, 0.6), strict=True)
    ]
    model = fit_series([base, replace(anchor, parts=runs)], base, "weak").model
    # the median, not the mean
    assert model is not None and model.bucket_ready == pytest.approx((0.2, 1.0))
    # runs that recorded it for other buckets do not count
    other = [*runs[:2], replace(runs[2], bucket_bytes=(5, 5))]
    model = fit_series([base, replace(anchor, parts=other)], base, "weak").model
    assert model is not None and model.bucket_ready == pytest.approx((0.15, 1.0))


def test_the_paragraph_says_which_readiness_the_model_took() -> None:
    assert "in proportion to the bytes" in readiness_sentence(_vgg_like(()))
    text = readiness_sentence(_vgg_like((0.1, 1.0)))
    assert "as recorded" in text and "(9 MB) at 10% of backward (90% in proportion" in text


def _section(buckets: list[int], shares: list[float]) -> dict[str, object]:
    return {
        "status": "recorded",
        "reason": None,
        "rank": 0,
        "steps": 3,
        "bucket_bytes": buckets,
        "ready_share": shares,
    }


def test_a_record_gives_its_readiness_for_its_own_buckets_only() -> None:
    from waterfall_helpers import make_diagnosis

    d = make_diagnosis(2, batch=32, input_s=0.0, compute_s=0.03, exposed_s=0.001)
    older = run_parts(d, 32 / 0.031, 2)
    assert older.bucket_ready_share == () and "before the readiness" in older.bucket_ready_reason
    d["allreduce"]["bucket_bytes"] = [9_000_000, 1_000_000]
    d["bucket_ready"] = _section([9_000_000, 1_000_000], [0.1, 1.0])
    assert run_parts(d, 32 / 0.031, 2).bucket_ready_share == (0.1, 1.0)
    d["bucket_ready"] = _section([10_000_000], [1.0])
    got = run_parts(d, 32 / 0.031, 2)
    assert got.bucket_ready_share == () and "other buckets" in got.bucket_ready_reason
    d["bucket_ready"] = _section([9_000_000, 1_000_000], [0.1, math.nan])
    assert "malformed" in run_parts(d, 32 / 0.031, 2).bucket_ready_reason
    d["bucket_ready"] = {"status": "not recorded", "reason": "1 device: no buckets"}
    assert run_parts(d, 32 / 0.031, 2).bucket_ready_reason == "1 device: no buckets"
