"""The step model the projection stands on (analysis.compute.projection.step_time.step_model), pure
math on synthetic breakdowns: it reproduces the anchor it was fitted at; more bandwidth never lowers
efficiency; with communication and stragglers, efficiency never rises with scale under weak
scaling; the order statistics, the all-reduce cost and the bucket timeline are the known ones.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from projection_helpers import parts, series

from analysis.compute.projection.step_time.network import UNKNOWN_INTER_BAND
from analysis.compute.projection.step_time.step_model import (
    Level,
    ScalePoint,
    allreduce_s,
    expected_max,
    exposed_after_backward,
    fit_series,
)
from analysis.compute.run_parts import RunParts
from scalescope.allreduce_model import bus_factor


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


def test_a_batch_of_two_optimizer_steps_is_modelled_step_by_step() -> None:
    """A module stepping two optimizers a batch (a GAN): its parts are per optimizer step,
    half a batch, so the model's step is one of them and its batch half the recorded one;
    the anchor's efficiency is the measured one (1,280 against 1,600 samples/s a device)."""

    def halved(p: RunParts) -> RunParts:
        return replace(p, t_s=p.t_s * 2, steps_per_batch=2.0)

    base = ScalePoint(1, 1, 1, [halved(parts(world=1, batch=64, compute=0.020))] * 3)
    two = ScalePoint(2, 1, 2, [halved(parts(batch=32, compute=0.010, wait=0.0005))] * 3)
    model = fit_series([base, two], base, "strong").model
    assert model is not None
    e, got, b = model.efficiency(2, 1)
    assert b == 16 and got["step"] == pytest.approx(0.0125)
    assert e == pytest.approx(0.8)


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


def test_an_assumed_inter_node_network_is_a_wide_band_and_a_measured_one_narrows_it() -> None:
    pts, base = series(comm=0.004)
    net = fit_series(pts, base, "weak").model.network  # type: ignore[union-attr]
    assert net.inter_band == UNKNOWN_INTER_BAND == (0.01, 1.0) and "assumed" in net.note
    assert "assumed at 1-100% of the intra-node one" in net.note
    two_nodes = ScalePoint(4, 2, 2, [parts(comm=0.006, world=4)])
    net2 = fit_series([*pts, two_nodes], base, "weak").model.network  # type: ignore[union-attr]
    # measured across nodes: held beyond, as the backtest scores a published case measured
    # across nodes (a band of 50-100% beyond 2 nodes, centred at 71%, scored 79% coverage and
    # 4.7 points of error there against 91% and 3.0 held); the error model carries the fall
    assert net2.inter_band == (1.0, 1.0) and "2 nodes" in net2.note
    assert net2.factor(2) == 1.0 and net2.factor(4) == 1.0 and net2.factor(64, 0.0) == 1.0


def test_nothing_to_project_from_says_why() -> None:
    base = ScalePoint(1, 1, 1, [parts(world=1)])
    fit = fit_series([base], base, "weak")
    assert fit.model is None and "no multi-device run" in fit.reason


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
