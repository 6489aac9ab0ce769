"""The projection's error model (analysis.compute.projection.model_error): one point's interval and
score worked by hand, and the nested cross-validation, whose choices must come from the training
sources alone."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from analysis.compute.projection import model_error as me


def point(truth: float, *, base: list[float], z_noise: list[float], group: str = "g") -> me.Scored:
    """A point whose structural draws are ``base`` and whose noise draws are ``z_noise``
    (no residual draws: ``z`` is 0)."""
    n = len(base)
    return me.Scored(
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
    t = me.totals([missed, hit])
    assert t == pytest.approx(
        {"coverage": 0.5, "median_abs_error_pts": 5.5, "median_width_pts": 100 * (high - low)}
    )


def test_the_mean_shifts_the_prediction_and_a_point_without_draws_is_never_covered() -> None:
    em = me.ErrorModel(mu_d=math.log(0.9), noise=0.0)  # d = 1: every draw times 0.9
    (got,) = me.score([point(0.81, base=[0.9, 0.9], z_noise=[0.0, 0.0])], em)
    assert got["predicted"] == pytest.approx(0.81) and got["error_pts"] == pytest.approx(0.0)
    assert got["covered"] is True
    (none,) = me.score([point(0.9, base=[math.nan, math.nan], z_noise=[0.0, 0.0])], em)
    assert none["covered"] is False and math.isnan(float(none["low"]))


# --- nested cross-validation -------------------------------------------------------------------


def sources(seed: int = 1, groups: int = 6, per: int = 4, draws: int = 200) -> list[me.Scored]:
    """Published points of ``groups`` sources, log residuals normal around -1% per doubling
    with a spread of 2% per square root of a doubling; no structural spread."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        for i in range(per):
            d = float(1 + i % 3)
            r = rng.normal(-0.01 * d, 0.02 * math.sqrt(d))
            out.append(
                me.Scored(
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


def test_a_fold_chooses_its_noise_without_its_held_out_source() -> None:
    """Moving the held-out source's published points (each to 95% of its centre) changes the
    noise level that every source together chooses (1.5% -> 3%: a choice made outside the
    folds would move with it), but not the level its own fold chose, nor that fold's
    intervals."""
    pts = sources()
    moved = [replace(p, truth=0.95 * p.centre) if p.group == "g0" else p for p in pts]
    assert me.choose_noise(pts)[0] == 0.015 and me.choose_noise(moved)[0] == 0.03

    scored, folds = me.cross_validate(pts)
    scored_moved, folds_moved = me.cross_validate(moved)
    assert [f["held_out"] for f in folds] == [f"g{i}" for i in range(6)]
    assert folds[0]["noise"] == folds_moved[0]["noise"]
    assert folds[0]["inner"] == folds_moved[0]["inner"]
    held = [(s["predicted"], s["low"], s["high"]) for s in scored if s["group"] == "g0"]
    held_moved = [(s["predicted"], s["low"], s["high"]) for s in scored_moved if s["group"] == "g0"]
    assert held == held_moved
    # each fold's level is the one its training sources choose
    for fold in folds:
        train = [p for p in pts if p.group != fold["held_out"]]
        assert fold["noise"] == me.choose_noise(train)[0]


def test_the_noise_is_chosen_by_coverage_closest_to_95_percent_then_width() -> None:
    rows = [
        {"noise": 0.01, "coverage": 0.90, "median_width_pts": 10.0},
        {"noise": 0.015, "coverage": 1.00, "median_width_pts": 12.0},
        {"noise": 0.02, "coverage": 0.96, "median_width_pts": 14.0},
        {"noise": 0.03, "coverage": 0.94, "median_width_pts": 13.0},
    ]
    best = min(rows, key=lambda r: (*me.selection_key(r), r["noise"]))
    assert best["noise"] == 0.03  # 1 point from 95% like 0.02, and narrower


def test_a_family_held_out_is_scored_by_the_other_families_alone() -> None:
    """Leave one family out: the six sources in two families. Moving every point of family
    A leaves the intervals of A's own fold unchanged (fitted and chosen on family B alone),
    and each fold's noise is what the other family's sources choose."""
    pts = [replace(p, family="A" if p.group in ("g0", "g1", "g2") else "B") for p in sources()]
    moved = [replace(p, truth=0.95 * p.centre) if p.family == "A" else p for p in pts]
    scored, folds = me.cross_validate(pts, key=lambda p: p.family)
    scored_moved, _ = me.cross_validate(moved, key=lambda p: p.family)
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
        assert fold["noise"] == me.choose_noise(train)[0]
