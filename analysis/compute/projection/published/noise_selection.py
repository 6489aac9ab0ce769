"""The error model's one chosen setting, its noise, and the nested cross-validation that keeps
the choice inside the folds (the model and its fit: :mod:`..model_error`).

:func:`choose_noise` picks a level of :data:`..model_error.NOISE_GRID` by a leave-one-source-out
over the training sources alone (:func:`pick_noise`: the least mean interval score), scoring each
held-out source's points projected from its cases' measured points (nearly all one node) and
those projected from its smaller published scales alike: one noise serves both, and chosen
on the first alone it came out at 16%, which left the second's intervals 42 points wide where
one run's noise left them 18.5 at the same coverage;
:func:`fit_selected` fits the model at the level chosen; :func:`cross_validate` holds out each
source (or each kind of system) in turn and scores it by a model whose noise and fit come from
the others alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from analysis.compute.projection.model_error import (
    NOISE_GRID,
    ErrorModel,
    fit,
    score,
)
from analysis.compute.projection.published.totals import totals
from analysis.compute.projection.scored import Scored


def leave_one_source_out(
    points: Sequence[Scored], noise: float, spanning: Sequence[Scored] = ()
) -> list[dict[str, float | bool | str]]:
    """Each source's points, and its ``spanning`` ones (projected from its smaller published
    scales), scored by the model of noise ``noise`` fitted on the others (and the others'
    ``spanning`` points, :func:`fit`): one noise for both kinds of projection, so both speak
    for it."""
    out: list[dict[str, float | bool | str]] = []
    for group in dict.fromkeys(p.group for p in points):
        train = [p for p in points if p.group != group]
        em = fit(train, noise=noise, spanning=[p for p in spanning if p.group != group])
        out += score([p for p in points if p.group == group], em)
        out += score([p for p in spanning if p.group == group], em)
    return out


def pick_noise(rows: Sequence[dict[str, float]]) -> float:
    """The level of ``rows`` (one per noise level: its leave-one-source-out totals) whose
    held-out intervals score best: the least mean interval score
    (:func:`.totals.interval_score`, the proper scoring rule for a central 95% interval:
    its width, and 40 times how far a point falls outside it), then the lower level; a level
    with no score (no interval) is never chosen over one with, and where none has one, the
    lowest level. Chosen instead as the narrowest
    level whose coverage lay within one binomial standard error of 95%, the choice hung on
    one point of about 200: the held-out coverage barely moves with the noise (``kappa``
    shrinks the spreads as it grows), so folds went from 4.5% to 20%, and the intervals from
    one node a fifth wider, for that point."""
    scored = [r for r in rows if math.isfinite(r["interval_score_pts"])]
    if not scored:  # no level drew an interval: nothing to tell them apart, the lowest
        return min(r["noise"] for r in rows)
    return min(scored, key=lambda r: (r["interval_score_pts"], r["noise"]))["noise"]


def choose_noise(
    points: Sequence[Scored], grid: Sequence[float] = NOISE_GRID, spanning: Sequence[Scored] = ()
) -> tuple[float, list[dict[str, float]]]:
    """The noise level of ``grid`` that ``points`` choose, by a leave-one-source-out over
    their own sources (:func:`pick_noise`; each source's ``spanning`` points, projected from
    its smaller published scales, scored with its own), and each level's totals over the
    points scored (``points``). With fewer than two
    sources nothing can be held out, and a grid of one level leaves nothing to choose: the
    lowest level."""
    if len({p.group for p in points}) < 2 or len(set(grid)) < 2:
        return min(grid), []
    rows = []
    for noise in grid:
        scored = leave_one_source_out(points, noise, spanning)
        rows.append({"noise": noise, "points": len(scored), **totals(scored)})
    return pick_noise(rows), rows


def fit_selected(
    points: Sequence[Scored],
    fitted_on: str = "",
    grid: Sequence[float] = NOISE_GRID,
    spanning: Sequence[Scored] = (),
) -> tuple[ErrorModel, list[dict[str, float]]]:
    """The error model of ``points`` (and ``spanning``, :func:`fit`) with the noise they
    choose (:func:`choose_noise`), and the selection's rows."""
    noise, rows = choose_noise(points, grid, spanning)
    return fit(points, fitted_on, noise, spanning), rows


def cross_validate(
    points: Sequence[Scored],
    grid: Sequence[float] = NOISE_GRID,
    key: Callable[[Scored], str] = lambda p: p.group,
    also: Sequence[Scored] = (),
) -> tuple[list[dict[str, float | bool | str]], list[dict[str, Any]]]:
    """Nested leave one out: each fold's points (``key``: its source by default, or its
    family) scored by the model whose noise and fit come from the other folds' points alone
    (the noise chosen by a leave-one-source-out among them); and each fold's choice
    (``held_out``, its ``points``, the ``noise`` chosen and the inner selection's rows).
    ``also``: more points (each case's published points projected from its smaller
    published scales), each scored by the model of the fold its key falls in (under that
    fold's ``also``; a key no fold holds: not scored); the other folds' fit that model's mean
    and spread where the anchor spans nodes (``mu_m``, ``sd_m``, :func:`fit`), and are scored
    in its inner choice of the noise, beside its points."""
    out: list[dict[str, float | bool | str]] = []
    folds: list[dict[str, Any]] = []
    for group in dict.fromkeys(key(p) for p in points):
        train = [p for p in points if key(p) != group]
        held = [p for p in points if key(p) == group]
        spanning = [p for p in also if key(p) != group]  # the training folds' alone
        em, rows = fit_selected(train, f"all but {group}", grid, spanning)
        out += score(held, em)
        folds.append({"held_out": group, "points": len(held), "noise": em.noise, "inner": rows})
        if also:
            folds[-1]["also"] = score([p for p in also if key(p) == group], em)
    return out, folds
