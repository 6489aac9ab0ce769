"""The interval of one series' projection: its centre at each target scale, under each
what-if, and the draws its 95% prediction interval is taken from.

The interval is a prediction interval: percentiles of draws that (1) resample each measured
scale's runs with replacement (bootstrap over repeats, the network's fit with them), (2) take
the structural explanations of the anchor's unexplained step in turn, (3) draw the network's
bus bandwidth log-uniformly within its band, and (4) add the error model's residual
(:mod:`.model_error`: learned from published cases) and one run's noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from analysis.compute.projection.error_file import load_sweep
from analysis.compute.projection.model_error import (
    MEASURED_NOISE,
    ErrorModel,
    apply_error,
    beyond_anchor,
    features,
    within_one_node,
)
from analysis.compute.projection.series_network import series_network
from analysis.compute.projection.step_time.step_model import (
    CARRIES,
    DDP_TERM,
    CommTerm,
    Fit,
    ScalePoint,
    StepModel,
    fit_series,
)
from analysis.compute.projection.what_ifs import WhatIf, settings_of, under, what_ifs

DRAWS = 400
INTERVAL = (2.5, 97.5)


def by_explanation(
    model: StepModel, world: int, nodes: int, kw: Mapping[str, Any]
) -> dict[str, tuple[float, dict[str, float], float]]:
    """Each explanation of :data:`CARRIES` -> its (efficiency, parts, per-device batch) at
    ``world`` ranks over ``nodes`` nodes."""
    return {c: replace(model, carry=c).efficiency(world, nodes, **kw) for c in CARRIES}


def centre_of(
    got: Mapping[str, tuple[float, dict[str, float], float]],
) -> tuple[str, tuple[float, dict[str, float], float]]:
    """The explanation the centre assumes among ``got`` (:func:`by_explanation`) and its
    (efficiency, parts, per-device batch): the middle by efficiency (the others bound it)."""
    finite = sorted((r[0], c) for c, r in got.items() if math.isfinite(r[0]))
    if not finite:
        first = next(iter(got))
        return first, got[first]
    carry = finite[(len(finite) - 1) // 2][1]
    return carry, got[carry]


def anchor_efficiency(model: StepModel, kw: Mapping[str, Any], bw: float | None = None) -> float:
    """``model``'s efficiency at its own anchor (under the what-if settings ``kw``): the most a
    scale beyond it (:func:`.model_error.beyond_anchor`) can reach before its run-to-run
    noise, since it does the same work per device and communicates more."""
    e, _, _ = model.efficiency(model.anchor_world, model.anchor_nodes, bw=bw, **kw)
    return e if math.isfinite(e) and e > 0 else math.inf


def run_noise(points: Sequence[ScalePoint], world: int, floor: float) -> float:
    """The run-to-run noise of one run (relative s.d. of the per-device throughput) at the
    ``world``-rank point: its repeats' spread where there are two or more, never below
    ``floor``, the error model's (two runs that happen to agree say little about a third)."""
    runs = [
        1.0 / p.t_s
        for pt in points
        if pt.world == world
        for p in pt.parts
        if math.isfinite(p.t_s) and p.t_s > 0
    ]
    if len(runs) < 2:
        return floor
    mean = math.fsum(runs) / len(runs)
    sd = math.sqrt(math.fsum((r - mean) ** 2 for r in runs) / (len(runs) - 1))
    return max(floor, sd / mean) if mean > 0 else floor


def resample(points: Sequence[ScalePoint], rng: np.random.Generator) -> list[ScalePoint]:
    out = []
    for pt in points:
        if pt.parts:
            idx = rng.integers(0, len(pt.parts), len(pt.parts))
            out.append(replace(pt, parts=[pt.parts[i] for i in idx]))
        else:
            out.append(pt)
    return out


def project_points(
    fit: Fit,
    points: Sequence[ScalePoint],
    baseline: ScalePoint,
    scaling_mode: str,
    targets: Sequence[tuple[int, int]],
    *,
    profile: Mapping[str, Any] | None = None,
    precision: str = "",
    draws: int = DRAWS,
    seed: int = 0,
    error_model: ErrorModel | None = None,
    term: CommTerm = DDP_TERM,
) -> list[dict[str, Any]]:
    """Rows of (what-if, nodes, devices per node) with the central projection and its
    interval; ``targets`` are (nodes, devices per node); ``term``: what the network term
    times (DDP's buckets, or an FSDP series' units) as the fit took it.

    The centre is the middle of the structural explanations (:data:`CARRIES`) at the
    network band's middle, shifted by the error model's mean. Each draw resamples every
    measured scale's runs (the network's fit with them, unless ``profile`` gives it),
    takes the explanations in turn, a point of the network band and the error model's
    residual, with the run-to-run noise of one run (the anchor's repeats' spread where
    there are two or more, never below :data:`.model_error.MEASURED_NOISE`), under the
    shipped model's spreads calibrated beside such a run's noise
    (:func:`.model_error.fit_sweep`: the noise the published model chose is a published
    table's, not a measured run's, and its spreads were calibrated beside it)."""
    model = fit.model
    assert model is not None
    # the shipped sweep model with this sweep's run-to-run noise; one given is used as it is
    em = error_model or replace(
        load_sweep(), noise=run_noise(points, model.anchor_world, floor=MEASURED_NOISE)
    )
    ifs = what_ifs(model, precision)
    centres = {
        (w.name, nodes, dpn): _centre(under(model, w), settings_of(model, w), nodes, dpn, em)
        for w in ifs
        for nodes, dpn in targets
    }
    # the error model's spread reaches as far as the loss each centre projects (loss_scale)
    samples = _draw(
        points, baseline, scaling_mode, profile, ifs, targets, em, draws, seed, term, centres
    )
    rows = []
    for w in ifs:
        for nodes, dpn in targets:
            key = (w.name, nodes, dpn)
            rows.append(_centre_row(w, nodes, dpn, centres[key], samples.get(key, [])))
    return rows


def _draw(
    points: Sequence[ScalePoint],
    baseline: ScalePoint,
    scaling_mode: str,
    profile: Mapping[str, Any] | None,
    ifs: Sequence[WhatIf],
    targets: Sequence[tuple[int, int]],
    em: ErrorModel,
    draws: int,
    seed: int,
    term: CommTerm,
    centres: Mapping[tuple[str, int, int], _Centre],
) -> dict[tuple[str, int, int], list[float]]:
    """(what-if, nodes, devices per node) -> the efficiency of every draw (see
    :func:`project_points`): the fit redone on resampled runs (``term`` as one draw takes it:
    FSDP's hidden share on GPUs), the explanations in turn, a point of the network band, the
    error model's residual (as far as the loss of its ``centres``' efficiencies reaches) and
    one run's noise."""
    rng = np.random.default_rng(seed)
    samples: dict[tuple[str, int, int], list[float]] = {}
    for i in range(draws):
        base_draw = resample([baseline], rng)[0]
        pts = resample(points, rng)
        carry = CARRIES[i % len(CARRIES)]
        net, t = series_network(pts, profile), term.drawn(rng)
        drawn = fit_series(pts, base_draw, scaling_mode, net, carry, t).model
        u, z, z_noise = float(rng.uniform()), rng.standard_normal(), rng.standard_normal()
        if drawn is None:
            continue
        within = within_one_node(drawn.anchor_nodes)
        for w in ifs:
            changed, kw = under(drawn, w), settings_of(drawn, w)
            top = anchor_efficiency(changed, kw, bw=drawn.network.factor(drawn.anchor_nodes, u))
            for nodes, dpn in targets:
                d, s = features(nodes * dpn, nodes, drawn.anchor_world, drawn.anchor_nodes)
                spread = float(em.reach(d, s, centres[(w.name, nodes, dpn)].efficiency, within))
                e, _, _ = changed.efficiency(
                    nodes * dpn, nodes, bw=drawn.network.factor(nodes, u), **kw
                )
                mean = float(em.mean(d, s, within))
                # never past the anchor's own, where the target is beyond it
                beyond = beyond_anchor(nodes * dpn, nodes, drawn.anchor_world, drawn.anchor_nodes)
                ceiling = top if beyond else math.inf
                e = apply_error(e, mean, spread * z, ceiling, em.noise * z_noise)
                samples.setdefault((w.name, nodes, dpn), []).append(float(e))
    return samples


class _Centre(NamedTuple):
    carry: str
    """The explanation the centre assumes."""
    efficiency: float
    """With the error model's mean."""
    parts: dict[str, float]
    """The step's parts, the model's own."""
    batch: float
    """The per-device batch."""
    shift: float
    """The mean's factor."""
    ratio: float
    """The world size over the baseline's."""
    explained: tuple[float, float]
    """The least and the most efficiency the explanations give alone (each with the mean, as
    the centre has it; NaN where none is finite)."""


def _centre(
    model: StepModel, kw: Mapping[str, Any], nodes: int, dpn: int, em: ErrorModel
) -> _Centre:
    """The centre at ``nodes`` x ``dpn`` of ``model`` under a what-if's settings ``kw``."""
    world = nodes * dpn
    got = by_explanation(model, world, nodes, kw)
    carry, (e, parts, batch) = centre_of(got)
    # the error model's mean shifts the projection, not only its efficiency: the throughput
    # carries the same factor, so throughput = efficiency x world x the baseline's
    # per-device throughput (the step's parts stay the model's own)
    shift = _shift(model, kw, carry, e, nodes, dpn, em)
    alone = [
        a * _shift(model, kw, c, a, nodes, dpn, em)
        for c, (a, _, _) in got.items()
        if math.isfinite(a)
    ]
    explained = (min(alone), max(alone)) if alone else (math.nan, math.nan)
    return _Centre(carry, e * shift, parts, batch, shift, world / model.baseline_world, explained)


def _shift(
    model: StepModel,
    kw: Mapping[str, Any],
    carry: str,
    e: float,
    nodes: int,
    dpn: int,
    em: ErrorModel,
) -> float:
    """The error model's mean, as a factor on the efficiency ``e`` that explanation ``carry``
    gives at ``nodes`` x ``dpn``: beyond the anchor it never lifts it past the anchor's own."""
    world = nodes * dpn
    d, s = features(world, nodes, model.anchor_world, model.anchor_nodes)
    shift = math.exp(float(em.mean(d, s, within_one_node(model.anchor_nodes))))
    if beyond_anchor(world, nodes, model.anchor_world, model.anchor_nodes) and e > 0:
        shift = min(shift, anchor_efficiency(replace(model, carry=carry), kw) / e)
    return shift


def _centre_row(
    w: WhatIf,
    nodes: int,
    dpn: int,
    centre: _Centre,
    drawn: Sequence[float],
) -> dict[str, Any]:
    """One row of :func:`project_points`: the ``centre`` (:func:`_centre`) at ``nodes`` x
    ``dpn`` under what-if ``w``, the interval from the ``drawn`` efficiencies."""
    carry, e, parts, batch, shift, ratio, explained = centre
    world = nodes * dpn
    got = np.array([v for v in drawn if math.isfinite(v)])
    low, high = (
        (float(np.percentile(got, INTERVAL[0])), float(np.percentile(got, INTERVAL[1])))
        if len(got)
        else (math.nan, math.nan)
    )
    # no throughput where no efficiency: a micro-batch of less than one sample is not run
    x = batch / parts["step"] * shift if parts["step"] > 0 and math.isfinite(e) else math.nan
    return {
        "what_if": w.name,
        "nodes": nodes,
        "devices_per_node": dpn,
        "world_size": world,
        "per_device_batch_size": batch,
        "accumulate_grad_batches": int(parts["k"]),
        "efficiency": e,
        "efficiency_low": min(low, e),
        "efficiency_high": max(high, e),
        "speedup": e * ratio,
        "speedup_low": min(low, e) * ratio,
        "speedup_high": max(high, e) * ratio,
        "throughput_per_device": x,
        "throughput": x * world,
        "centre_assumes": carry,
        "explanations_low": explained[0],
        "explanations_high": explained[1],
        **{("step_s" if k == "step" else f"{k}_step_s"): v for k, v in parts.items() if k != "k"},
    }
