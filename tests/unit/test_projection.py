"""The projection's model (analysis.projection): pure math on synthetic breakdowns.

What must hold whatever the numbers: the model reproduces the anchor it was fitted at; more
bandwidth never lowers efficiency; with communication and stragglers, efficiency never rises
with scale under weak scaling; the interval holds the central value; one scaled point gives a
wider interval than two; the order statistics and the all-reduce cost are the known ones.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.diagnosis import RunParts
from analysis.projection import (
    Level,
    ScalePoint,
    allreduce_s,
    expected_max,
    fit_series,
    project_points,
)
from scalescope.job.allreduce import bus_factor, ddp_bucket_bytes


def parts(
    *,
    batch: int = 32,
    compute: float = 0.010,
    comm: float = 0.002,
    wait: float = 0.0005,
    other: float = 0.0,
    alpha: float = 1e-4,
    busbw: float = 1.0,
    buckets: tuple[int, ...] = (1 << 20, 25 << 20),
    world: int = 2,
) -> RunParts:
    step = compute + comm + wait + other if world > 1 else compute + other
    return RunParts(
        t_s=step / batch,
        per_device_batch_size=batch,
        input_step_s=0.0,
        compute_step_s=compute,
        overlap_step_s=0.0,
        skew_step_s=0.0,
        jitter_step_s=wait if world > 1 else 0.0,
        comm_step_s=comm if world > 1 else 0.0,
        alpha_s=alpha if world > 1 else math.nan,
        fit_busbw_gbps=busbw if world > 1 else math.nan,
        bucket_bytes=buckets if world > 1 else (),
    )


def series(n: int = 3, mode: str = "weak", **kw: float) -> tuple[list[ScalePoint], ScalePoint]:
    """A 1-device baseline and a 2-device point, ``n`` identical runs each; under strong
    scaling the baseline holds both devices' samples (and their compute)."""
    batch, compute = int(kw.get("batch", 32)), kw.get("compute", 0.010)
    factor = 2 if mode == "strong" else 1
    base = ScalePoint(1, 1, 1, [parts(world=1, batch=batch * factor, compute=compute * factor)] * n)
    two = ScalePoint(2, 1, 2, [parts(**kw)] * n)  # type: ignore[arg-type]
    return [base, two], base


def test_expected_maximum_of_normals_is_the_known_one() -> None:
    assert expected_max(1) == 0.0
    assert expected_max(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-4)
    assert expected_max(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-4)
    values = [expected_max(n) for n in (2, 8, 64, 512)]
    assert values == sorted(values) and values[-1] == pytest.approx(3.04, abs=0.02)


def test_allreduce_cost_is_latency_plus_ring_bandwidth() -> None:
    level = Level(alpha_s=1e-4, busbw_gbps=10.0, at_world=2, source="test")
    assert allreduce_s(level, 1e9, 1) == 0.0
    # at the fitted size: alpha + n 2(p-1)/p / busbw
    assert allreduce_s(level, 1e8, 2) == pytest.approx(1e-4 + 1e8 * 1.0 / 10e9)
    # latency as a tree's (log2 N), bandwidth term as the ring's
    assert allreduce_s(level, 1e8, 16) == pytest.approx(4e-4 + 1e8 * bus_factor(16) / 10e9)


@given(st.floats(1e3, 1e10), st.floats(1e5, 1e9))
def test_rebucketing_keeps_every_byte_and_a_small_first_bucket(total: float, cap: float) -> None:
    buckets = ddp_bucket_bytes(int(total), int(cap))
    assert sum(buckets) == pytest.approx(total, abs=len(buckets))
    assert buckets[0] <= min(cap, 1 << 20) + 1
    assert all(b <= cap + 1 for b in buckets)


@settings(max_examples=60, deadline=None)
@given(
    compute=st.floats(0.001, 1.0),
    comm=st.floats(0.0, 0.5),
    wait=st.floats(0.0, 0.1),
    other=st.floats(0.0, 0.05),
    busbw=st.floats(0.01, 100.0),
    batch=st.integers(1, 512),
    mode=st.sampled_from(["strong", "weak"]),
)
def test_the_model_reproduces_its_anchor(
    compute: float, comm: float, wait: float, other: float, busbw: float, batch: int, mode: str
) -> None:
    """By construction (the fit puts what its parts leave of the anchor's step into
    ``other``, which is not negative here): asserted once, here, as the contract that the
    projection starts from the measured point."""
    pts, base = series(
        mode=mode, compute=compute, comm=comm, wait=wait, other=other, busbw=busbw, batch=batch
    )
    model = fit_series(pts, base, mode).model
    assert model is not None
    e, got, b = model.efficiency(2, 1)
    measured_step = compute + comm + wait + other
    assert b == batch
    assert got["step"] == pytest.approx(measured_step, rel=1e-9, abs=1e-12)
    # per-device throughput against the 1-device baseline's (same per-device batch here)
    assert e == pytest.approx(compute / measured_step, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    comm=st.floats(1e-4, 0.05),
    wait=st.floats(0.0, 0.01),
    busbw=st.floats(0.05, 50.0),
    nodes=st.lists(st.sampled_from([1, 2, 4, 8, 16, 64, 256]), min_size=2, max_size=5),
)
def test_weak_scaling_efficiency_never_rises_with_scale(
    comm: float, wait: float, busbw: float, nodes: list[int]
) -> None:
    pts, base = series(comm=comm, wait=wait, busbw=busbw)
    model = fit_series(pts, base, "weak").model
    assert model is not None
    nodes = sorted(set(nodes))
    effs = [model.efficiency(n * 8, n)[0] for n in nodes]
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(effs)), effs


@settings(max_examples=60, deadline=None)
@given(u1=st.floats(0, 1), u2=st.floats(0, 1), nodes=st.sampled_from([2, 8, 64]))
def test_more_bandwidth_never_lowers_efficiency(u1: float, u2: float, nodes: int) -> None:
    pts, base = series(comm=0.02, busbw=2.0, buckets=(1 << 20, 25 << 20, 25 << 20))
    model = fit_series(pts, base, "weak").model
    assert model is not None
    lo, hi = sorted((u1, u2))
    world = nodes * 8
    e_lo = model.efficiency(world, nodes, bw=model.network.factor(nodes, lo))[0]
    e_hi = model.efficiency(world, nodes, bw=model.network.factor(nodes, hi))[0]
    assert e_hi >= e_lo - 1e-12


def test_no_communication_and_no_stragglers_scale_perfectly() -> None:
    pts, base = series(comm=0.0, wait=0.0, busbw=1e6, alpha=0.0, buckets=(4,))
    model = fit_series(pts, base, "weak").model
    assert model is not None
    for nodes in (1, 4, 64):
        assert model.efficiency(nodes * 8, nodes)[0] == pytest.approx(1.0, abs=1e-6)


def test_strong_scaling_shrinks_the_per_device_batch_until_it_cannot() -> None:
    pts, base = series(mode="strong", batch=16)
    model = fit_series(pts, base, "strong").model
    assert model is not None
    _, _, b = model.efficiency(8, 1)
    assert b == pytest.approx(4.0)  # 16 per device at 2 ranks: 32 in all
    e, _, b = model.efficiency(64, 8)
    assert b == pytest.approx(0.5) and math.isnan(e)  # less than a sample per device


def test_the_interval_holds_the_central_value_and_one_point_is_wider() -> None:
    """Within one node (no network band), one scaled point cannot check the model: its
    interval is wider than that of the same runs plus a second scaled point."""
    one_pts, base = series(n=3, comm=0.004)
    fit1 = fit_series(one_pts, base, "weak")
    rows1 = project_points(fit1, one_pts, base, "weak", [(1, 16)], draws=300)
    four = ScalePoint(4, 1, 4, [parts(comm=0.005, world=4)] * 3)
    pts2 = [*one_pts, four]
    fit2 = fit_series(pts2, base, "weak")
    rows2 = project_points(fit2, pts2, base, "weak", [(1, 16)], draws=300)
    for r in (*rows1, *rows2):  # by construction (the band's min/max): asserted here only
        assert r["efficiency_low"] <= r["efficiency"] <= r["efficiency_high"], r
    width1 = rows1[0]["efficiency_high"] - rows1[0]["efficiency_low"]
    width2 = rows2[0]["efficiency_high"] - rows2[0]["efficiency_low"]
    assert fit1.scaled_points == 1 and fit2.scaled_points == 2
    assert width1 > 1.5 * width2 > 0, (width1, width2)


def test_an_assumed_inter_node_network_is_a_wide_band_and_a_measured_one_narrows_it() -> None:
    pts, base = series(comm=0.004)
    net = fit_series(pts, base, "weak").model.network  # type: ignore[union-attr]
    assert net.inter_band == (0.1, 1.0) and "assumed" in net.note
    two_nodes = ScalePoint(4, 2, 2, [parts(comm=0.006, world=4)])
    net2 = fit_series([*pts, two_nodes], base, "weak").model.network  # type: ignore[union-attr]
    assert net2.inter_band == (0.5, 1.0) and "2 nodes" in net2.note
    assert net2.factor(2) == 1.0 and net2.factor(4) < 1.0


def test_what_ifs_move_the_projection_the_right_way() -> None:
    pts, base = series(comm=0.008, busbw=0.5, buckets=(1 << 20,) + (25 << 20,) * 4)
    fit = fit_series(pts, base, "weak")
    rows = {r["what_if"]: r for r in project_points(fit, pts, base, "weak", [(16, 8)], draws=50)}
    plain = rows["as measured"]["efficiency"]
    assert rows["accumulation 4"]["efficiency"] > plain  # one all-reduce per 4 micro-batches
    assert rows["per-device batch x2"]["efficiency"] > plain
    assert rows["gradients in bf16"]["efficiency"] > plain  # half the bytes
    assert rows["accumulation 4"]["accumulate_grad_batches"] == 4


def test_nothing_to_project_from_says_why() -> None:
    base = ScalePoint(1, 1, 1, [parts(world=1)])
    fit = fit_series([base], base, "weak")
    assert fit.model is None and "no multi-device run" in fit.reason
