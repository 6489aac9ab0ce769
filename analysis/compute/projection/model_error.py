"""The projection's error model: how far published multi-node efficiencies fall from the step
model's centre, learned from the shipped published cases, never set by hand.

A projection from an anchor (the largest measured scale) to a larger one is off by a factor
the step model cannot see. In log efficiency, the residual ``r = log(truth) - log(centre)``
is modelled as normal with

    mean  mu(d, s) = mu_d d + mu_s s
    var   var(d, s) = sd_d^2 d + sd_s^2 s + noise^2

where ``d = log2(target world size / anchor world size)`` (how many doublings beyond the
anchor: the error of a model grows with how far it is carried) and ``s = 1`` where the
anchor is a single node and the target spans several (the first inter-node step, which a
single-node anchor has not seen), else 0. ``noise`` is the run-to-run noise of one measured
point: it is why a published 102% can be reached.

Fitting (:func:`fit`), on the residuals of a training set: the means by least squares, the
variance components by non-negative least squares on the squared deviations, and then one
factor ``kappa`` on both spreads, the smallest that makes the training set's own 95%
intervals (which also span the structural alternatives and the network band) cover 95% of
its points.

The noise is the one setting chosen by a score, so it is chosen inside the folds
(:func:`choose_noise`): from :data:`NOISE_GRID`, by a leave-one-source-out over the training
sources only, scored by :func:`selection_key` (fixed before any result was seen). The other
settings are fitted on the training set (the means, the spreads, ``kappa``) or are stated
assumptions of the backtest (the bands of :mod:`analysis.compute.projection.scoring`), never scored.
:func:`cross_validate` is therefore nested: each source is held out in turn and scored by a
model whose noise and fit come from the others alone. The shipped model is made the same way
on every source (:func:`fit_selected`), written with its grid and its selection by
``python -m analysis.project fit-error`` into ``analysis/compute/projection/model_error.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

NOISE_GRID = (0.01, 0.015, 0.02, 0.03)
"""The run-to-run noise of one measured throughput (relative, one s.d.) the error model
chooses from: published tables state one number per point, an average over many steps, and
say nothing of its spread, so the level is chosen by :func:`choose_noise`. A sweep's own
projection takes the shipped model's level as the floor of its repeats' spread."""
COVERAGE_TARGET = 0.95
SHIPPED_PATH = Path(__file__).with_name("model_error.json")


@dataclass(frozen=True)
class ErrorModel:
    mu_d: float = 0.0
    mu_s: float = 0.0
    sd_d: float = 0.0
    sd_s: float = 0.0
    noise: float = NOISE_GRID[0]
    fitted_on: str = ""
    """Which cases it was fitted on (a file and how many points), for the record."""

    def mean(self, d: np.ndarray | float, s: np.ndarray | float) -> np.ndarray | float:
        return self.mu_d * d + self.mu_s * s

    def sd(self, d: np.ndarray | float, s: np.ndarray | float) -> np.ndarray | float:
        return np.sqrt(self.sd_d**2 * d + self.sd_s**2 * s + self.noise**2)


def features(
    target_world: int, target_nodes: int, anchor_world: int, anchor_nodes: int
) -> tuple[float, float]:
    """(d, s) of the module doc."""
    d = max(0.0, math.log2(target_world / anchor_world)) if anchor_world > 0 else 0.0
    s = 1.0 if anchor_nodes <= 1 < target_nodes else 0.0
    return d, s


@dataclass
class Scored:
    """What scoring needs of one published point, independent of the error model: its
    features, the truth, the centre, and the structural draws (efficiencies from the
    step model over the alternatives and the network band) with fixed normal draws."""

    case: str
    group: str
    d: float
    s: float
    truth: float
    centre: float
    base: np.ndarray
    z: np.ndarray
    z_noise: np.ndarray
    explanation: str = ""
    """Which structural explanation the centre assumes (for the report)."""
    family: str = ""
    """The kind of system the point's case ran on (its case's ``family``, else its source)."""


def interval(point: Scored, em: ErrorModel, kappa: float = 1.0) -> tuple[float, float, float]:
    """(centre, low, high) of one point's 95% prediction interval under ``em``."""
    spread = math.sqrt(em.sd_d**2 * point.d + em.sd_s**2 * point.s) * kappa
    shift = float(em.mean(point.d, point.s))
    draws = point.base * np.exp(shift + spread * point.z + em.noise * point.z_noise)
    draws = draws[np.isfinite(draws)]
    centre = point.centre * math.exp(shift)
    if not len(draws):
        return centre, math.nan, math.nan
    low, high = np.percentile(draws, [2.5, 97.5])
    return centre, min(float(low), centre), max(float(high), centre)


class _Stacked:
    """The points of a training set as arrays (one row a point), so that the bisection of
    ``kappa`` scores them all at once: each row's interval is :func:`interval`'s."""

    def __init__(self, points: Sequence[Scored]) -> None:
        self.d = np.array([p.d for p in points])
        self.s = np.array([p.s for p in points])
        self.truth = np.array([p.truth for p in points])
        self.centre = np.array([p.centre for p in points])
        self.base = np.stack([p.base for p in points]) if points else np.empty((0, 0))
        self.z = np.stack([p.z for p in points]) if points else np.empty((0, 0))
        self.z_noise = np.stack([p.z_noise for p in points]) if points else np.empty((0, 0))

    def coverage(self, em: ErrorModel, kappa: float) -> float:
        if not len(self.truth):
            return math.nan
        spread = np.sqrt(em.sd_d**2 * self.d + em.sd_s**2 * self.s)[:, None] * kappa
        shift = np.asarray(em.mean(self.d, self.s))[:, None]
        draws = self.base * np.exp(shift + spread * self.z + em.noise * self.z_noise)
        finite = np.isfinite(draws)
        empty = ~finite.any(axis=1)
        if finite.all():
            low, high = np.percentile(draws, [2.5, 97.5], axis=1)
        else:  # as interval(): the finite draws only; none: no interval, never covered
            draws[~finite] = np.nan
            draws[empty] = 0.0
            low, high = np.nanpercentile(draws, [2.5, 97.5], axis=1)
        centre = self.centre * np.exp(shift[:, 0])
        hit = (np.minimum(low, centre) <= self.truth) & (self.truth <= np.maximum(high, centre))
        return float(np.mean(hit & ~empty))


def fit(points: Sequence[Scored], fitted_on: str = "", noise: float = NOISE_GRID[0]) -> ErrorModel:
    """The error model of ``points`` (see the module doc)."""
    from scipy.optimize import nnls

    usable = [p for p in points if math.isfinite(p.centre) and p.centre > 0 and p.truth > 0]
    if not usable:
        return ErrorModel(noise=noise, fitted_on=fitted_on)
    d = np.array([p.d for p in usable])
    s = np.array([p.s for p in usable])
    r = np.array([math.log(p.truth / p.centre) for p in usable])
    design = np.column_stack([d, s])
    mu, *_ = np.linalg.lstsq(design, r, rcond=None) if np.any(design) else (np.zeros(2),)
    dev2 = (r - design @ mu) ** 2 - noise**2
    var, _ = nnls(design, np.maximum(dev2, 0.0)) if np.any(design) else (np.zeros(2), 0.0)
    em = ErrorModel(
        float(mu[0]),
        float(mu[1]),
        float(math.sqrt(var[0])),
        float(math.sqrt(var[1])),
        noise,
        fitted_on,
    )
    # kappa: the smallest factor whose training intervals cover COVERAGE_TARGET
    stacked = _Stacked(usable)
    lo, hi = 0.0, 1.0
    while stacked.coverage(em, hi) < COVERAGE_TARGET and hi < 64:
        lo, hi = hi, hi * 2
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if stacked.coverage(em, mid) >= COVERAGE_TARGET else (mid, hi)
    return ErrorModel(em.mu_d, em.mu_s, em.sd_d * hi, em.sd_s * hi, noise, fitted_on)


def score(points: Sequence[Scored], em: ErrorModel) -> list[dict[str, float | bool | str]]:
    out: list[dict[str, float | bool | str]] = []
    for p in points:
        centre, low, high = interval(p, em)
        out.append(
            {
                "case": p.case,
                "group": p.group,
                "predicted": centre,
                "low": low,
                "high": high,
                "covered": bool(low <= p.truth <= high),
                "error_pts": 100.0 * (centre - p.truth),
                "width_pts": 100.0 * (high - low),
            }
        )
    return out


def totals(scored: Sequence[dict[str, float | bool | str]]) -> dict[str, float]:
    """Coverage, median absolute error and median width (points) of scored points."""
    if not scored:
        return {
            "coverage": math.nan,
            "median_abs_error_pts": math.nan,
            "median_width_pts": math.nan,
        }
    errors = [abs(float(p["error_pts"])) for p in scored]
    widths = [float(p["width_pts"]) for p in scored if math.isfinite(float(p["width_pts"]))]
    return {
        "coverage": sum(bool(p["covered"]) for p in scored) / len(scored),
        "median_abs_error_pts": float(np.median(errors)),
        "median_width_pts": float(np.median(widths)) if widths else math.nan,
    }


def leave_one_source_out(
    points: Sequence[Scored], noise: float
) -> list[dict[str, float | bool | str]]:
    """Each source's points scored by the model of noise ``noise`` fitted on the others."""
    out: list[dict[str, float | bool | str]] = []
    for group in dict.fromkeys(p.group for p in points):
        train = [p for p in points if p.group != group]
        out += score([p for p in points if p.group == group], fit(train, noise=noise))
    return out


def selection_key(t: dict[str, float]) -> tuple[float, float]:
    """The score a noise level is chosen by, lower is better (fixed before any result was
    seen): the distance of its leave-one-source-out coverage from :data:`COVERAGE_TARGET`,
    then its median interval width. An interval that covers too much is as wrong as one
    that covers too little; of two that cover alike, the narrower says more."""
    return round(abs(t["coverage"] - COVERAGE_TARGET), 9), t["median_width_pts"]


def choose_noise(
    points: Sequence[Scored], grid: Sequence[float] = NOISE_GRID
) -> tuple[float, list[dict[str, float]]]:
    """The noise level of ``grid`` that ``points`` choose, by a leave-one-source-out over
    their own sources scored by :func:`selection_key` (ties: the lower level), and each
    level's totals. With fewer than two sources nothing can be held out: the lowest level."""
    if len({p.group for p in points}) < 2:
        return min(grid), []
    rows = [{"noise": noise, **totals(leave_one_source_out(points, noise))} for noise in grid]
    best = min(rows, key=lambda r: (*selection_key(r), r["noise"]))
    return best["noise"], rows


def fit_selected(
    points: Sequence[Scored], fitted_on: str = "", grid: Sequence[float] = NOISE_GRID
) -> tuple[ErrorModel, list[dict[str, float]]]:
    """The error model of ``points`` with the noise they choose (:func:`choose_noise`), and
    the selection's rows."""
    noise, rows = choose_noise(points, grid)
    return fit(points, fitted_on, noise), rows


def cross_validate(
    points: Sequence[Scored],
    grid: Sequence[float] = NOISE_GRID,
    key: Callable[[Scored], str] = lambda p: p.group,
) -> tuple[list[dict[str, float | bool | str]], list[dict[str, Any]]]:
    """Nested leave one out: each fold's points (``key``: its source by default, or its
    family) scored by the model whose noise and fit come from the other folds' points alone
    (the noise chosen by a leave-one-source-out among them); and each fold's choice
    (``held_out``, its ``points``, the ``noise`` chosen and the inner selection's rows)."""
    out: list[dict[str, float | bool | str]] = []
    folds: list[dict[str, Any]] = []
    for group in dict.fromkeys(key(p) for p in points):
        train = [p for p in points if key(p) != group]
        held = [p for p in points if key(p) == group]
        em, rows = fit_selected(train, f"all but {group}", grid)
        out += score(held, em)
        folds.append({"held_out": group, "points": len(held), "noise": em.noise, "inner": rows})
    return out, folds


def write(
    em: ErrorModel, path: Path = SHIPPED_PATH, selection: Sequence[dict[str, float]] = ()
) -> None:
    from scalescope.atomic import write_text_atomic

    doc: dict[str, Any] = asdict(em)
    doc["noise_grid"] = list(NOISE_GRID)
    doc["noise_selection"] = list(selection)
    write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def load(path: Path = SHIPPED_PATH) -> ErrorModel:
    """The error model written at ``path`` (its recorded selection is for the record)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return ErrorModel(**{f.name: data[f.name] for f in fields(ErrorModel) if f.name in data})
