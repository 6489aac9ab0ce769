"""Projection: the scale a sweep has not run yet, with an interval.

The step model (:mod:`.step_time.step_model`) is fitted to each series' measured scale points and
evaluated at larger ones; this module draws its interval, the what-ifs, the 75% crossing
and the self-check (the largest measured scale predicted from the smaller ones). The words
of the report are :mod:`analysis.present.report.projection_text`'s, a network profile's reading
:mod:`.network_profile`'s.

The interval is a prediction interval: percentiles of draws that (1) resample each measured
scale's runs with replacement (bootstrap over repeats, the network's fit with them), (2) take
the structural explanations of the anchor's unexplained step in turn, (3) draw the network's
bus bandwidth log-uniformly within its band, and (4) add the error model's residual
(:mod:`.model_error`: learned from published cases) and one run's noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from analysis.compute.metrics import EFFICIENCY_REFERENCE
from analysis.compute.projection.model_error import (
    MEASURED_NOISE,
    ErrorModel,
    apply_error,
    beyond_anchor,
    features,
    load_sweep,
    within_one_node,
)
from analysis.compute.projection.series_network import series_network
from analysis.compute.projection.step_time.fsdp_comm import FsdpTerm
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
from analysis.read.strategy import frame_strategy, fsdp_sharding

DRAWS = 400
INTERVAL = (2.5, 97.5)
SCAN_NODES = tuple(2**i for i in range(13))
"""Node counts scanned for the 75% crossing (up to 4096)."""
HSDP_NO_MESH = (
    "an HSDP series is projected from its shard groups' size (the record's sharding.mesh), "
    "which these records do not name (made before they were recorded): rerun the series to "
    "project it"
)
FSDP_NO_UNIT_BYTES = (
    "an FSDP series is projected from each wrapped unit's gathered bytes (the record's "
    "sharding.unit_bytes), which these records do not hold (made before they were "
    "recorded): rerun the series to project it"
)


# --- drawing the interval -----------------------------------------------------------------


def centre_of(
    model: StepModel, world: int, nodes: int, kw: Mapping[str, Any]
) -> tuple[str, tuple[float, dict[str, float], float]]:
    """The explanation the centre assumes at ``world`` ranks and its (efficiency, parts,
    per-device batch): the middle of :data:`CARRIES` by efficiency (the others bound it)."""
    got = [(c, replace(model, carry=c).efficiency(world, nodes, **kw)) for c in CARRIES]
    finite = sorted((r[0], c) for c, r in got if math.isfinite(r[0]))
    if not finite:
        return got[0][0], got[0][1]
    carry = finite[(len(finite) - 1) // 2][1]
    return carry, dict(got)[carry]


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
    samples = _draw(points, baseline, scaling_mode, profile, ifs, targets, em, draws, seed, term)
    rows = []
    for w in ifs:
        changed, kw = under(model, w), settings_of(model, w)
        for nodes, dpn in targets:
            drawn = samples.get((w.name, nodes, dpn), [])
            rows.append(_centre_row(changed, w, kw, nodes, dpn, em, drawn))
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
    term: CommTerm = DDP_TERM,
) -> dict[tuple[str, int, int], list[float]]:
    """(what-if, nodes, devices per node) -> the efficiency of every draw (see
    :func:`project_points`): the fit redone on resampled runs (``term`` as one draw takes it:
    FSDP's hidden share on GPUs), the explanations in turn, a point of the network band, the
    error model's residual and one run's noise."""
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
                spread = float(em.spread(d, s))
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


def _centre_row(
    model: StepModel,
    w: WhatIf,
    kw: Mapping[str, Any],
    nodes: int,
    dpn: int,
    em: ErrorModel,
    drawn: Sequence[float],
) -> dict[str, Any]:
    """One row of :func:`project_points`: the centre at ``nodes`` x ``dpn`` under what-if
    ``w`` (its settings ``kw``), the interval from the ``drawn`` efficiencies."""
    world = nodes * dpn
    carry, (e, parts, batch) = centre_of(model, world, nodes, kw)
    d, s = features(world, nodes, model.anchor_world, model.anchor_nodes)
    # the error model's mean shifts the projection, not only its efficiency: the throughput
    # carries the same factor, so throughput = efficiency x world x the baseline's
    # per-device throughput (the step's parts stay the model's own); beyond the anchor it
    # never lifts the efficiency past the anchor's own
    shift = math.exp(float(em.mean(d, s, within_one_node(model.anchor_nodes))))
    if beyond_anchor(world, nodes, model.anchor_world, model.anchor_nodes) and e > 0:
        shift = min(shift, anchor_efficiency(replace(model, carry=carry), kw) / e)
    e *= shift
    k_used = int(parts.pop("k"))
    got = np.array([v for v in drawn if math.isfinite(v)])
    low, high = (
        (float(np.percentile(got, INTERVAL[0])), float(np.percentile(got, INTERVAL[1])))
        if len(got)
        else (math.nan, math.nan)
    )
    ratio = world / model.baseline_world
    # no throughput where no efficiency: a micro-batch of less than one sample is not run
    x = batch / parts["step"] * shift if parts["step"] > 0 and math.isfinite(e) else math.nan
    return {
        "what_if": w.name,
        "nodes": nodes,
        "devices_per_node": dpn,
        "world_size": world,
        "per_device_batch_size": batch,
        "accumulate_grad_batches": k_used,
        "efficiency": e,
        "efficiency_low": min(low, e),
        "efficiency_high": max(high, e),
        "speedup": e * ratio,
        "speedup_low": min(low, e) * ratio,
        "speedup_high": max(high, e) * ratio,
        "throughput_per_device": x,
        "throughput": x * world,
        "centre_assumes": carry,
        **{("step_s" if k == "step" else f"{k}_step_s"): v for k, v in parts.items()},
    }


# --- a summary's projection ---------------------------------------------------------------


PROJECTION_COLUMNS = [
    "series",
    "what_if",
    "nodes",
    "devices_per_node",
    "world_size",
    "per_device_batch_size",
    "accumulate_grad_batches",
    "efficiency",
    "efficiency_low",
    "efficiency_high",
    "speedup",
    "speedup_low",
    "speedup_high",
    "throughput_per_device",
    "throughput",
    "centre_assumes",
    "step_s",
    "compute_step_s",
    "input_step_s",
    "overlap_step_s",
    "exposed_comm_step_s",
    "straggler_step_s",
    "other_step_s",
    "network",
    "scaled_points",
]
"""Columns of ``projection.csv`` (and ``summary.json``'s ``projection``): efficiencies are
fractions, throughput in samples/s, ``_step_s`` seconds per optimizer step."""

CHECK_COLUMNS = [
    "series",
    "nodes",
    "devices_per_node",
    "world_size",
    "from_world_sizes",
    "measured",
    "predicted",
    "predicted_low",
    "predicted_high",
    "error_pts",
    "covered",
]
"""Columns of the leave-one-out self-check: the largest measured scale predicted from the
smaller ones (efficiencies as fractions)."""


@dataclass
class SeriesProjection:
    series: str
    fit: Fit
    network_note: str
    crossing: dict[str, tuple[int | None, int | None, int | None]]
    """what-if -> (central, earliest, latest) nodes below :data:`.metrics.EFFICIENCY_REFERENCE`."""
    devices_per_node: int


@dataclass
class ProjectionResult:
    table: pd.DataFrame
    checks: pd.DataFrame
    series: list[SeriesProjection]
    notes: list[str]


def _points_of(members: Sequence[Any], base: Any) -> tuple[list[ScalePoint], ScalePoint]:
    from analysis.compute.run_parts import group_parts

    def point(g: Any) -> ScalePoint:
        parts = [p for _, p in group_parts(g)]
        k = g.rows.get("accumulate_grad_batches", [1])
        kk = {int(v) for v in k if v == v and v is not None} or {1}
        if g is base:
            usable = [p for p in parts if math.isfinite(p.t_s) and p.per_device_batch_size]
        else:
            usable = [p for p in parts if p.recorded]
        return ScalePoint(g.world_size, g.nodes, g.devices_per_node, usable, max(kk))

    points = [point(g) for g in members]
    return points, points[members.index(base)]


def scan_crossing(
    model: StepModel, w: WhatIf, dpn: int, lows: Mapping[int, float], highs: Mapping[int, float]
) -> tuple[int | None, int | None, int | None]:
    """Nodes (of :data:`SCAN_NODES`) where efficiency first falls below the threshold: at the
    central projection, at its interval's low end (earliest), at its high end (latest)."""
    changed, kw = under(model, w), settings_of(model, w)
    central = next(
        (
            n
            for n in SCAN_NODES
            if n * dpn > model.baseline_world
            and changed.efficiency(n * dpn, n, **kw)[0] < EFFICIENCY_REFERENCE
        ),
        None,
    )
    earliest = next((n for n in SCAN_NODES if lows.get(n, 1.0) < EFFICIENCY_REFERENCE), None)
    latest = next((n for n in SCAN_NODES if highs.get(n, 1.0) < EFFICIENCY_REFERENCE), None)
    return central, earliest, latest


def project(
    runs: pd.DataFrame,
    nodes: Sequence[int],
    *,
    devices_per_node: int | None = None,
    profile: Mapping[str, Any] | None = None,
    baseline: Any = None,
    confidence: float = 0.95,
    draws: int = DRAWS,
) -> ProjectionResult:
    """Every series' projection at ``nodes`` (devices per node: the sweep's largest, or
    ``devices_per_node``), its 75% crossing, and the leave-one-out self-check."""
    from analysis.compute.groups import series_scale_groups
    from analysis.compute.metrics import pick_baseline

    rows: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    out: list[SeriesProjection] = []
    notes: list[str] = []
    for _, label, members in series_scale_groups(runs, confidence):
        mode = str(members[0].rows["scaling_mode"].iloc[0])
        precision = str(members[0].rows["precision"].iloc[0])
        term, why = series_term(members)
        if term is None:
            notes.append(f"{label}: no projection: {why}.")
            continue
        base, _ = pick_baseline(members, baseline)
        points, base_pt = _points_of(members, base)
        net = series_network(points, profile)
        notes += _other_cluster_notes(label, members, profile)
        fit = fit_series(points, base_pt, mode, net, term=term)
        if fit.model is None:
            notes.append(f"{label}: no projection: {fit.reason}.")
            continue
        dpn = devices_per_node or max(g.devices_per_node for g in members)
        targets = [(n, dpn) for n in nodes]
        scan = [(n, dpn) for n in SCAN_NODES if n * dpn > base.world_size]
        all_targets = list(dict.fromkeys([*targets, *scan]))
        projected = project_points(
            fit,
            points,
            base_pt,
            mode,
            all_targets,
            profile=profile,
            precision=precision,
            draws=draws,
            term=term,
        )
        crossing = _crossings(fit.model, precision, dpn, projected)
        rows += [
            {
                "series": label,
                **r,
                "network": fit.model.network.note,
                "scaled_points": fit.scaled_points,
            }
            for r in projected
            if (r["nodes"], r["devices_per_node"]) in targets
        ]
        out.append(SeriesProjection(label, fit, fit.model.network.note, crossing, dpn))
        notes += _few_repeats_notes(label, points)
        check = self_check(members, points, base, base_pt, mode, profile, precision, draws, term)
        if check is not None:
            checks.append({"series": label, **check})
    table = pd.DataFrame(rows, columns=PROJECTION_COLUMNS)
    return ProjectionResult(table, pd.DataFrame(checks, columns=CHECK_COLUMNS), out, notes)


def series_term(members: Sequence[Any]) -> tuple[CommTerm | None, str]:
    """What a series' network term times (its scale groups ``members``): DDP's buckets, or
    an FSDP or HSDP series' wrapped units as its records give them (:func:`analysis.read.
    strategy.fsdp_sharding`; HSDP's with its shard groups' size), their collectives hidden by
    prefetching on GPUs and on CPUs not; None and why where the records do not hold the
    units' bytes (or HSDP's mesh)."""
    rows = pd.concat([g.rows for g in members])
    if frame_strategy(rows) not in ("fsdp", "hsdp"):
        return DDP_TERM, ""
    sharding = fsdp_sharding(rows)
    if sharding is None or sharding.unit_bytes is None:
        return None, FSDP_NO_UNIT_BYTES
    if frame_strategy(rows) == "hsdp" and sharding.shard_size is None:
        return None, HSDP_NO_MESH
    accelerator = str(rows["accelerator"].iloc[0]) if "accelerator" in rows.columns else ""
    return FsdpTerm.of(sharding, gpu=accelerator.lower() != "cpu"), ""


def _crossings(
    model: StepModel, precision: str, dpn: int, projected: Sequence[Mapping[str, Any]]
) -> dict[str, tuple[int | None, int | None, int | None]]:
    """What-if -> its :func:`scan_crossing`, from the rows projected at the scanned nodes."""
    crossing = {}
    for w in what_ifs(model, precision):
        these = [r for r in projected if r["what_if"] == w.name]
        lows = {r["nodes"]: r["efficiency_low"] for r in these}
        highs = {r["nodes"]: r["efficiency_high"] for r in these}
        crossing[w.name] = scan_crossing(model, w, dpn, lows, highs)
    return crossing


def _other_cluster_notes(
    label: str, members: Sequence[Any], profile: Mapping[str, Any] | None
) -> list[str]:
    """A note where the earlier runs a network was taken from name clusters and the series
    ran on none of them: their network is taken to be this cluster's, which it may not be."""
    theirs = {str(c) for c in (profile or {}).get("clusters") or []}
    ours = {c for g in members for c in g.clusters()}
    if not theirs or not ours or theirs & ours:
        return []
    return [
        f"{label}: the network is taken from runs on {', '.join(sorted(theirs))}, but this "
        f"series ran on {', '.join(sorted(ours))}: its projection holds only if the two "
        "clusters' networks between nodes are alike."
    ]


def _few_repeats_notes(label: str, points: Sequence[ScalePoint]) -> list[str]:
    """A note where a scale beyond one device has fewer than 3 runs behind the interval."""
    runs_at = min(len(pt.parts) for pt in points if pt.world > 1 and pt.parts)
    if runs_at >= 3:
        return []
    return [
        f"{label}: the projection's interval rests on {runs_at} run(s) at a scale; a "
        "bootstrap over so few repeats is too narrow: run 3 or more of each shape."
    ]


def self_check(
    members: Sequence[Any],
    points: Sequence[ScalePoint],
    base: Any,
    base_pt: ScalePoint,
    mode: str,
    profile: Mapping[str, Any] | None,
    precision: str,
    draws: int,
    term: CommTerm = DDP_TERM,
) -> dict[str, Any] | None:
    """The largest measured scale predicted from the smaller ones (three scales or more,
    the baseline counted), against its measured efficiency; ``term`` as the series' fit."""
    worlds = sorted({pt.world for pt in points})
    if len(worlds) < 3:
        return None
    top = max(points, key=lambda pt: (pt.world, pt.nodes))
    # every scale as large as the one predicted is held out (a 1x4 beside a 2x2 too), so
    # the prediction comes from smaller world sizes alone, as it says
    rest = [pt for pt in points if pt.world < top.world]
    fit = fit_series(rest, base_pt, mode, series_network(rest, profile), term=term)
    if fit.model is None or not top.parts:
        return None
    (row,) = project_points(
        fit,
        rest,
        base_pt,
        mode,
        [(top.nodes, top.devices_per_node)],
        profile=profile,
        precision=precision,
        draws=draws,
        term=term,
    )[:1]
    g = next(m for m in members if m.world_size == top.world and m.nodes == top.nodes)
    x = g.stats["steady_samples_per_s_per_device"].mean
    x_base = base.stats["steady_samples_per_s_per_device"].mean
    measured = x / x_base if x_base else math.nan
    return {
        "nodes": top.nodes,
        "devices_per_node": top.devices_per_node,
        "world_size": top.world,
        "from_world_sizes": ",".join(str(w) for w in worlds if w < top.world),
        "measured": measured,
        "predicted": row["efficiency"],
        "predicted_low": row["efficiency_low"],
        "predicted_high": row["efficiency_high"],
        "error_pts": 100.0 * (row["efficiency"] - measured),
        "covered": bool(row["efficiency_low"] <= measured <= row["efficiency_high"]),
    }


def percent_text(fraction: float) -> str:
    """An efficiency in percent as the tables round it where it matters: whole points from
    10% up, one decimal below (a 0.5% must not read 0%)."""
    value = 100 * fraction
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


def check_notes(result: ProjectionResult) -> list[str]:
    """'Read this first' lines: series not projected, and self-checks the interval missed."""
    notes = list(result.notes)
    for _, c in result.checks.iterrows():
        if not c["covered"]:
            notes.append(
                f"{c['series']}: the projection's self-check missed: {int(c['world_size'])} "
                f"devices projected at {percent_text(c['predicted'])}% "
                f"[{percent_text(c['predicted_low'])}, {percent_text(c['predicted_high'])}] "
                "from the "
                f"smaller scales, measured {percent_text(c['measured'])}%: treat the projection "
                "with care."
            )
    return notes
