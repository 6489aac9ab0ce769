"""Every measured scale used (analysis.compute.projection.published.scoring.evidence): a case
measured at several node counts narrows its draws to those that reproduce the scales it was not
anchored on, so a second measured node count never widens the interval and a case measured
flat stays flat."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from analysis_helpers import REPO

from analysis.compute.projection.published.backtest import backtest
from analysis.compute.projection.published.scoring import evidence, read_cases, walk_forward
from analysis.read.cases import read_sealed

CASES = REPO / "benchmarks" / "projection_cases.yaml"


@pytest.fixture(scope="module")
def txl():  # type: ignore[no-untyped-def]
    """Transformer-XL large on DGX-2H (PyTorch DDP), measured at 1 node and 2 nodes, published
    at 4 and 8, with a stated inter-node link of 25 GB/s (the file states none: set here to
    build the case the rule speaks of). An open source: no sealed case is looked at here."""
    case = next(c for c in read_cases(str(CASES)) if c.name.startswith("dle-pyt-transformerxl"))
    assert sorted(p.nodes for p in case.measured) == [1, 2]
    assert case.group not in read_sealed(str(CASES)).sources
    return replace(case, inter_busbw_gbps=25.0)


def _widths(case) -> list[float]:  # type: ignore[no-untyped-def]
    return [p["high"] - p["low"] for p in backtest([case], draws=400)["points"]]


def test_a_second_measured_node_count_never_widens_the_interval(txl) -> None:  # type: ignore[no-untyped-def]
    fewer = replace(txl, measured=tuple(p for p in txl.measured if p.nodes == 1))
    assert evidence(txl) and not evidence(fewer)
    with_point, without = _widths(txl), _widths(fewer)
    assert len(with_point) == 2
    assert all(a <= b for a, b in zip(with_point, without, strict=True)), (with_point, without)


def test_a_case_measured_flat_from_one_node_to_two_is_projected_flat_at_four(txl) -> None:  # type: ignore[no-untyped-def]
    one = next(p for p in txl.measured if p.nodes == 1)
    flat = replace(
        txl,
        measured=tuple(
            replace(p, throughput_per_device=one.throughput_per_device) if p.nodes == 2 else p
            for p in txl.measured
        ),
    )
    (at4,) = [p for p in backtest([flat], draws=400)["points"] if p["nodes"] == 4]
    # the bar the projection issue sets: a case flat from 1 node to 2 is projected >= 85% at 4
    # (its interval's width is the published points' noise, which the shipped model chose)
    assert at4["predicted"] >= 0.85, at4
    assert at4["low"] <= at4["published"] <= at4["high"], at4


def test_the_draws_are_checked_against_every_measured_scale_the_anchor_too(txl) -> None:  # type: ignore[no-untyped-def]
    checks = evidence(txl)
    # the reference is the 1-node point (published efficiencies are against one node), 1 by
    # definition: checked; the anchor (2 nodes) too, since a draw whose communication alone
    # outlasts its measured step cannot be calibrated to it
    two = next(p for p in txl.measured if p.nodes == 2)
    one = next(p for p in txl.measured if p.nodes == 1)
    assert [(p.nodes, p.devices_per_node) for p, _ in checks] == [(1, 16), (2, 16)]
    assert [e for _, e in checks] == [
        1.0,
        pytest.approx(two.throughput_per_device / one.throughput_per_device),
    ]


def test_measured_scales_no_draw_reproduces_leave_the_draws_as_drawn_and_say_so(txl) -> None:  # type: ignore[no-untyped-def]
    """A 2-node anchor ten times the 1-node throughput a device (a step so short that every
    draw's communication alone outlasts it, so none can be calibrated to it): the draws are
    not weighed, so the points are centred as a case with no such measurement is, at the
    typical share, and not said to be the draws it leaves."""
    from analysis.compute.projection.published.scoring import prepare

    one = next(p for p in txl.measured if p.nodes == 1)
    odd = replace(
        txl,
        measured=tuple(
            replace(p, throughput_per_device=10 * one.throughput_per_device) if p.nodes == 2 else p
            for p in txl.measured
        ),
    )
    weighed = prepare([txl], draws=40)
    assert all(p.evidenced for p in weighed)
    assert {p.explanation for p in weighed} == {"the draws its measured scales leave"}
    got = prepare([odd], draws=40)
    assert got and not any(p.evidenced for p in got)
    assert "the draws its measured scales leave" not in {p.explanation for p in got}


def test_a_measured_scale_the_slow_draws_cannot_reach_rules_them_out() -> None:
    """PaddleFleetX's VGG16 (fp32, 32 a GPU; 553 MB of gradients a step) on a stated 100 Gb/s:
    76.1% at 2 nodes, 73.5% at 4. Projected from 1 node, the learned band spans shares of the
    line rate whose all-reduce outlasts the 2-node step, and the centre sits low (56%). With
    the 2-node point measured, the draws too slow to reach it are ruled out, and 4 nodes is
    projected within 10 points (72%) and covered, more than 10 points above the projection
    from one node."""
    case = next(c for c in read_cases(str(CASES)) if c.name == "paddlefleetx-vgg16-fp32-bs32-v100")
    four = max(case.published, key=lambda p: p.nodes)
    walked = walk_forward([case])
    assert [(w.name, [p.nodes for p in w.measured], w.published) for w in walked] == [
        (f"{case.name} @4", [1, 1, 2], (four,))  # 1 GPU, 1 node, 2 nodes
    ]
    (at4,) = backtest(walked, draws=400)["points"]
    assert at4["network"] == "measured"
    assert abs(at4["predicted"] - four.efficiency_vs_1node) <= 0.10, at4
    assert at4["low"] <= four.efficiency_vs_1node <= at4["high"], at4
    (from_one,) = [p for p in backtest([case], draws=400)["points"] if p["nodes"] == 4]
    assert from_one["network"] == "stated" and from_one["predicted"] < at4["predicted"] - 0.1


def _width(case, seed: int, draws: int = 400) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The widths of the case's one point's intervals relative to their centres: the published
    tables' model's, and the one a sweep's projection draws."""
    got = backtest([case], draws=draws, seed=seed)
    ((pub,), (sweep,)) = (
        got["points"] or got["fsdp"]["points"],
        got["sweep"]["points"] or got["fsdp"]["sweep"]["points"],
    )
    return np.array([(p["high"] - p["low"]) / p["predicted"] for p in (pub, sweep)], dtype=float)


def test_no_open_case_with_a_stated_link_is_widened_by_a_measured_scale() -> None:
    """The bar, over every open case that states its inter-node line rate, walked forward as a
    sweep is (each published point from every smaller scale), on the intervals of both
    shipped models (the published tables' and a sweep's): no wider than with its anchor (the
    largest measured node count) removed; with any other measured node count removed, a
    little wider at most (a middle point can move the draws it keeps towards one edge of what
    the others allow). Widths are taken relative to the centre: one run's noise is a share of
    its throughput, so a measured rise that lifts the centre lifts the interval's floor with
    it, and what the bar asks is that a measurement leave no more unknown (in points, the DDP
    benchmark's 8 machines at 7 is 0.2-0.8 wider with its 6-machine anchor, 285 images/s a
    GPU against 282 at 5, which lifts its centre from 93.7% to 95.6%; relative to the centre,
    no wider beyond the draws' noise). One seed's width carries the draws' Monte Carlo noise
    (at 400 draws about a point over seeds, up to two on the difference one measured point
    makes), so where one seed's comparison says wider, 5 seeds at four times the draws
    decide: an anchor fails where the widening is beyond the noise (one-sided t-test on the
    5 differences, p < 0.05), a middle point where it averages more than a point. On the
    shipped cases, relative to the centre, the widest an anchor leaves on the first seed is
    1.25 points (MareNostrum 5's 4 nodes, its 2-node anchor: it measured a loss one node did
    not see, 97.2% at 2 nodes, so the centre falls from 99.3% to 94.0% and the spread scales
    with the loss it projects; +0.45 over 5 seeds at 1,600 draws, p = 0.13) and the widest a
    middle point leaves 2.0 (HKBU's BERT-base over TCP at 8 nodes, its 2-node point; +1.04
    over 5 seeds at 400 draws, +0.46 at 1,600), of 63 cases."""

    from scipy import stats

    shut = set(read_sealed(str(CASES)).sources)
    stated = [c for c in read_cases(str(CASES)) if c.group not in shut and c.inter_busbw_gbps]
    walked = walk_forward(stated)
    assert len(walked) >= 20
    for case in walked:
        width = _width(case, 0)
        multi = [p for p in case.measured if p.nodes > 1]
        anchor = max(multi, key=lambda p: p.nodes)
        for q in multi:
            fewer = replace(case, measured=tuple(p for p in case.measured if p != q))
            wider = width - _width(fewer, 0)
            for model in np.flatnonzero(wider > (1e-9 if q is anchor else 0.002)):
                seeds = [(_width(case, s, 1600) - _width(fewer, s, 1600))[model] for s in range(5)]
                if q is anchor:
                    got = stats.ttest_1samp(seeds, 0.0, alternative="greater").pvalue
                    assert not got < 0.05, (case.name, q.nodes, model, seeds)
                else:
                    assert float(np.mean(seeds)) <= 0.01, (case.name, q.nodes, model, seeds)


def test_a_sharp_likelihood_still_leaves_many_distinct_draws() -> None:
    """HKBU's BERT-large over 10 GbE walked to 4 nodes, its 1- and 2-node points measured:
    they pin the network so sharply that of 400 draws a handful carry the weight (an
    effective sample size near 8), and resampling 400 from them repeated the few. The pool
    grows within the part of the band they allow, so the resampled draws are many distinct
    ones (7-11 before), each still among those the measured points allow."""
    from analysis.compute.projection.published.scoring import (
        _drawn_models,
        _ess,
        evidence_weight,
    )

    (case,) = [
        c for c in walk_forward(read_cases(str(CASES))) if c.name == "hkbu-bertlarge-10gbe-tcp @4"
    ]
    checks = evidence(case)
    assert len(checks) == 2
    models, shares, weighed = _drawn_models(case, 400, np.random.default_rng(0))
    assert weighed and len(models) == 400
    assert len(np.unique(shares)) >= 40
    w = np.array([evidence_weight(m, checks) for m in models])
    assert _ess(w) > 0 and np.all(w > 0)


def test_draws_grown_within_the_allowed_band_keep_the_distribution_of_the_band() -> None:
    """The draws added within the part of the band the measured points allow are weighed
    against the mixture they were drawn from, so the resampled shares of the line rate follow
    what 16,000 draws over the whole band, weighed alike, say (HKBU's BERT-large over 10 GbE
    at 4 nodes: their 10th, 50th and 90th percentiles, 0.58, 0.61 and 0.63), not the
    narrowed part's own spread."""
    from analysis.compute.projection.published.scoring import (
        _draw_batch,
        _drawn_models,
        evidence_weight,
    )

    (case,) = [
        c for c in walk_forward(read_cases(str(CASES))) if c.name == "hkbu-bertlarge-10gbe-tcp @4"
    ]
    checks = evidence(case)
    models, shares, _ = _draw_batch(case, 0, 16000, np.random.default_rng(5), (0.0, 1.0))
    weight = np.array([evidence_weight(m, checks) for m in models])
    order = np.argsort(shares)
    cumulative = np.cumsum(weight[order]) / weight.sum()
    reference = [np.array(shares)[order][np.searchsorted(cumulative, q)] for q in (0.1, 0.5, 0.9)]
    _, drawn, _ = _drawn_models(case, 400, np.random.default_rng(0))
    assert np.quantile(drawn, [0.1, 0.5, 0.9]) == pytest.approx(reference, abs=0.025)
