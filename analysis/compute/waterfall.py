"""The efficiency waterfall: where each scale point's lost parallel efficiency went.

Input: the runs frame (its ``diagnosis`` column holds each record's ``diagnosis`` dict, see
docs/analysis.md, "Where the efficiency went"). Output: a :class:`Waterfall` of frames and
the sentences of the report. Pure: no printing, no files, no plotting.

Definitions (one per quantity)
------------------------------
Per run with a steady state and ``diagnosis.status == "recorded"``, from the TYPICAL rank
(``typical_rank``: the lower median of what each rank needs on its own), per step, all on
that rank's own clock, so the parts add up to its step time:

* input = ``input_wait_s``; compute = ``compute_s``;
* its communication wait ``comm_wait_s`` split by the per-step gradient waits of every rank
  (``ranks[].wait_s``: per step, the excess of the rank's wait over the least wait of any
  rank, i.e. waiting for others; the least is the step's exposed all-reduce):

  - comm = ``exposed_comm_s`` = ``comm_wait_s`` - ``wait_s``;
  - skew (persistent) = clip(``own_s[slowest] - own_s[typical]``, 0, ``wait_s``): the wait
    one consistently slower rank explains;
  - jitter (rotating) = ``wait_s`` - skew: per-step stragglers, a different rank each step.

  On one device comm = skew = jitter = 0. A record without per-step waits (older ones) has
  comm from its calibration, skew unclipped and jitter not recorded (NaN).

Divided by the samples of the step they were timed over (``per_device_batch_size`` over the
steps a batch took: :attr:`analysis.compute.run_parts.RunParts.samples_per_step`; two steps a
batch for a module that steps two optimizers by hand) these are seconds per sample per device;
the headline time per sample per device is t = 1 / ``steady_samples_per_s_per_device``.

Per run at scale N against its series' baseline B (the baseline
:func:`analysis.compute.metrics.scaling_table` picks):

* E_run = x_run / mean(x_B), x = steady per-device throughput: the per-device form of the
  parallel efficiency S / p (both are the same number for strong and weak scaling, since
  x = X / world_size); lost = 100 (1 - E_run) points;
* points_c = 100 (c_run - mean_B(c)) / t_run for c in comm, input, skew, compute;
* remainder = lost - sum(points_c): the parts always add up to the loss.

Per scale point, over the same runs (those with a breakdown; all runs where none has one):
lost = 100 (1 - E) with E and its interval the ratio of mean throughputs of
:func:`analysis.compute.stats.ratio_ci`, as the scaling table's per-device efficiency; each part and
the remainder the mean over the runs with a Student-t 95% interval
(:func:`analysis.compute.stats.summarize`; one run: no interval). Hidden communication share:
clip(1 - exposed / predicted, 0, 1) with predicted = ``allreduce.predicted_step_s``.

Reading one run's parts is :mod:`analysis.compute.run_parts`' work; putting the table into
words, :mod:`analysis.compute.findings`'.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.compute.groups import (
    DEFAULT_CONFIDENCE,
    STEADY,
    group_row,
    headline_columns,
    series_scale_groups,
)
from analysis.compute.metrics import BaselineSpec, pick_baseline
from analysis.compute.profile_advice import advice_for, sweep_advice
from analysis.compute.run_parts import RunParts, group_parts
from analysis.compute.stats import finite_mean, number_at, ratio_ci, summarize
from analysis.read.cpu_load import slowed_runs
from analysis.read.frame import SERIES_KEYS

NOT_RECORDED = "not recorded"
"""What a table, chart or sentence shows for a part that was not measured (never 0)."""

COMPONENTS = ("comm", "overlap", "input", "skew", "jitter", "compute")
PARTS = (*COMPONENTS, "remainder")
LABELS = {
    "comm": "exposed communication",
    "overlap": "communication overlapping backward",
    "input": "input wait",
    "skew": "rank skew",
    "jitter": "rotating stragglers",
    "compute": "compute per sample (the framework's own work included)",
    "remainder": "unexplained",
}


# --- the attribution --------------------------------------------------------------------------


def attribute(
    t_run_s: float,
    run_s: Mapping[str, float],
    base_throughput: float,
    base_s: Mapping[str, float],
) -> dict[str, float]:
    """Points of efficiency lost by one run and their parts.

    ``t_run_s``: the run's time per sample per device (1 / its steady per-device
    throughput); ``base_throughput``: the baseline's mean steady per-device throughput;
    ``run_s`` / ``base_s``: seconds per sample per device of each component (the
    baseline's averaged over its runs), NaN when not recorded.

    lost = 100 (1 - (1 / t_run) / base_throughput); part_c = 100 (run_c - base_c) / t_run;
    remainder = lost - sum of parts (NaN when a part is): they add up to ``lost``.
    """
    lost = 100.0 * (1.0 - (1.0 / t_run_s) / base_throughput)
    out = {"lost": lost}
    for c in COMPONENTS:
        out[c] = 100.0 * (run_s.get(c, math.nan) - base_s.get(c, math.nan)) / t_run_s
    # an overlap slowdown not measured is still inside compute: the rest still add up
    parts = [out[c] for c in COMPONENTS if not (c == "overlap" and math.isnan(out[c]))]
    out["remainder"] = lost - math.fsum(parts) if all(map(math.isfinite, parts)) else math.nan
    return out


# --- per scale point --------------------------------------------------------------------------


STEP_PARTS = ("input", "compute", "overlap", "skew", "jitter", "comm")
"""Stacking order of the step-time chart (bottom to top), ``other`` last."""

WATERFALL_COLUMNS = [
    "series",
    *SERIES_KEYS,
    "nodes",
    "devices_per_node",
    "world_size",
    "is_baseline",
    "baseline_nodes",
    "baseline_devices_per_node",
    "baseline_world_size",
    "n",
    "n_recorded",
    "status",
    "per_device_batch_size",
    "baseline_per_device_batch_size",
    "num_workers",
    "other_cpu_share_mean",
    "baseline_other_cpu_share_mean",
    "lost_pts_mean",
    "lost_pts_ci_low",
    "lost_pts_ci_high",
    *(f"{p}_pts_{s}" for p in PARTS for s in ("mean", "ci_low", "ci_high", "n")),
    "comm_note",
    "overlap_note",
    "t_s",
    *(f"{c}_s" for c in COMPONENTS),
    "step_s",
    *(f"{c}_step_s" for c in STEP_PARTS),
    "other_step_s",
    "hidden_share_mean",
    "hidden_share_ci_low",
    "hidden_share_ci_high",
    "hidden_note",
    "busbw_gbps_mean",
    "allreduce_alpha_s_mean",
    "allreduce_fit_busbw_gbps_mean",
    "predicted_allreduce_s_mean",
    "exposed_comm_s_mean",
    "comm_inter_step_s_mean",
    "comm_inter_pts_mean",
    "comm_inter_note",
    "calibration_comm_s_mean",
    "comm_source",
    "jitter_note",
    "rank_skew_mean",
    "slowest_rank",
    "slowest_node",
    "slowest_seen",
    "gpu_util_pct_mean",
    "gpu_idle_share_mean",
    "gpu_comm_alone_s_mean",
    "compute_split_note",
    "profile_command",
    "profile_note",
]
"""Columns of :attr:`Waterfall.table` (``diagnosis.csv``): points (``_pts``) are points of
efficiency; ``_s`` seconds per sample per device; ``_step_s`` seconds per step."""

RANK_COLUMNS = [
    "series",
    "world_size",
    "nodes",
    "job_id",
    "run_id",
    "rank",
    "local_rank",
    "node",
    "input_wait_s",
    "compute_s",
    "comm_wait_s",
    "step_time_s",
    "own_s",
    "is_slowest",
    "is_typical",
]


@dataclass
class Waterfall:
    table: pd.DataFrame
    """One row per series and scale point (:data:`WATERFALL_COLUMNS`)."""
    ranks: pd.DataFrame
    """Per rank of one representative run at each series' largest recorded scale."""
    runs: list[tuple[str, int, str, RunParts, dict[str, float]]]
    """(series, world size, run id, parts, attribution) per run, for notebooks."""


def _num_workers(params: Sequence[Any]) -> str:
    seen = []
    for text in params:
        try:
            value = json.loads(text or "{}").get("num_workers")
        except (ValueError, AttributeError):
            value = None
        if value is not None and str(value) not in seen:
            seen.append(str(value))
    return "/".join(seen)


def _other_cpu(rows: pd.DataFrame) -> float:
    """The mean share of their cores other programs took from ``rows``' runs, where it slowed
    them (0 for a run it did not: :func:`analysis.read.cpu_load.slowed`); NaN where no run
    recorded it."""
    if "other_cpu_share" not in rows.columns or "cpu_slowed" not in rows.columns:
        return math.nan
    share = pd.to_numeric(rows["other_cpu_share"], errors="coerce")
    hit = slowed_runs(rows)
    return finite_mean(share.where(hit | share.isna(), 0.0).tolist())


def _batch(rows: pd.DataFrame) -> Any:
    values = sorted({int(v) for v in rows["per_device_batch_size"].dropna()})
    return values[0] if len(values) == 1 else None


def waterfall(
    runs: pd.DataFrame,
    *,
    baseline: BaselineSpec | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Waterfall:
    """The waterfall of every series (see the module doc); baselines as
    :func:`analysis.compute.metrics.scaling_table` picks them (``baseline`` is ``--baseline``)."""
    rows: list[dict[str, Any]] = []
    rank_rows: list[dict[str, Any]] = []
    per_run: list[tuple[str, int, str, RunParts, dict[str, float]]] = []
    profiling = sweep_advice(runs)
    for _key, label, members in series_scale_groups(runs, confidence):
        base, _note = pick_baseline(members, baseline)
        against = _Against.of(base)
        largest: tuple[int, Any, list[tuple[pd.Series, RunParts]]] | None = None
        for g in members:
            these = group_parts(g)
            row, attributed = _point(label, g, these, against, confidence)
            advice = advice_for(g.rows, profiling)
            row.update(profile_command=advice.command, profile_note=advice.note)
            rows.append(row)
            per_run += attributed
            with_ranks = [(r, p) for r, p in these if p.recorded]
            if with_ranks and (largest is None or g.world_size > largest[0]):
                largest = (g.world_size, g, with_ranks)
        if largest is not None:
            rank_rows += _rank_rows(label, largest[1], largest[2])
    table = pd.DataFrame(rows, columns=WATERFALL_COLUMNS)
    for col in ("slowest_rank", "per_device_batch_size", "baseline_per_device_batch_size"):
        table[col] = table[col].astype("Int64")
    return Waterfall(table, pd.DataFrame(rank_rows, columns=RANK_COLUMNS), per_run)


@dataclass(frozen=True)
class _Against:
    """A series' baseline as its scale points are compared with it."""

    group: Any
    """The baseline's ``ScaleGroup``."""
    parts: list[RunParts]
    throughput: float
    """Mean steady per-device throughput."""
    per_sample: dict[str, float]
    """Seconds per sample per device of each component, averaged over the runs."""

    @classmethod
    def of(cls, base: Any) -> _Against:
        parts = [p for _, p in group_parts(base)]
        throughput = base.stats["steady_samples_per_s_per_device"].mean
        per_sample = {c: finite_mean([p.per_sample(c) for p in parts]) for c in COMPONENTS}
        return cls(base, parts, throughput, per_sample)


def _point(
    label: str,
    g: Any,
    these: list[tuple[pd.Series, RunParts]],
    against: _Against,
    confidence: float,
) -> tuple[dict[str, Any], list[tuple[str, int, str, RunParts, dict[str, float]]]]:
    """One scale point's row of the table, and the attribution of each of its runs."""
    base = against.group
    is_base = g is base
    _, _, basis = headline_columns(g, base)
    recorded = [p for _, p in these if p.recorded]
    row = group_row(label, g)
    row.update(
        is_baseline=is_base,
        baseline_nodes=base.nodes,
        baseline_devices_per_node=base.devices_per_node,
        baseline_world_size=base.world_size,
        n=len(these),
        n_recorded=len(recorded),
        per_device_batch_size=_batch(g.rows),
        baseline_per_device_batch_size=_batch(base.rows),
        num_workers=_num_workers(g.rows["workload_params"].tolist()),
        other_cpu_share_mean=_other_cpu(g.rows),
        baseline_other_cpu_share_mean=_other_cpu(base.rows),
        status=_status(basis, these, against.parts, is_base),
    )
    # One set of runs for the loss and its parts: those with a breakdown (all runs where
    # none has one, so the loss is still given).
    used = [(r, p) for r, p in these if p.recorded] or these
    attributed = []
    if basis == STEADY and not is_base:
        for r, p in used:
            if not math.isfinite(p.t_s):
                continue
            run_s = {c: p.per_sample(c) for c in COMPONENTS}
            a = attribute(p.t_s, run_s, against.throughput, against.per_sample)
            attributed.append((label, g.world_size, str(r["run_id"]), p, a))
    row.update(_points_lost(used, [a for *_, a in attributed], base, confidence))
    # why exposed communication is missing here, or in the baseline it is compared with
    row["comm_note"] = _first([p.comm_reason for p in recorded]) or (
        "" if is_base else _first([p.comm_reason for p in against.parts if p.recorded])
    )
    row["overlap_note"] = _first([p.overlap_note for p in recorded])
    row.update(_step_split(used, recorded, row["per_device_batch_size"]))
    row.update(_measured(recorded, confidence))
    return row, attributed


def _points_lost(
    used: Sequence[tuple[pd.Series, RunParts]],
    attributions: Sequence[dict[str, float]],
    base: Any,
    confidence: float,
) -> dict[str, Any]:
    """The points of efficiency lost and each part's share, with their intervals."""
    # The loss's interval is the scaling table's: a ratio of mean throughputs, with the
    # baseline's variance in it.
    e, e_low, e_high = ratio_ci(
        summarize([1.0 / p.t_s for _, p in used if math.isfinite(p.t_s)], confidence),
        base.stats["steady_samples_per_s_per_device"],
        confidence,
    )
    out: dict[str, Any] = dict(
        lost_pts_mean=100.0 * (1.0 - e) if attributions else math.nan,
        lost_pts_ci_low=100.0 * (1.0 - e_high) if attributions else math.nan,
        lost_pts_ci_high=100.0 * (1.0 - e_low) if attributions else math.nan,
    )
    for part in PARTS:
        s = summarize([a[part] for a in attributions], confidence)
        out.update(
            {
                f"{part}_pts_mean": s.mean,
                f"{part}_pts_ci_low": s.ci_low,
                f"{part}_pts_ci_high": s.ci_high,
                f"{part}_pts_n": s.n,
            }
        )
    return out


def _step_split(
    used: Sequence[tuple[pd.Series, RunParts]], recorded: Sequence[RunParts], batch: Any
) -> dict[str, Any]:
    """The step chart's columns, from the same runs as the points (``used``): a step is a
    timed one, of :attr:`RunParts.samples_per_step` samples where the runs agree on it (the
    scale's ``batch`` where none has a breakdown)."""
    out: dict[str, Any] = {"t_s": finite_mean([p.t_s for _, p in used])}
    for c in COMPONENTS:
        out[f"{c}_s"] = finite_mean([p.per_sample(c) for p in recorded])
    sizes = {p.samples_per_step for p in recorded} or {batch}
    (size,) = sizes if len(sizes) == 1 else (None,)
    out["step_s"] = out["t_s"] * size if size else math.nan
    for c in STEP_PARTS:
        out[f"{c}_step_s"] = finite_mean([getattr(p, f"{c}_step_s") for p in recorded])
    explained = [
        out[f"{c}_step_s"]
        for c in STEP_PARTS
        if not (c == "overlap" and math.isnan(out[f"{c}_step_s"]))  # inside compute
    ]
    out["other_step_s"] = (
        max(0.0, out["step_s"] - math.fsum(explained))
        if all(map(math.isfinite, [*explained, out["step_s"]]))
        else math.nan
    )
    return out


def _measured(recorded: Sequence[RunParts], confidence: float) -> dict[str, Any]:
    """The communication's measurements and the slowest rank, over the recorded runs."""
    hidden = summarize([p.hidden_share for p in recorded], confidence)
    out: dict[str, Any] = dict(
        hidden_share_mean=hidden.mean,
        hidden_share_ci_low=hidden.ci_low,
        hidden_share_ci_high=hidden.ci_high,
        hidden_note=_first([p.hidden_reason for p in recorded]) if hidden.n == 0 else "",
        busbw_gbps_mean=finite_mean([p.busbw_gbps for p in recorded]),
        allreduce_alpha_s_mean=finite_mean([p.alpha_s for p in recorded]),
        allreduce_fit_busbw_gbps_mean=finite_mean([p.fit_busbw_gbps for p in recorded]),
        predicted_allreduce_s_mean=finite_mean([p.predicted_allreduce_s for p in recorded]),
        exposed_comm_s_mean=finite_mean([p.exposed_comm_s for p in recorded]),
        comm_inter_step_s_mean=finite_mean([p.comm_inter_step_s for p in recorded]),
        comm_inter_pts_mean=finite_mean([_inter_pts(p) for p in recorded]),
        comm_inter_note=_first([p.comm_inter_note for p in recorded]),
        calibration_comm_s_mean=finite_mean([p.calibration_comm_s for p in recorded]),
        comm_source="/".join(sorted({p.comm_source for p in recorded if p.comm_source})),
        jitter_note=_first([p.jitter_reason for p in recorded]),
        rank_skew_mean=finite_mean([p.rank_skew for p in recorded]),
        gpu_util_pct_mean=finite_mean([p.gpu_util_pct for p in recorded]),
        gpu_idle_share_mean=finite_mean([p.gpu_idle_share for p in recorded]),
        gpu_comm_alone_s_mean=finite_mean([p.gpu_comm_alone_s for p in recorded]),
    )
    out["compute_split_note"] = (
        _first([p.compute_split_reason for p in recorded])
        if math.isnan(out["gpu_idle_share_mean"])
        else ""
    )
    slow = Counter((p.slowest_rank, p.slowest_node) for p in recorded)
    if slow:
        (rank, node), count = slow.most_common(1)[0]
        out.update(slowest_rank=rank, slowest_node=node, slowest_seen=count)
    else:
        out.update(slowest_rank=None, slowest_node=None, slowest_seen=0)
    return out


def _inter_pts(p: RunParts) -> float:
    """Points of efficiency one run lost to communication between nodes (its share of the
    communication part: the 1-device baseline communicates nothing)."""
    b = p.samples_per_step
    if not (b and math.isfinite(p.comm_inter_step_s) and p.t_s > 0):
        return math.nan
    return 100.0 * p.comm_inter_step_s / b / p.t_s


def _first(values: Sequence[str]) -> str:
    return next((v for v in values if v), "")


def _status(
    basis: str, these: Sequence[tuple[pd.Series, RunParts]], base: Sequence[RunParts], is_base: bool
) -> str:
    """``recorded``, or ``not recorded (why)`` for the scale point as a whole."""
    mine = [p for _, p in these]
    if basis != STEADY:
        return f"{NOT_RECORDED} (no steady state in this scale or its baseline)"
    if not any(p.recorded for p in mine):
        return f"{NOT_RECORDED} ({_first([p.reason for p in mine])})"
    if not is_base and not any(p.recorded for p in base):
        return f"{NOT_RECORDED} (baseline: {_first([p.reason for p in base])})"
    return "recorded"


def _rank_rows(label: str, g: Any, runs: Sequence[tuple[pd.Series, RunParts]]) -> list[dict]:
    """The ranks of one representative run: the lower median of throughput at that scale."""
    ordered = sorted(runs, key=lambda rp: (rp[1].t_s, str(rp[0]["run_id"])))
    row, parts = ordered[(len(ordered) - 1) // 2]
    out = []
    for entry in row["diagnosis"]["ranks"]:
        out.append(
            {
                "series": label,
                "world_size": g.world_size,
                "nodes": g.nodes,
                "job_id": str(row["job_id"]),
                "run_id": str(row["run_id"]),
                "rank": int(entry["rank"]),
                "local_rank": entry.get("local_rank"),
                "node": str(entry.get("node", "")),
                "input_wait_s": float(entry["input_wait_s"]),
                "compute_s": float(entry["compute_s"]),
                "comm_wait_s": float(entry["comm_wait_s"]),
                "step_time_s": number_at(entry, "step_time_s"),
                "own_s": float(entry["own_s"]),
                "is_slowest": int(entry["rank"]) == parts.slowest_rank,
                "is_typical": int(entry["rank"]) == parts.typical_rank,
            }
        )
    return out


# --- chart names ------------------------------------------------------------------------------


def chart_slugs(series: Sequence[str]) -> dict[str, str]:
    """A file-name-safe name per series label (``spiral · strong · fp32`` ->
    ``spiral-strong-fp32``), unique: a clash gets ``-2``, ``-3``..."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for label in dict.fromkeys(series):
        slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")[:60].strip("-") or "series"
        unique, i = slug, 2
        while unique in used:
            unique, i = f"{slug}-{i}", i + 1
        used.add(unique)
        out[label] = unique
    return out


def chart_series(wf: Waterfall) -> list[str]:
    """Series with something to draw: at least one scale point with a recorded breakdown."""
    t = wf.table
    return list(dict.fromkeys(t.loc[t["n_recorded"] > 0, "series"]))
