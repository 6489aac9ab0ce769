"""The projection's model (analysis.compute.projection): pure math on synthetic breakdowns.

What must hold whatever the numbers: the model reproduces the anchor it was fitted at; more
bandwidth never lowers efficiency; with communication and stragglers, efficiency never rises
with scale under weak scaling; the interval holds the central value; one scaled point gives a
wider interval than two; the order statistics and the all-reduce cost are the known ones.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.compute.projection import project_points
from analysis.compute.run_parts import RunParts
from analysis.compute.step_model import (
    Level,
    ScalePoint,
    allreduce_s,
    expected_max,
    exposed_after_backward,
    fit_series,
)
from scalescope.allreduce_model import bus_factor, ddp_bucket_bytes


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


def test_the_interval_holds_its_centre_and_counts_scales_with_a_breakdown() -> None:
    """Within one node (no network band): the interval holds the central value (by
    construction, its min/max: asserted here only). A scale whose runs have no usable
    breakdown is no scaled point: the fit counts the scales it could use."""
    one_pts, base = series(n=3, comm=0.004)
    fit1 = fit_series(one_pts, base, "weak")
    rows1 = project_points(fit1, one_pts, base, "weak", [(1, 16)], draws=300)
    for r in rows1:  # by construction (the band's min/max): asserted here only
        assert r["efficiency_low"] <= r["efficiency"] <= r["efficiency_high"], r
    blind = replace(parts(comm=0.005, world=4), reason="record has no breakdown")
    four = ScalePoint(4, 1, 4, [blind] * 3)
    fit2 = fit_series([*one_pts, four], base, "weak")
    assert fit1.scaled_points == 1 and fit2.scaled_points == 1  # was 2: world sizes counted


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


# --- the reviewed defects, each against a truth computed here ---------------------------------


def test_a_bucket_is_exposed_from_when_it_is_ready() -> None:
    """The bucket timeline, by hand. Backward 100 ms; buckets sent in DDP's order."""
    # one bucket holding every gradient: ready at backward's end, exposed whole
    assert exposed_after_backward([0.030], [100e6], 0.100) == pytest.approx(0.030)
    # 1 MB (ready at 100 x 1/102 ms), then 100 MB (ready at 100 x 101/102 = 99.0196 ms, 40 ms
    # long), then 1 MB (3 ms): the big bucket ends at 139.0196 ms and the last at 142.0196 ms
    times = [0.001, 0.040, 0.003]
    got = exposed_after_backward(times, [1e6, 100e6, 1e6], 0.100)
    assert got == pytest.approx(0.0420196, rel=1e-5)
    # ten equal buckets of 5 ms, each ready a tenth of backward later: all hidden but the
    # last one's 5 ms
    assert exposed_after_backward([0.005] * 10, [1e6] * 10, 0.100) == pytest.approx(0.005)
    # a thousand tiny buckets of 1 ms latency each queue up: 1 s of all-reduce, 0.9 s exposed
    tiny = exposed_after_backward([0.001] * 1000, [1e3] * 1000, 0.100)
    assert tiny == pytest.approx(0.9, rel=0.01)


def test_large_ddp_buckets_lower_the_efficiency_of_a_large_gradient() -> None:
    """A ResNet-50-like gradient of 102 MB at 64x8: one 100 MB bucket is ready only near
    backward's end, so buckets of 100 MB expose more than DDP's 25 MB ones, and the what-if
    must say efficiency falls (the old 'all but the last bucket hides' said it rose 5 points)."""
    grads = tuple(ddp_bucket_bytes(102_000_000))
    pts, base = series(compute=0.120, comm=0.010, busbw=10.0, alpha=5e-5, buckets=grads)
    fit = fit_series(pts, base, "weak")
    rows = {r["what_if"]: r for r in project_points(fit, pts, base, "weak", [(64, 8)], draws=30)}
    assert rows["DDP buckets of 100 MB"]["efficiency"] < rows["as measured"]["efficiency"]


def test_every_what_if_moves_the_projection_its_way() -> None:
    """Bandwidth-bound all-reduce at 16x8: a larger per-device batch, accumulation and bf16
    gradients each raise efficiency (more compute per byte, or fewer bytes)."""
    pts, base = series(comm=0.008, busbw=0.5, buckets=(1 << 20,) + (25 << 20,) * 4)
    fit = fit_series(pts, base, "weak")
    rows = {r["what_if"]: r for r in project_points(fit, pts, base, "weak", [(16, 8)], draws=30)}
    plain = rows["as measured"]["efficiency"]
    for name in ("per-device batch x2", "accumulation 4", "gradients in bf16"):
        assert rows[name]["efficiency"] > plain, name


def test_a_latency_only_all_reduce_fit_is_never_an_infinite_bandwidth() -> None:
    """The sweep's fit had no bandwidth term (cut short, or latency-bound): the bandwidth of
    its largest message stands in, and where there is none either, nothing is projected,
    with the reason. Before, the bandwidth term was dropped: 95% where 10 GB/s gives 35%."""
    no_fit = replace(parts(), fit_busbw_gbps=math.nan, busbw_gbps=10.0)
    base = ScalePoint(1, 1, 1, [parts(world=1)] * 3)
    fit = fit_series([base, ScalePoint(2, 1, 2, [no_fit] * 3)], base, "weak")
    assert fit.model is not None and fit.model.network.intra is not None
    assert fit.model.network.intra.busbw_gbps == 10.0
    assert "largest message" in fit.model.network.intra.source
    nothing = replace(no_fit, busbw_gbps=math.nan)
    fit = fit_series([base, ScalePoint(2, 1, 2, [nothing] * 3)], base, "weak")
    assert fit.model is None and "measured no bus bandwidth" in fit.reason
    assert "--network" in fit.reason


def test_the_straggler_spread_is_fitted_as_a_share_of_each_scales_compute() -> None:
    """Strong scaling, made by the model's own rule: a share of 0.1 of each scale's compute
    times m(N). At 2 ranks compute is 20 ms, at 4 ranks 10 ms: waits 0.1 x 20 ms x m(2) and
    0.1 x 10 ms x m(4). The fit must find 0.1 (in seconds it found 1.6x that)."""
    share = 0.1
    two = ScalePoint(
        2, 1, 2, [parts(batch=64, compute=0.020, wait=share * 0.020 * expected_max(2))] * 3
    )
    four = ScalePoint(
        4, 1, 4, [parts(batch=32, compute=0.010, wait=share * 0.010 * expected_max(4), world=4)] * 3
    )
    base = ScalePoint(1, 1, 1, [parts(world=1, batch=128, compute=0.040)] * 3)
    fit = fit_series([base, two, four], base, "strong")
    assert fit.model is not None
    assert fit.model.sigma_share == pytest.approx(share, rel=1e-6)


def test_the_self_check_holds_out_every_scale_as_large_as_the_one_it_predicts() -> None:
    """A sweep with 1x4 and 2x2: predicting 2x2 from '1,2 alone' must not keep 1x4 (world
    size 4) in the fit, where it became the anchor."""
    from analysis.compute.projection import self_check

    base = ScalePoint(1, 1, 1, [parts(world=1)] * 3)
    two = ScalePoint(2, 1, 2, [parts()] * 3)
    one_by_four = ScalePoint(4, 1, 4, [parts(comm=0.050, world=4)] * 3)
    two_by_two = ScalePoint(4, 2, 2, [parts(comm=0.004, world=4)] * 3)
    seen: list[list[int]] = []
    import analysis.compute.projection as projection

    real = projection.fit_series

    def spy(points, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append(sorted(pt.world for pt in points))
        return real(points, *a, **kw)

    class Group:
        def __init__(self, pt: ScalePoint) -> None:
            self.world_size, self.nodes = pt.world, pt.nodes
            self.stats = {"steady_samples_per_s_per_device": type("S", (), {"mean": 1.0})()}

    members = [Group(p) for p in (base, two, one_by_four, two_by_two)]
    projection.fit_series = spy  # type: ignore[assignment]
    try:
        check = self_check(
            members, [base, two, one_by_four, two_by_two], members[0], base, "weak", None, "", 20
        )
    finally:
        projection.fit_series = real  # type: ignore[assignment]
    assert check is not None and check["from_world_sizes"] == "1,2"
    assert seen and all(max(worlds) <= 2 for worlds in seen), seen


def test_the_bootstrap_resamples_the_networks_fit() -> None:
    """Within one node, runs alike but for their all-reduce fits: the interval must carry
    the fit's spread (before, latency and bandwidth stayed fixed at their mean)."""
    from analysis.compute.model_error import ErrorModel

    exact = ErrorModel(noise=0.0)
    base = ScalePoint(1, 1, 1, [parts(world=1)] * 4)
    alike = ScalePoint(2, 1, 2, [parts(busbw=1.0)] * 4)
    spread = ScalePoint(2, 1, 2, [parts(busbw=b) for b in (0.25, 0.5, 2.0, 4.0)])

    def width(pt: ScalePoint) -> float:
        fit = fit_series([base, pt], base, "weak")
        (row, *_) = project_points(
            fit, [base, pt], base, "weak", [(1, 8)], draws=80, error_model=exact
        )
        return row["efficiency_high"] - row["efficiency_low"]

    assert width(alike) == pytest.approx(0.0, abs=1e-9)
    assert width(spread) > 0.01
