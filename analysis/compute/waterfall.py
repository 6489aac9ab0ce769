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

Divided by ``per_device_batch_size`` these are seconds per sample per device; the
headline time per sample per device is t = 1 / ``steady_samples_per_s_per_device``.

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
    headline_columns,
    series_scale_groups,
)
from analysis.compute.metrics import BaselineSpec, pick_baseline
from analysis.compute.stats import finite_mean, finite_number, is_number, ratio_ci, summarize
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
    "compute": "compute per sample (DDP overhead included)",
    "remainder": "unexplained",
}


# --- one run ----------------------------------------------------------------------------------


class _Malformed(ValueError):
    """A diagnosis dict that does not follow the record's layout."""


@dataclass(frozen=True)
class RunParts:
    """One run's step split, per step on the typical rank (seconds); NaN = not recorded."""

    t_s: float
    """Headline time per sample per device: 1 / steady_samples_per_s_per_device."""
    per_device_batch_size: int | None
    input_step_s: float = math.nan
    compute_step_s: float = math.nan
    skew_step_s: float = math.nan
    jitter_step_s: float = math.nan
    comm_step_s: float = math.nan
    overlap_step_s: float = math.nan
    """Backward slowed by the all-reduce beside it (the calibration's synced minus no_sync
    time to the last gradient), taken out of compute; NaN when not measured (then it stays
    inside compute)."""
    reason: str = ""
    """Why nothing is recorded ('' when the breakdown is there)."""
    overlap_note: str = ""
    """Why a measured overlap slowdown was left inside compute (its interval over the
    calibration's pairs of windows includes 0, or lies below it); '' otherwise."""
    comm_reason: str = ""
    """Why exposed communication is not recorded ('' when it is, or is 0 on one device)."""
    jitter_reason: str = ""
    """Why rotating stragglers are not recorded ('' when they are)."""
    comm_source: str = ""
    """Where exposed communication came from: ``steps`` (every rank's training steps),
    ``calibration`` (older records) or '' (one device, or not recorded)."""
    calibration_comm_s: float = math.nan
    """The calibration windows' estimate, a cross-check (NaN when not measured)."""
    typical_rank: int | None = None
    slowest_rank: int | None = None
    slowest_node: str | None = None
    rank_skew: float = math.nan
    hidden_share: float = math.nan
    hidden_reason: str = ""
    busbw_gbps: float = math.nan
    """The all-reduce baseline's bus bandwidth at its largest message (8 MiB at least)."""
    alpha_s: float = math.nan
    """The fitted all-reduce latency α of t(n) = α + n·2(p-1)/p / busbw."""
    fit_busbw_gbps: float = math.nan
    """The fitted bus bandwidth of that model."""
    predicted_allreduce_s: float = math.nan
    exposed_comm_s: float = math.nan
    bucket_bytes: tuple[int, ...] = ()
    """The all-reduce's buckets in the order DDP sends them (its own, or estimated)."""
    gradient_bytes: float = math.nan

    @property
    def recorded(self) -> bool:
        return not self.reason

    def per_sample(self, component: str) -> float:
        """Seconds per sample per device of one component (NaN when not recorded)."""
        b = self.per_device_batch_size
        value = getattr(self, f"{component}_step_s")
        return value / b if b and b > 0 and not self.reason else math.nan


def _num(data: Mapping[str, Any], key: str, where: str) -> float:
    value = finite_number(data.get(key))
    if value is None:
        raise _Malformed(f"diagnosis.{where}{key} is not a number")
    return value


def _opt_num(data: Any, key: str) -> float:
    value = finite_number(data.get(key)) if isinstance(data, Mapping) else None
    return math.nan if value is None else value


def _section(diagnosis: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = diagnosis.get(key)
    return value if isinstance(value, Mapping) else {}


def _why(section: Mapping[str, Any], name: str) -> str:
    status = section.get("status") or "missing"
    reason = section.get("reason")
    return f"{name} {status}" + (f": {reason}" if reason else "")


def hidden_share(predicted_s: float, exposed_s: float) -> tuple[float, str]:
    """Share of the predicted all-reduce time hidden behind backward:
    clip(1 - exposed / predicted, 0, 1), and '' -- or NaN and why not."""
    if math.isnan(predicted_s):
        return math.nan, "no predicted all-reduce time"
    if math.isnan(exposed_s):
        return math.nan, "exposed communication not measured"
    if predicted_s <= 0:
        return math.nan, "predicted all-reduce time is not positive"
    return min(1.0, max(0.0, 1.0 - exposed_s / predicted_s)), ""


def _ranks(diagnosis: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    ranks = diagnosis.get("ranks")
    if not isinstance(ranks, list) or not ranks:
        raise _Malformed("diagnosis.ranks is not a list of ranks")
    out: dict[int, Mapping[str, Any]] = {}
    for i, entry in enumerate(ranks):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("rank"), int):
            raise _Malformed(f"diagnosis.ranks[{i}].rank is not an integer")
        for key in ("input_wait_s", "compute_s", "comm_wait_s", "own_s"):
            _num(entry, key, f"ranks[{i}].")
        out[int(entry["rank"])] = entry
    return out


def _pick_rank(diagnosis: Mapping[str, Any], key: str, by_rank: Mapping[int, Any]) -> int:
    """``typical_rank`` / ``slowest_rank`` as recorded; derived from own_s when null."""
    value = diagnosis.get(key)
    if value is None:
        order = sorted(by_rank, key=lambda r: (float(by_rank[r]["own_s"]), r))
        return order[-1] if key == "slowest_rank" else order[(len(order) - 1) // 2]
    if not isinstance(value, int) or isinstance(value, bool) or value not in by_rank:
        raise _Malformed(f"diagnosis.{key} ({value!r}) names no rank in diagnosis.ranks")
    return int(value)


def run_parts(diagnosis: Any, samples_per_s_per_device: Any, world_size: int) -> RunParts:
    """Read one record's ``diagnosis`` (see the module doc). Never raises: a missing,
    switched-off or malformed breakdown gives a :class:`RunParts` whose ``reason`` says why."""
    x = float(samples_per_s_per_device) if is_number(samples_per_s_per_device) else math.nan
    t = 1.0 / x if math.isfinite(x) and x > 0 else math.nan
    if diagnosis is None or (isinstance(diagnosis, float) and math.isnan(diagnosis)):
        return RunParts(t, None, reason="record has no breakdown")
    if not isinstance(diagnosis, Mapping):
        return RunParts(t, None, reason="diagnosis is not an object")
    b = diagnosis.get("per_device_batch_size")
    batch = int(b) if isinstance(b, int) and not isinstance(b, bool) and b > 0 else None
    if diagnosis.get("status") != "recorded":
        return RunParts(t, batch, reason=_why(diagnosis, "diagnosis"))
    if math.isnan(t):
        return RunParts(t, batch, reason="no steady state")
    try:
        if batch is None:
            raise _Malformed("diagnosis.per_device_batch_size is not a positive integer")
        by_rank = _ranks(diagnosis)
        typical = _pick_rank(diagnosis, "typical_rank", by_rank)
        slowest = _pick_rank(diagnosis, "slowest_rank", by_rank)
    except _Malformed as exc:
        return RunParts(t, batch, reason=f"malformed: {exc}")
    typ, slow = by_rank[typical], by_rank[slowest]
    calibration = _section(diagnosis, "calibration")
    allreduce = _section(diagnosis, "allreduce")
    calibrated = (
        _opt_num(calibration, "exposed_comm_s")
        if calibration.get("status") == "measured"
        else math.nan
    )
    own_typ, own_slow = float(typ["own_s"]), float(slow["own_s"])
    wait = _opt_num(typ, "wait_s")
    overlap, overlap_note = overlap_slowdown(calibration, world_size)
    if overlap_note:  # folded into compute: the calibration's estimate keeps it too
        calibrated = _calibrated_without_overlap(calibration, calibrated)
    compute = float(typ["compute_s"]) - (overlap if math.isfinite(overlap) else 0.0)
    jitter, jitter_reason, source = math.nan, "", ""
    if world_size <= 1:
        comm, comm_reason = 0.0, ""  # one device: no all-reduce, honestly nothing
        skew_s, jitter = 0.0, 0.0
        exposed = 0.0
        hidden, hidden_reason = math.nan, "1 device: nothing to all-reduce"
    else:
        if math.isfinite(wait):  # every rank's steps: the exposed all-reduce and the waits
            exposed, source = float(typ["comm_wait_s"]) - wait, "steps"
            skew_s = min(max(own_slow - own_typ, 0.0), max(wait, 0.0))
            jitter = wait - skew_s
        else:  # an older record: the calibration's estimate, and no rotating part
            exposed, source = calibrated, "calibration" if math.isfinite(calibrated) else ""
            skew_s = own_slow - own_typ
            jitter_reason = "no per-step waits in this record (recorded before they existed)"
        comm = exposed
        comm_reason = _why(calibration, "calibration") if math.isnan(exposed) else ""
        predicted = (
            _opt_num(allreduce, "predicted_step_s")
            if allreduce.get("status") == "measured"
            else math.nan
        )
        hidden, hidden_reason = hidden_share(predicted, exposed)
        if math.isnan(predicted):
            hidden_reason = _why(allreduce, "all-reduce baseline")
    skew = _opt_num(diagnosis, "rank_skew")
    if math.isnan(skew) and own_typ > 0:
        skew = (own_slow - own_typ) / own_typ
    node = slow.get("node")
    return RunParts(
        t_s=t,
        per_device_batch_size=batch,
        input_step_s=float(typ["input_wait_s"]),
        compute_step_s=compute,
        overlap_step_s=overlap,
        overlap_note=overlap_note,
        skew_step_s=skew_s,
        jitter_step_s=jitter,
        comm_step_s=comm,
        comm_reason=comm_reason,
        jitter_reason=jitter_reason,
        comm_source=source,
        calibration_comm_s=calibrated,
        typical_rank=typical,
        slowest_rank=slowest,
        slowest_node=str(node) if node is not None else None,
        rank_skew=skew,
        hidden_share=hidden,
        hidden_reason=hidden_reason,
        busbw_gbps=_opt_num(allreduce, "busbw_gbps"),
        alpha_s=_opt_num(allreduce.get("fit"), "alpha_s"),
        fit_busbw_gbps=_opt_num(allreduce.get("fit"), "busbw_gbps"),
        predicted_allreduce_s=_opt_num(allreduce, "predicted_step_s"),
        exposed_comm_s=exposed,
        bucket_bytes=_buckets(allreduce),
        gradient_bytes=_opt_num(allreduce, "gradient_bytes"),
    )


OVERLAP_WITHIN_NOISE = "within noise"
OVERLAP_BELOW_ZERO = "below zero beyond its noise"


def overlap_slowdown(calibration: Mapping[str, Any], world_size: int) -> tuple[float, str]:
    """The overlap slowdown to take out of compute (seconds per step), and '' -- or NaN
    (left inside compute) and why.

    It is a difference of two timings per pair of calibration windows (synced minus no_sync
    time to the last gradient), so it is only taken out where its Student-t 95% interval over
    the pairs lies above 0. An interval that includes 0 is noise, not a slowdown; one below 0
    would say the all-reduce beside backward sped it up, which is a disagreement between the
    windows, not a gain: neither is subtracted from anything. One pair: no interval, kept."""
    if world_size <= 1:
        return 0.0, ""
    if calibration.get("status") != "measured":
        return math.nan, ""
    value = _opt_num(calibration, "overlap_slowdown_s")
    diffs = calibration.get("overlap_diffs_s")
    if math.isnan(value) or not isinstance(diffs, list):
        return value, ""
    s = summarize([d for d in diffs if finite_number(d) is not None])
    if s.n < 2 or s.ci_low > 0:
        return value, ""
    span = f"{1e3 * s.mean:.2g} ms [{1e3 * s.ci_low:.2g}, {1e3 * s.ci_high:.2g}] over {s.n} pairs"
    if s.ci_high < 0:
        return math.nan, (
            f"{OVERLAP_BELOW_ZERO} ({span}): the calibration's synced passes reached their last "
            "gradient sooner than its no_sync ones, so those windows disagree; left inside compute"
        )
    return math.nan, f"{OVERLAP_WITHIN_NOISE} ({span}): left inside compute"


def _calibrated_without_overlap(calibration: Mapping[str, Any], calibrated: float) -> float:
    """The calibration's exposed all-reduce with a folded overlap slowdown not subtracted
    (the median over pairs of the recorded differences plus each pair's slowdown)."""
    paired, overlap = calibration.get("paired_diffs_s"), calibration.get("overlap_diffs_s")
    if not (isinstance(paired, list) and isinstance(overlap, list)) or len(paired) != len(overlap):
        return calibrated
    sums = [finite_number(a) for a in paired], [finite_number(b) for b in overlap]
    whole = [a + b for a, b in zip(*sums, strict=True) if a is not None and b is not None]
    return summarize(whole).median if whole else calibrated


def _buckets(allreduce: Mapping[str, Any]) -> tuple[int, ...]:
    values = allreduce.get("bucket_bytes")
    if not isinstance(values, list) or not values:
        return ()
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return ()
    return tuple(values)


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
    "calibration_comm_s_mean",
    "comm_source",
    "jitter_note",
    "rank_skew_mean",
    "slowest_rank",
    "slowest_node",
    "slowest_seen",
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


def _batch(rows: pd.DataFrame) -> Any:
    values = sorted({int(v) for v in rows["per_device_batch_size"].dropna()})
    return values[0] if len(values) == 1 else None


def group_parts(g: Any) -> list[tuple[pd.Series, RunParts]]:
    """(row, :class:`RunParts`) of every run of one scale group (a ``ScaleGroup``)."""
    diag = g.rows["diagnosis"] if "diagnosis" in g.rows else [None] * len(g.rows)
    return [
        (r, run_parts(d, r["steady_samples_per_s_per_device"], g.world_size))
        for (_, r), d in zip(g.rows.iterrows(), diag, strict=True)
    ]


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
    for key, label, members in series_scale_groups(runs, confidence):
        base, _note = pick_baseline(members, baseline)
        base_parts = [p for _, p in group_parts(base)]
        base_x = base.stats["steady_samples_per_s_per_device"].mean
        base_s = {c: finite_mean([p.per_sample(c) for p in base_parts]) for c in COMPONENTS}
        largest: tuple[int, Any, list[tuple[pd.Series, RunParts]]] | None = None
        for g in members:
            is_base = g is base
            _, _, basis = headline_columns(g, base)
            these = group_parts(g)
            recorded = [p for _, p in these if p.recorded]
            row: dict[str, Any] = {"series": label}
            row.update(zip(SERIES_KEYS, key, strict=True))
            row.update(
                nodes=g.nodes,
                devices_per_node=g.devices_per_node,
                world_size=g.world_size,
                is_baseline=is_base,
                baseline_nodes=base.nodes,
                baseline_devices_per_node=base.devices_per_node,
                baseline_world_size=base.world_size,
                n=len(these),
                n_recorded=len(recorded),
                per_device_batch_size=_batch(g.rows),
                baseline_per_device_batch_size=_batch(base.rows),
                num_workers=_num_workers(g.rows["workload_params"].tolist()),
            )
            status = _status(basis, these, base_parts, is_base)
            row["status"] = status
            attributions = []
            # One set of runs for the loss and its parts: those with a breakdown (all runs
            # where none has one, so the loss is still given).
            used = [(r, p) for r, p in these if p.recorded] or these
            if basis == STEADY and not is_base:
                for r, p in used:
                    if not math.isfinite(p.t_s):
                        continue
                    run_s = {c: p.per_sample(c) for c in COMPONENTS}
                    a = attribute(p.t_s, run_s, base_x, base_s)
                    attributions.append(a)
                    per_run.append((label, g.world_size, str(r["run_id"]), p, a))
            # The loss's interval is the scaling table's: a ratio of mean throughputs, with
            # the baseline's variance in it.
            e, e_low, e_high = ratio_ci(
                summarize([1.0 / p.t_s for _, p in used if math.isfinite(p.t_s)], confidence),
                base.stats["steady_samples_per_s_per_device"],
                confidence,
            )
            row.update(
                lost_pts_mean=100.0 * (1.0 - e) if attributions else math.nan,
                lost_pts_ci_low=100.0 * (1.0 - e_high) if attributions else math.nan,
                lost_pts_ci_high=100.0 * (1.0 - e_low) if attributions else math.nan,
            )
            for part in PARTS:
                s = summarize([a[part] for a in attributions], confidence)
                row.update(
                    {
                        f"{part}_pts_mean": s.mean,
                        f"{part}_pts_ci_low": s.ci_low,
                        f"{part}_pts_ci_high": s.ci_high,
                        f"{part}_pts_n": s.n,
                    }
                )
            # why exposed communication is missing here, or in the baseline it is compared with
            row["comm_note"] = _first([p.comm_reason for p in recorded]) or (
                "" if is_base else _first([p.comm_reason for p in base_parts if p.recorded])
            )
            row["overlap_note"] = _first([p.overlap_note for p in recorded])
            # The step chart's columns from the same runs as the points (``used``).
            row["t_s"] = finite_mean([p.t_s for _, p in used])
            for c in COMPONENTS:
                row[f"{c}_s"] = finite_mean([p.per_sample(c) for p in recorded])
            batch = row["per_device_batch_size"]
            row["step_s"] = row["t_s"] * batch if batch else math.nan
            for c in STEP_PARTS:
                row[f"{c}_step_s"] = finite_mean([getattr(p, f"{c}_step_s") for p in recorded])
            explained = [
                row[f"{c}_step_s"]
                for c in STEP_PARTS
                if not (c == "overlap" and math.isnan(row[f"{c}_step_s"]))  # inside compute
            ]
            row["other_step_s"] = (
                max(0.0, row["step_s"] - math.fsum(explained))
                if all(map(math.isfinite, [*explained, row["step_s"]]))
                else math.nan
            )
            hidden = summarize([p.hidden_share for p in recorded], confidence)
            row.update(
                hidden_share_mean=hidden.mean,
                hidden_share_ci_low=hidden.ci_low,
                hidden_share_ci_high=hidden.ci_high,
                hidden_note=_first([p.hidden_reason for p in recorded]) if hidden.n == 0 else "",
                busbw_gbps_mean=finite_mean([p.busbw_gbps for p in recorded]),
                allreduce_alpha_s_mean=finite_mean([p.alpha_s for p in recorded]),
                allreduce_fit_busbw_gbps_mean=finite_mean([p.fit_busbw_gbps for p in recorded]),
                predicted_allreduce_s_mean=finite_mean([p.predicted_allreduce_s for p in recorded]),
                exposed_comm_s_mean=finite_mean([p.exposed_comm_s for p in recorded]),
                calibration_comm_s_mean=finite_mean([p.calibration_comm_s for p in recorded]),
                comm_source="/".join(sorted({p.comm_source for p in recorded if p.comm_source})),
                jitter_note=_first([p.jitter_reason for p in recorded]),
                rank_skew_mean=finite_mean([p.rank_skew for p in recorded]),
            )
            slow = Counter((p.slowest_rank, p.slowest_node) for p in recorded)
            if slow:
                (rank, node), count = slow.most_common(1)[0]
                row.update(slowest_rank=rank, slowest_node=node, slowest_seen=count)
            else:
                row.update(slowest_rank=None, slowest_node=None, slowest_seen=0)
            rows.append(row)
            with_ranks = [(r, p) for r, p in these if p.recorded]
            if with_ranks and (largest is None or g.world_size > largest[0]):
                largest = (g.world_size, g, with_ranks)
        if largest is not None:
            rank_rows += _rank_rows(label, largest[1], largest[2])
    table = pd.DataFrame(rows, columns=WATERFALL_COLUMNS)
    for col in ("slowest_rank", "per_device_batch_size", "baseline_per_device_batch_size"):
        table[col] = table[col].astype("Int64")
    return Waterfall(table, pd.DataFrame(rank_rows, columns=RANK_COLUMNS), per_run)


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
                "step_time_s": _opt_num(entry, "step_time_s"),
                "own_s": float(entry["own_s"]),
                "is_slowest": int(entry["rank"]) == parts.slowest_rank,
                "is_typical": int(entry["rank"]) == parts.typical_rank,
            }
        )
    return out


# --- names and words --------------------------------------------------------------------------


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


MINOR_PTS = 1.0
"""Parts smaller than this (either sign) are named together, without advice."""


def _whole(x: float) -> int:
    return round(x)  # an int: never "-0"


def _pts(mean: float, low: float, high: float) -> str:
    text = f"{_whole(mean)} point{'' if abs(_whole(mean)) == 1 else 's'}"
    if math.isfinite(low) and math.isfinite(high):
        text += f" [{_whole(low)}, {_whole(high)}]"
    return text


def _advice(part: str, r: Mapping[str, Any]) -> str:
    if part == "input":
        workers = r["num_workers"]
        if workers:
            return (
                f"{workers} loader worker(s) per device (workload.num_workers); "
                "see `scalescope bench-data`"
            )
        return "loader workers per device not in the config; see `scalescope bench-data`"
    if part == "comm":
        bits = []
        if math.isfinite(r["busbw_gbps_mean"]):
            fit = ""
            if math.isfinite(r.get("allreduce_alpha_s_mean", math.nan)):
                fit = f" (fit: latency {1e6 * r['allreduce_alpha_s_mean']:.3g} µs)"
            bits.append(f"busbw {r['busbw_gbps_mean']:.3g} GB/s{fit}")
        if math.isfinite(r["hidden_share_mean"]):
            bits.append(
                f"{r['hidden_share_mean']:.0%} of the predicted all-reduce hidden behind backward"
            )
        bits.append("try a larger per-device batch, gradient accumulation or larger DDP buckets")
        return ", ".join(bits[:-1]) + ("; " if len(bits) > 1 else "") + bits[-1]
    if part == "skew":
        rank, node = r["slowest_rank"], r["slowest_node"]
        if rank is None or rank is pd.NA:
            return "check the slowest rank's node"
        seen = (
            f" (in {r['slowest_seen']} of {r['n_recorded']} runs)"
            if r["slowest_seen"] < r["n_recorded"]
            else ""
        )
        over = r["rank_skew_mean"]
        pct = f" (+{over:.0%} over the typical rank)" if math.isfinite(over) else ""
        return f"rank {rank} on node {node} is slowest{pct}{seen}; check that node"
    if part == "overlap":
        return (
            "backward runs slower while the all-reduce runs beside it: on GPUs, the NCCL "
            "kernels' SMs and memory bandwidth; on CPUs, the cores the communication threads "
            "take. Try fewer, larger DDP buckets, or a dedicated communication stream/cores"
        )
    if part == "jitter":
        return (
            "a different rank is slowest from step to step (per-step jitter, not one slow "
            "node): look for noisy neighbours, OS noise, uneven batches or data loading "
            "stalls on all ranks"
        )
    if part == "compute":
        b, b0 = r["per_device_batch_size"], r["baseline_per_device_batch_size"]
        if not (b is None or b is pd.NA or b0 is None or b0 is pd.NA) and b != b0:
            verb = "fell" if b < b0 else "rose"
            return f"the per-device batch {verb} from {b0} to {b} ({r['scaling_mode']} scaling)"
        return (
            "the per-device batch is unchanged: look for slower devices (clocks, throttling) "
            "or processes contending for CPU cores"
        )
    return "not attributed to any measured part"


def finding(r: Mapping[str, Any]) -> str:
    """One scale point in words: the loss, then its parts biggest first, each with what to
    try; ``not recorded`` where there is no breakdown."""
    where = f"At {r['world_size']} devices ({r['nodes']} node{'s' if r['nodes'] > 1 else ''})"
    lost = r["lost_pts_mean"]
    if not math.isfinite(lost):
        return f"{where}: {r['status']}."
    head = (
        f"{where}, {r['n']} run(s): {100 - lost:.0f}% efficiency, "
        f"{_pts(lost, r['lost_pts_ci_low'], r['lost_pts_ci_high'])} lost"
    )
    if r["status"] != "recorded":
        return f"{head}; where they went: {r['status']}."
    parts = sorted(
        (c for c in COMPONENTS if math.isfinite(r[f"{c}_pts_mean"])),
        key=lambda c: -r[f"{c}_pts_mean"],
    )
    big = [c for c in parts if abs(r[f"{c}_pts_mean"]) >= MINOR_PTS]
    said = [
        f"{LABELS[c]}, "
        f"{_pts(r[f'{c}_pts_mean'], r[f'{c}_pts_ci_low'], r[f'{c}_pts_ci_high'])}"
        f"{' (a gain)' if r[f'{c}_pts_mean'] < 0 else ''}: {_advice(c, r)}"
        for c in big
    ]
    small = [LABELS[c] for c in parts if c not in big]
    if small:
        said.append(f"under {MINOR_PTS:g} point each: {', '.join(small)}")
    notes = {"comm": r["comm_note"], "jitter": r["jitter_note"]}
    folded = str(r.get("overlap_note") or "")
    said += [
        f"{LABELS[c]}: {folded}"
        if c == "overlap" and folded
        else f"{LABELS[c]}: {NOT_RECORDED}" + (f" ({notes[c]})" if notes.get(c) else "")
        for c in COMPONENTS
        if not math.isfinite(r[f"{c}_pts_mean"])
    ]
    rem = r["remainder_pts_mean"]
    if math.isfinite(rem):
        said.append(
            f"unexplained, {_pts(rem, r['remainder_pts_ci_low'], r['remainder_pts_ci_high'])}"
        )
    else:
        said.append(f"unexplained: {NOT_RECORDED} (a part is missing)")
    return f"{head}: " + "; ".join(said) + "."


def findings(wf: Waterfall) -> list[dict[str, str]]:
    """A paragraph per series: every scale point beyond the baseline in words."""
    out = []
    t = wf.table
    for series, part in t.groupby("series", sort=False):
        scaled = part[~part["is_baseline"]]
        base = part[part["is_baseline"]].iloc[0]
        intro = (
            f"Against the baseline at {base['world_size']} device(s); points of parallel "
            "efficiency, 95% interval over repeats in brackets, a negative part is a gain."
        )
        if scaled.empty:
            text = f"{intro} Only the baseline scale was measured: nothing was lost yet."
        else:
            text = " ".join([intro, *(finding(r) for _, r in scaled.iterrows())])
        out.append({"series": str(series), "text": text})
    return out


UNEXPLAINED_NOTE_PTS = 5.0
"""An unexplained remainder whose interval reaches beyond this many points (either sign) is
called out: the parts do not account for the loss that well."""


def diagnosis_notes(wf: Waterfall) -> list[str]:
    """Sentences for "Read this first" about the breakdown: scale points whose unexplained
    remainder reaches far, whose overlap slowdown lies below zero beyond its noise (a
    measurement that disagrees), or whose communication comes from the older method."""
    return [*_unexplained_notes(wf), *_disagreement_notes(wf), *_older_method_notes(wf)]


def _scaled_recorded(wf: Waterfall) -> list[Mapping[str, Any]]:
    t = wf.table
    return [r for _, r in t[(~t["is_baseline"]) & (t["status"] == "recorded")].iterrows()]


def _where(r: Mapping[str, Any]) -> str:
    return f"{r['series']} at {r['nodes']}x{r['devices_per_node']}"


def _disagreement_notes(wf: Waterfall) -> list[str]:
    return [
        f"{_where(r)}: the overlap slowdown is {r['overlap_note']}; trust the per-step parts, "
        "and rerun the calibration (diagnosis.calibration_windows) if it matters."
        for r in _scaled_recorded(wf)
        if str(r.get("overlap_note") or "").startswith(OVERLAP_BELOW_ZERO)
    ]


def _older_method_notes(wf: Waterfall) -> list[str]:
    return [
        f"{_where(r)}: exposed communication comes from the calibration windows (records made "
        "before per-step waits), which count a rank that is slower in every pass as "
        "communication too; a run with this version measures it from every step."
        for r in _scaled_recorded(wf)
        if "calibration" in str(r.get("comm_source") or "").split("/")
    ]


def _unexplained_notes(wf: Waterfall) -> list[str]:
    out = []
    for r in _scaled_recorded(wf):
        mean, low, high = (r[f"remainder_pts_{k}"] for k in ("mean", "ci_low", "ci_high"))
        if not math.isfinite(mean):
            continue
        reach = max(abs(v) for v in (mean, low, high) if math.isfinite(v))
        if reach <= UNEXPLAINED_NOTE_PTS:
            continue
        where = _where(r)
        interval = f" [{_whole(low)}, {_whole(high)}]" if math.isfinite(low) else ""
        out.append(
            f"{where}: {_whole(mean)} point{'' if abs(_whole(mean)) == 1 else 's'}{interval} "
            "of the lost efficiency are unexplained "
            f"(beyond {UNEXPLAINED_NOTE_PTS:g}); the parts cover the loss less well here: "
            "longer runs (more steady steps) or more repeats narrow it."
        )
    return out
