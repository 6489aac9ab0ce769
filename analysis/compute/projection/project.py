"""Projection: the scale a sweep has not run yet, with an interval.

The step model (:mod:`.step_time.step_model`) is fitted to each series' measured scale points and
evaluated at larger ones; this module draws its interval, the what-ifs, the 75% crossing
and the self-check (the largest measured scale predicted from the smaller ones). The words
of the report are :mod:`analysis.present.report.projection_text`'s, a network profile's reading
:mod:`.network_profile`'s.

The interval is :mod:`.interval`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.compute.metrics import EFFICIENCY_REFERENCE
from analysis.compute.projection.interval import DRAWS, project_points
from analysis.compute.projection.series_network import series_network
from analysis.compute.projection.step_time.fsdp_comm import FsdpTerm
from analysis.compute.projection.step_time.step_model import (
    DDP_TERM,
    CommTerm,
    Fit,
    ScalePoint,
    StepModel,
    fit_series,
)
from analysis.compute.projection.what_ifs import what_ifs
from analysis.read.strategy import frame_strategy, fsdp_sharding

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
    "explanations_low",
    "explanations_high",
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
            usable = [p for p in parts if math.isfinite(p.t_s) and p.samples_per_step]
        else:
            usable = [p for p in parts if p.recorded]
        return ScalePoint(g.world_size, g.nodes, g.devices_per_node, usable, max(kk))

    points = [point(g) for g in members]
    return points, points[members.index(base)]


def scan_crossing(
    centres: Mapping[int, float], lows: Mapping[int, float], highs: Mapping[int, float]
) -> tuple[int | None, int | None, int | None]:
    """Nodes (of :data:`SCAN_NODES`) where efficiency first falls below the threshold: at the
    central projection (``centres``, the projected rows' own, the error model's mean in them),
    at its interval's low end (earliest), at its high end (latest); a node count not
    projected counts as above it."""

    def first(by: Mapping[int, float]) -> int | None:
        return next((n for n in SCAN_NODES if by.get(n, 1.0) < EFFICIENCY_REFERENCE), None)

    return first(centres), first(lows), first(highs)


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
        crossing = _crossings(fit.model, precision, projected)
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
    model: StepModel, precision: str, projected: Sequence[Mapping[str, Any]]
) -> dict[str, tuple[int | None, int | None, int | None]]:
    """What-if -> its :func:`scan_crossing`, from the rows projected at the scanned nodes."""
    crossing = {}
    for w in what_ifs(model, precision):
        these = [r for r in projected if r["what_if"] == w.name]
        centres, lows, highs = (
            {r["nodes"]: r[k] for r in these}
            for k in ("efficiency", "efficiency_low", "efficiency_high")
        )
        crossing[w.name] = scan_crossing(centres, lows, highs)
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
