"""The projection's error model (analysis.compute.projection.model_error): one point's interval and
score worked by hand, and the nested cross-validation, whose choices must come from the training
sources alone."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from analysis.compute.projection import model_error as me
from analysis.compute.projection import scored as sc
from analysis.compute.projection.published import noise_selection as ns
from analysis.compute.projection.published.totals import interval_score, totals


def point(truth: float, *, base: list[float], z_noise: list[float], group: str = "g") -> sc.Scored:
    """A point whose structural draws are ``base`` and whose noise draws are ``z_noise``
    (no residual draws: ``z`` is 0)."""
    n = len(base)
    return sc.Scored(
        case="c",
        group=group,
        d=1.0,
        s=0.0,
        truth=truth,
        centre=0.9,
        base=np.array(base, dtype=float),
        z=np.zeros(n),
        z_noise=np.array(z_noise, dtype=float),
    )


def test_one_point_is_scored_as_worked_by_hand() -> None:
    """Three draws 0.9 x exp(0.02 x {-1, 0, 1}) = 0.882179, 0.9, 0.918181 under a model with no
    mean and no spread. numpy's percentiles interpolate between the order statistics: the
    2.5th lies 0.05 of the way from the first to the second, the 97.5th 0.95 of the way from
    the second to the third. So the interval is [0.883070, 0.917272] around 0.9."""
    em = me.ErrorModel(noise=0.02)
    lo_draw, hi_draw = 0.9 * math.exp(-0.02), 0.9 * math.exp(0.02)
    low = lo_draw + 0.05 * (0.9 - lo_draw)
    high = 0.9 + 0.95 * (hi_draw - 0.9)
    assert low == pytest.approx(0.883070, abs=1e-6) and high == pytest.approx(0.917272, abs=1e-6)
    base, z_noise = [0.9, 0.9, 0.9], [-1.0, 0.0, 1.0]
    missed, hit = me.score(
        [point(0.80, base=base, z_noise=z_noise), point(0.91, base=base, z_noise=z_noise)], em
    )
    assert missed["covered"] is False and hit["covered"] is True
    assert missed["error_pts"] == pytest.approx(10.0)  # 0.90 predicted, 0.80 published
    assert hit["error_pts"] == pytest.approx(-1.0)
    for got in (missed, hit):
        assert got["predicted"] == pytest.approx(0.9)
        assert got["low"] == pytest.approx(low) and got["high"] == pytest.approx(high)
        assert got["width_pts"] == pytest.approx(100 * (high - low))
    t = totals([missed, hit])
    assert missed["miss_pts"] == pytest.approx(100 * (low - 0.80)) and hit["miss_pts"] == 0.0
    # the interval score: each width, the miss 2 / 0.05 = 40 times, averaged
    score = 100 * (high - low) + 20 * 100 * (low - 0.80)
    assert t == pytest.approx(
        {
            "coverage": 0.5,
            "median_abs_error_pts": 5.5,
            "median_width_pts": 100 * (high - low),
            "interval_score_pts": score,
        }
    )


def test_a_point_without_a_centre_is_a_miss_and_has_no_error_to_count() -> None:
    """A point the model could not project (no centre, no interval) counts against the
    coverage, and the median error and width are over the points that have them: one such
    point leaves the other's 2 points of error, not NaN."""
    hit = {"covered": True, "error_pts": 2.0, "width_pts": 10.0, "miss_pts": 0.0}
    none = {"covered": False, "error_pts": math.nan, "width_pts": math.nan, "miss_pts": math.nan}
    t = totals([hit, none])
    assert t == pytest.approx(
        {
            "coverage": 0.5,
            "median_abs_error_pts": 2.0,
            "median_width_pts": 10.0,
            "interval_score_pts": 10.0,
        }
    )
    alone = totals([none])
    assert alone["coverage"] == 0.0 and math.isnan(alone["median_abs_error_pts"])


def test_the_mean_shifts_the_prediction_and_a_point_without_draws_is_never_covered() -> None:
    em = me.ErrorModel(mu_d=math.log(0.9), noise=0.0)  # d = 1: every draw times 0.9
    (got,) = me.score([point(0.81, base=[0.9, 0.9], z_noise=[0.0, 0.0])], em)
    assert got["predicted"] == pytest.approx(0.81) and got["error_pts"] == pytest.approx(0.0)
    assert got["covered"] is True
    (none,) = me.score([point(0.9, base=[math.nan, math.nan], z_noise=[0.0, 0.0])], em)
    assert none["covered"] is False and math.isnan(float(none["low"]))


# --- the anchor's ceiling -----------------------------------------------------------------------


@given(
    ceiling=st.floats(0.3, 1.0),
    lift=st.floats(0.0, 0.6),
    spread=st.floats(0.0, 0.5),
    noise=st.floats(0.0, 0.1),
    seed=st.integers(0, 2**16),
)
def test_a_point_beyond_its_anchor_is_never_projected_past_the_anchors_own_efficiency(
    ceiling: float, lift: float, spread: float, noise: float, seed: int
) -> None:
    """However far the error model's mean lifts a projection and however wide its spread, a
    point beyond its anchor (the same work per device, more communication) is never centred
    above the anchor's efficiency, and its interval reaches above it only by its noise. Where
    every lifted draw stays below the ceiling, the interval is the unbounded one."""
    rng = np.random.default_rng(seed)
    n = 64
    z, z_noise = rng.standard_normal(n), rng.standard_normal(n)
    base = ceiling * rng.uniform(0.2, 1.0, n)
    bounded = replace(
        point(0.5, base=list(base), z_noise=list(z_noise)),
        centre=float(np.median(base)),
        z=z,
        ceiling=ceiling,
    )
    em = me.ErrorModel(mu_d=lift, sd_d=spread, noise=noise)
    centre, low, high = me.interval(bounded, em)
    assert centre <= ceiling * (1 + 1e-12)
    assert high <= ceiling * math.exp(noise * float(z_noise.max())) * (1 + 1e-9)
    assert low <= centre <= high
    below = replace(bounded, base=base * 0.2, centre=float(np.median(base * 0.2)))
    if float(np.max(below.base * np.exp(lift + spread * z))) < ceiling:
        assert me.interval(below, em) == me.interval(replace(below, ceiling=math.inf), em)


def test_kappa_is_calibrated_on_the_points_within_reach() -> None:
    """A published point above what its anchor's efficiency and its noise allow (107% where
    the anchor's is 100% and the noise 1%) no spread can cover: the calibration of ``kappa``
    counts the points within reach, so such points neither widen every other interval nor
    change its factor (they are still scored, as misses)."""
    pts = [replace(p, ceiling=1.0) for p in sources(seed=3)]
    far = [replace(p, case="far", truth=1.07, ceiling=1.0) for p in pts[:5]]
    em = me.ErrorModel(sd_d=0.02, noise=0.01)
    for kappa in (0.0, 0.5, 1.0, 2.0, 4.0):
        within, both = me._Stacked(pts, em), me._Stacked(pts + far, em)
        assert both.coverage(kappa) == within.coverage(kappa)
    assert not me._Stacked(far, em).reachable.any()
    assert all(not s["covered"] for s in me.score(far, em.scaled(4.0)))


@given(
    hnp.arrays(
        float,
        st.tuples(st.integers(1, 6), st.integers(1, 40)),
        elements=st.one_of(
            st.floats(1e-3, 10.0), st.just(math.nan), st.just(math.inf), st.just(-math.inf)
        ),
    )
)
def test_row_percentiles_are_numpys_of_each_rows_finite_values(rows: np.ndarray) -> None:
    """The vectorised percentiles equal numpy's, one row at a time over its finite values,
    to the last bit (the shipped model is refitted byte for byte); a row with none is NaN."""
    low, high = me.finite_percentiles(rows, (2.5, 97.5))
    for k, row in enumerate(rows):
        finite = row[np.isfinite(row)]
        if not len(finite):
            assert math.isnan(low[k]) and math.isnan(high[k])
            continue
        want = np.percentile(finite, [2.5, 97.5])
        assert (low[k], high[k]) == (want[0], want[1])


@pytest.mark.parametrize("kappa", [0.0, 0.7, 1.0, 3.0])
def test_what_kappa_is_calibrated_on_is_what_is_scored(kappa: float) -> None:
    """One rule makes every interval: the coverage ``kappa`` is bisected on is the share of
    reachable points that :func:`score` finds covered, and one point's :func:`interval` is its
    row of the stack, across ceilings that bind, draws that are partly or wholly missing and
    a point with no centre (never covered, with no interval)."""
    em = me.ErrorModel(mu_d=0.05, sd_d=0.04, noise=0.02)
    pts = sources(seed=5)
    pts[1] = replace(pts[1], ceiling=0.85)  # binds: the lifted draws pass it
    pts[2] = replace(pts[2], base=np.where(np.arange(len(pts[2].base)) % 3, 0.9, np.nan))
    pts[3] = replace(pts[3], base=np.full(len(pts[3].base), np.nan))  # no draw at all
    pts[4] = replace(pts[4], centre=math.nan)
    scored = me.score(pts, em.scaled(kappa))
    stack = me._Stacked(pts, em)
    covered = np.array([s["covered"] for s in scored])
    assert stack.coverage(kappa) == pytest.approx(float(np.mean(covered[stack.reachable])))
    for p, s in zip(pts, scored, strict=True):
        got = me.interval(p, em, kappa)
        assert got == pytest.approx((s["predicted"], s["low"], s["high"]), nan_ok=True)
    assert math.isnan(scored[3]["low"]) and not scored[3]["covered"]
    assert math.isnan(scored[4]["low"]) and not scored[4]["covered"]
    assert scored[1]["predicted"] <= 0.85 + 1e-12


# --- nested cross-validation -------------------------------------------------------------------


def sources(seed: int = 1, groups: int = 6, per: int = 4, draws: int = 200) -> list[sc.Scored]:
    """Published points of ``groups`` sources, log residuals normal around -1% per doubling
    with a spread of 2% per square root of a doubling; no structural spread."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        for i in range(per):
            d = float(1 + i % 3)
            r = rng.normal(-0.01 * d, 0.02 * math.sqrt(d))
            out.append(
                sc.Scored(
                    case=f"c{g}",
                    group=f"g{g}",
                    d=d,
                    s=0.0,
                    truth=0.9 * math.exp(r),
                    centre=0.9,
                    base=np.full(draws, 0.9),
                    z=rng.standard_normal(draws),
                    z_noise=rng.standard_normal(draws),
                )
            )
    return out


FINE_GRID = (0.01, 0.015, 0.02, 0.03, 0.045, 0.06, 0.08, 0.1, 0.13)


def test_a_fold_chooses_its_noise_without_its_held_out_source() -> None:
    """Moving the held-out source's published points (each to 80% of its centre) changes the
    noise level that every source together chooses (1% -> 13%: a choice made outside the
    folds would move with it), but not the level its own fold chose, nor that fold's
    intervals."""
    pts = sources()
    moved = [replace(p, truth=0.8 * p.centre) if p.group == "g0" else p for p in pts]
    grid = FINE_GRID  # these points spread 2%: below the shipped grid's floor
    assert ns.choose_noise(pts, grid)[0] == 0.01 and ns.choose_noise(moved, grid)[0] == 0.13

    scored, folds = ns.cross_validate(pts, grid)
    scored_moved, folds_moved = ns.cross_validate(moved, grid)
    assert [f["held_out"] for f in folds] == [f"g{i}" for i in range(6)]
    assert folds[0]["noise"] == folds_moved[0]["noise"]
    assert folds[0]["inner"] == folds_moved[0]["inner"]
    held = [(s["predicted"], s["low"], s["high"]) for s in scored if s["group"] == "g0"]
    held_moved = [(s["predicted"], s["low"], s["high"]) for s in scored_moved if s["group"] == "g0"]
    assert held == held_moved
    # each fold's level is the one its training sources choose
    for fold in folds:
        train = [p for p in pts if p.group != fold["held_out"]]
        assert fold["noise"] == ns.choose_noise(train, grid)[0]


def test_the_noise_is_the_level_with_the_least_interval_score() -> None:
    """The level whose held-out intervals score least: width, plus 40 times how far a point
    falls outside (a 95% interval), not the coverage nearest 95% nor the narrowest."""
    rows = [
        {"noise": 0.01, "coverage": 0.90, "median_width_pts": 10.0, "interval_score_pts": 30.0},
        {"noise": 0.015, "coverage": 1.00, "median_width_pts": 12.0, "interval_score_pts": 14.0},
        {"noise": 0.02, "coverage": 0.96, "median_width_pts": 14.0, "interval_score_pts": 14.0},
        {"noise": 0.03, "coverage": 0.94, "median_width_pts": 13.0, "interval_score_pts": math.nan},
    ]
    assert ns.pick_noise(rows) == 0.015  # the least, then the lower level; none: never chosen
    assert ns.pick_noise([{**r, "interval_score_pts": math.nan} for r in rows]) == 0.01


def test_the_interval_score_is_width_plus_forty_times_the_miss() -> None:
    """Gneiting and Raftery's score of a central 95% interval, in points: [40, 60] scores 20
    for a truth inside, 20 + 40 x 5 for a truth 5 points above; a point with no interval is
    left out, as from the median width."""
    inside = {"width_pts": 20.0, "miss_pts": 0.0}
    above = {"width_pts": 20.0, "miss_pts": 5.0}
    none = {"width_pts": math.nan, "miss_pts": 0.0}
    assert interval_score([inside]) == pytest.approx(20.0)
    assert interval_score([inside, above, none]) == pytest.approx((20.0 + 220.0) / 2)
    assert math.isnan(interval_score([none]))
    (got,) = me.score([stated("a", 0.3)], me.ErrorModel(noise=0.0, share_band=(0.2, 0.4, 0.7)))
    truth = stated("a", 0.3).truth
    low, high = float(got["low"]), float(got["high"])
    assert got["miss_pts"] == pytest.approx(100 * (max(0, low - truth) + max(0, truth - high)))


def test_a_family_held_out_is_scored_by_the_other_families_alone() -> None:
    """Leave one family out: the six sources in two families. Moving every point of family
    A leaves the intervals of A's own fold unchanged (fitted and chosen on family B alone),
    and each fold's noise is what the other family's sources choose."""
    pts = [replace(p, family="A" if p.group in ("g0", "g1", "g2") else "B") for p in sources()]
    moved = [replace(p, truth=0.95 * p.centre) if p.family == "A" else p for p in pts]
    scored, folds = ns.cross_validate(pts, key=lambda p: p.family)
    scored_moved, _ = ns.cross_validate(moved, key=lambda p: p.family)
    assert [(f["held_out"], f["points"]) for f in folds] == [
        ("A", sum(p.family == "A" for p in pts)),
        ("B", sum(p.family == "B" for p in pts)),
    ]
    in_a = {f"g{i}" for i in range(3)}

    def intervals(rows: list) -> list:  # type: ignore[type-arg]
        return [(s["predicted"], s["low"], s["high"]) for s in rows if s["group"] in in_a]

    assert intervals(scored) == intervals(scored_moved)
    for fold in folds:
        train = [p for p in pts if p.family != fold["held_out"]]
        assert fold["noise"] == ns.choose_noise(train)[0]


# --- a cluster's own error ---------------------------------------------------------------------


def residual(group: str, r: float, z: np.ndarray, z_noise: np.ndarray, s: float = 1.0) -> sc.Scored:
    """A published point of source ``group`` at d = 1 whose log residual is ``r`` (centre
    0.9, structural draws all at the centre), its anchor a single node and it across nodes
    (``s`` = 1) unless ``s`` says otherwise."""
    return sc.Scored(
        case=group,
        group=group,
        d=1.0,
        s=s,
        truth=0.9 * math.exp(r),
        centre=0.9,
        base=np.full(len(z), 0.9),
        z=z,
        z_noise=z_noise,
    )


def clusters(
    tau: float, within: float, groups: int, per: int, seed: int = 0, s: float = 1.0
) -> list[sc.Scored]:
    """``groups`` sources of ``per`` points at d = 1 each, every source's residuals sharing
    its own offset (normal, s.d. ``tau``) around which they spread ``within``."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        own = rng.normal(0.0, tau)
        for _ in range(per):
            r = own + rng.normal(0.0, within)
            out.append(residual(f"g{g}", r, np.zeros(8), np.zeros(8), s))
    return out


@pytest.mark.parametrize("tau,within", [(0.1, 0.02), (0.03, 0.08), (0.0, 0.05)])
def test_the_spread_between_clusters_is_told_from_the_spread_within_one(
    tau: float, within: float
) -> None:
    """400 sources of 5 points: the moments recover the spread shared by a source's points
    (sd_src) apart from the spread of its points around their own mean (sd_d at d = 1), each
    per unit of the loss their centre projects (10% here: the spreads times loss_scale are
    the residuals')."""
    em = me._components(clusters(tau, within, 400, 5), noise=0.0)
    h = float(me.loss_scale(0.9))
    assert em.sd_src * h == pytest.approx(tau, abs=0.01)
    assert float(em.reach(1.0, 0.0, 0.9)) == pytest.approx(within, abs=0.01)


def test_a_clusters_own_error_is_learned_across_the_first_inter_node_step_alone() -> None:
    """Beside 400 sources whose points cross nodes from a single-node anchor (their own
    offsets spread 0.03), the same sources' points anchored across nodes, their network
    measured, share offsets spread 0.2 of their own: the spread between clusters is the
    crossing points' (0.03), not inflated by the others' offsets, which spread within."""
    crossing = clusters(0.03, 0.02, 400, 5, seed=0)
    measured = clusters(0.2, 0.02, 400, 5, seed=1, s=0.0)
    em = me._components(crossing + measured, noise=0.0)
    assert em.sd_src * float(me.loss_scale(0.9)) == pytest.approx(0.03, abs=0.01)


def test_each_source_counts_once_in_the_mean() -> None:
    """One source of 40 points 20% high and four of 2 points on the centre: weighted by
    source, the mean residual is a fifth of log(1.2); by point it would be over 4/5 of it."""
    rng = np.random.default_rng(1)

    def at(group: str, r: float) -> sc.Scored:
        return residual(group, r, rng.standard_normal(4), rng.standard_normal(4))

    pts = [at("big", math.log(1.2)) for _ in range(40)]
    pts += [at(f"small{i}", 0.0) for i in range(4) for _ in range(2)]
    em = me._components(pts, noise=0.0)
    assert em.mean(1.0, 1.0) == pytest.approx(math.log(1.2) / 5, rel=1e-6)


def test_the_mean_from_an_anchor_across_nodes_is_fitted_on_such_points_alone() -> None:
    """Points projected from one node fall 10% short a doubling beyond the anchor (d = 1, 2,
    3); points of the same sources projected from a multi-node anchor (``within`` = 0) are
    right on average, half of them 2% high and half 2% low. The one-node slope must not be
    carried to the others (it was: the mean was one slope for both): their mean is fitted on
    them, with the one-node points' own mean left as it was; without such points it is 0."""
    rng = np.random.default_rng(3)
    one_node, spanning = [], []
    for g in range(5):
        for d in (1.0, 2.0, 3.0):
            z, zn = rng.standard_normal(8), rng.standard_normal(8)
            one_node.append(replace(residual(f"g{g}", -0.1 * d, z, zn), d=d, s=1.0))
            for sign in (1.0, -1.0):
                r = sign * 0.02 * d
                spanning.append(replace(residual(f"g{g}", r, z, zn), d=d, s=0.0, within=0.0))
    em = me._components(one_node, noise=0.0, spanning=spanning)
    assert em.mu_m == pytest.approx(0.0, abs=1e-12)
    assert float(em.mean(2.0, 1.0)) == pytest.approx(-0.2, abs=1e-9)
    assert float(em.mean(2.0, 0.0, 0.0)) == pytest.approx(0.0, abs=1e-12)
    low = [replace(p, truth=p.truth * math.exp(-0.05 * p.d)) for p in spanning]
    assert me._components(one_node, noise=0.0, spanning=low).mu_m == pytest.approx(-0.05)
    assert me._components(one_node, noise=0.0).mu_m == 0.0
    # a sweep anchored across nodes is shifted by mu_m, one anchored on one node by the rest
    (got,) = me.score([replace(spanning[0], d=1.0, truth=0.9)], replace(em, mu_m=math.log(0.9)))
    assert got["predicted"] == pytest.approx(0.81)


@given(
    st.floats(0.0, 0.3),
    st.floats(0.0, 0.3),
    st.floats(0.0, 0.3),
    st.floats(0.0, 4.0),
    st.sampled_from([0.0, 1.0]),
)
def test_a_clusters_own_error_applies_only_where_the_anchor_has_not_crossed_a_node(
    sd_d: float, sd_s: float, sd_src: float, d: float, s: float
) -> None:
    """A cluster's own error is its network's: it applies where the target crosses nodes from
    a single-node anchor (s = 1), never where a multi-node anchor measured the network."""
    em = me.ErrorModel(sd_d=sd_d, sd_s=sd_s, sd_src=sd_src, noise=0.0)
    expected = sd_d**2 * d + (sd_s**2 + sd_src**2) * s
    assert float(em.spread(d, s)) ** 2 == pytest.approx(expected, abs=1e-12)
    scaled = em.scaled(2.0)
    assert float(scaled.spread(d, s)) == pytest.approx(2 * float(em.spread(d, s)))


@given(
    st.floats(0.0, 0.3),
    st.floats(0.0, 0.3),
    st.floats(0.0, 0.3),
    st.floats(0.0, 1.0),
    st.floats(0.0, 4.0),
)
def test_the_spread_from_an_anchor_across_nodes_is_its_own_per_doubling(
    sd_d: float, sd_s: float, sd_src: float, sd_m: float, d: float
) -> None:
    """Where the anchor spans nodes (``within`` = 0), the spread is ``sd_m`` per doubling,
    whatever the one-node spreads are (it was ``sd_d``'s, fitted on one-node points and zero
    in half the folds); ``kappa`` (:meth:`ErrorModel.scaled`) does not touch it."""
    em = me.ErrorModel(sd_d=sd_d, sd_s=sd_s, sd_src=sd_src, sd_m=sd_m, noise=0.0)
    assert float(em.spread(d, 0.0, 0.0)) ** 2 == pytest.approx(sd_m**2 * d, abs=1e-12)
    assert float(em.spread(d, 0.0, 1.0)) ** 2 == pytest.approx(sd_d**2 * d, abs=1e-12)
    assert em.scaled(3.0).sd_m == sd_m
    centre = 0.8
    assert float(em.reach(d, 0.0, centre, 0.0)) == pytest.approx(
        sd_m * math.sqrt(d) * float(me.loss_scale(centre))
    )


def test_the_spread_from_an_anchor_across_nodes_is_what_95_percent_of_its_points_need() -> None:
    """``sd_m`` is the 95th percentile (numpy's linear) of the levels each training point
    projected from an anchor across nodes needs to be covered. With no noise and every
    structural draw at the centre (0.9, its loss scale 0.13), a point ``r`` above it in log
    needs ``r / (0.13 q97.5)`` of the residual draws' own percentile, one below ``r / (0.13
    q2.5)``. ``fit`` sets it from such points alone: they leave ``kappa`` on the one-node
    points as it was, and without them it is 0."""
    rng = np.random.default_rng(5)
    z = rng.standard_normal(400)
    r = rng.normal(0.0, 0.05, 40)
    pts = [
        replace(residual(f"g{i % 8}", float(x), z, np.zeros(400), s=0.0), within=0.0)
        for i, x in enumerate(r)
    ]
    lo, hi = np.percentile(z, [2.5, 97.5])
    need = np.where(r > 0, r / (0.13 * hi), r / (0.13 * lo))
    got = me._quantile_factor(me._Stacked(pts, me.ErrorModel(sd_m=1.0, noise=0.0)))
    assert got == pytest.approx(float(np.percentile(need, 95)), rel=0.02)
    ranked = np.sort(need)
    assert ranked[37] < got < ranked[38]  # between the levels covering 38 and 39 of 40
    one_node = sources(seed=3)
    alone, both = me.fit(one_node, noise=0.01), me.fit(one_node, noise=0.01, spanning=pts)
    assert (both.sd_d, both.sd_s, both.sd_src) == (alone.sd_d, alone.sd_s, alone.sd_src)
    assert alone.sd_m == 0.0 < both.sd_m
    assert both.sd_m == me._quantile_factor(me._Stacked(pts, replace(both, sd_m=1.0)))


# --- the share of a stated line rate a cluster achieves ----------------------------------------


def stated(group: str, achieved: float, n: int = 400, seed: int = 0) -> sc.Scored:
    """A published point whose draws span shares of a stated line rate over 5%-100% (log
    uniform), each draw's efficiency rising with its share (steeply enough that the
    efficiency tells shares apart: where it saturates, the share is the prior's guess), the
    truth the efficiency at ``achieved``."""
    rng = np.random.default_rng(seed)
    share = np.exp(rng.uniform(math.log(0.05), 0.0, n))

    def eff(x: np.ndarray | float) -> np.ndarray | float:
        return 1.0 / (1.0 + 0.5 / x)

    return sc.Scored(
        case=group,
        group=group,
        d=1.0,
        s=1.0,
        truth=float(eff(achieved)),
        centre=float(np.median(eff(share))),
        base=np.asarray(eff(share)),
        z=np.zeros(n),
        z_noise=np.zeros(n),
        share=share,
    )


def test_the_band_is_learned_from_the_clusters_seen_and_one_is_not_enough() -> None:
    from scipy import stats

    seen = {"a": 0.25, "b": 0.4, "c": 0.6, "d": 0.8}
    pts = [stated(g, x, seed=i) for i, (g, x) in enumerate(seen.items())]
    for p, x in zip(pts, seen.values(), strict=True):  # each cluster's own share, read back
        assert sc._share_of(p) == pytest.approx(x, rel=0.15)
    low, typical, high = sc.learn_share_band(pts)  # type: ignore[misc]
    logs = np.log([sc._share_of(p) for p in pts])
    half = stats.t.ppf(0.975, 3) * np.std(logs, ddof=1) * math.sqrt(1 + 1 / 4)
    assert typical == pytest.approx(math.exp(np.mean(logs)))
    assert low == pytest.approx(math.exp(np.mean(logs) - half))
    assert high == min(1.0, math.exp(np.mean(logs) + half))
    assert low < min(seen.values()) and high >= max(seen.values())
    assert sc.learn_share_band(pts[:1]) is None
    # a case that states no line rate says nothing of it
    assert sc.learn_share_band([replace(p, share=None) for p in pts]) is None


def test_one_source_on_two_links_is_two_networks_for_the_band() -> None:
    """A source whose cases ran on two links of one cluster (its Ethernet and its
    InfiniBand) reached a share of each line rate of its own: counted as two networks, not
    pooled into one median; cases on one link, or naming none, count with their source."""
    eth = stated("lab", 0.9, seed=1)
    ib = replace(stated("lab", 0.3, seed=2), case="lab-ib")
    other = stated("other", 0.5, seed=3)
    pooled = sc.learn_share_band([eth, ib, other])
    assert pooled is not None  # two sources: lab (its points' median) and other
    split = sc.learn_share_band(
        [replace(eth, link="lab: 10GbE"), replace(ib, link="lab: 100Gb IB"), other]
    )
    assert split is not None
    three = np.log([sc._share_of(p) for p in (eth, ib, other)])
    assert split[1] == pytest.approx(math.exp(np.mean(three)))  # three networks
    assert pooled[1] != pytest.approx(split[1])
    same = sc.learn_share_band(
        [replace(eth, link="lab: 10GbE"), replace(ib, link="lab: 10GbE"), other]
    )
    assert same == pytest.approx(pooled)  # one link named alike: one network, as before


def test_a_point_is_viewed_within_the_band_and_centred_at_the_typical_share() -> None:
    p = stated("a", 0.3)
    band = (0.2, 0.4, 0.7)
    centre, base = p.view(band)
    kept = (p.share >= 0.2) & (p.share <= 0.7)
    assert np.array_equal(np.isfinite(base), kept)
    near = np.abs(np.log(p.share / 0.4)) <= sc.TYPICAL_WINDOW
    assert centre == pytest.approx(float(np.median(p.base[near])))
    assert p.view(None) == (p.centre, p.base)
    # weighed by the case's measured scales, the draws are centred where they fall, not at
    # the typical share: what the cluster achieved was measured
    measured = replace(p, evidenced=True)
    centre, base_m = measured.view(band)
    assert centre == pytest.approx(float(np.median(p.base[kept])))
    assert np.array_equal(np.isfinite(base_m), kept)
    # the interval keeps only the band's draws: its ends are theirs (no spread, no noise)
    _, low, high = me.interval(p, me.ErrorModel(noise=0.0, share_band=band))
    assert low >= p.base[kept].min() - 1e-12 and high <= p.base[kept].max() + 1e-12


@pytest.mark.parametrize(
    "target,anchor,beyond",
    [
        ((16, 2), (8, 1), True),  # more ranks, more nodes
        ((8, 2), (8, 1), True),  # the same ranks spread over more nodes: 1x8 to 2x4
        ((16, 1), (8, 1), True),  # more ranks on the anchor's one node
        ((8, 1), (4, 2), False),  # more ranks on fewer nodes: 2x2 to 1x8 leaves the link
        ((8, 1), (8, 1), False),  # the anchor itself
        ((4, 4), (8, 2), False),  # fewer ranks
    ],
)
def test_a_scale_is_beyond_its_anchor_only_with_no_fewer_ranks_nor_nodes(
    target: tuple[int, int], anchor: tuple[int, int], beyond: bool
) -> None:
    """(world, nodes): a scale is bounded by its anchor's efficiency where its ranks do the
    anchor's work over links no faster, never where it has fewer nodes (it may be faster)."""
    assert me.beyond_anchor(*target, *anchor) is beyond


def test_a_spread_reaches_as_far_as_the_loss_its_centre_projects() -> None:
    """Two points alike but for their centres, 97% and 60%: the same spread draws log
    intervals in the ratio of the losses they project (plus one run's noise), 0.06 to 0.43,
    not the same interval in log for both."""
    z = np.random.default_rng(3).standard_normal(4000)
    em = me.ErrorModel(sd_d=0.2, noise=0.0)
    log_widths = []
    for centre in (0.97, 0.6):
        point = replace(residual("g", 0.0, z, np.zeros_like(z)), centre=centre, truth=centre)
        point = replace(point, base=np.full(len(z), centre))
        _, low, high = me.interval(point, em)
        log_widths.append(math.log(high / low))
    assert log_widths[0] / log_widths[1] == pytest.approx(0.06 / 0.43, rel=0.02)


@given(st.lists(st.floats(min_value=-0.5, max_value=1.5, allow_nan=False), min_size=2, max_size=20))
def test_the_loss_scale_falls_as_the_centre_rises_and_keeps_one_runs_noise(
    centres: list[float],
) -> None:
    h = np.asarray(me.loss_scale(np.array(centres)))
    order = np.argsort(centres, kind="stable")
    assert np.all(np.diff(h[order]) <= 1e-12)
    assert np.all(h >= me.LOSS_FLOOR) and np.all(h <= 1 + me.LOSS_FLOOR)
    assert math.isnan(float(me.loss_scale(math.nan)))
