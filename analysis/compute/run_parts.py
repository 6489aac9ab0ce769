"""One run's step split, read from its record's ``diagnosis`` (definitions: the module doc of
:mod:`analysis.compute.waterfall`): input, compute, overlap, rank skew, rotating stragglers
and exposed communication per step on the typical rank, with why any part is not recorded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from analysis.compute.stats import finite_number, is_number, number_at, summarize
from analysis.read.strategy import strategy_of
from scalescope.collectives import DDP_GRADIENT


class _Malformed(ValueError):
    """A diagnosis dict that does not follow the record's layout."""


@dataclass(frozen=True)
class RunParts:
    """One run's step split, per step on the typical rank (seconds); NaN = not recorded. A
    step is what the record's diagnosis timed: an optimizer step as Lightning counts it."""

    t_s: float
    """Headline time per sample per device: 1 / steady_samples_per_s_per_device."""
    per_device_batch_size: int | None
    """The recorded per-device batch (the samples of a batch after which the step moved)."""
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
    """The calibration windows' estimate, a cross-check (NaN when not measured): of the
    exposed all-reduce under DDP, of the exposed reduce-scatter only under FSDP (its
    ``isolates``)."""
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
    bucket_ready_share: tuple[float, ...] = ()
    """When each of ``bucket_bytes`` was ready in backward, as a share of it (the record's
    ``bucket_ready``); empty where not recorded (then the step model takes the buckets as
    ready in proportion to their bytes)."""
    bucket_ready_reason: str = ""
    """Why the readiness is not recorded ('' when it is)."""
    gpu_idle_share: float = math.nan
    """The share of the typical rank's compute its GPU idled (host overhead: launches); NaN
    where the compute split is not recorded (CPU runs, no NVML, older records)."""
    gpu_util_pct: float = math.nan
    """The typical rank's GPU utilisation over the steady state (NVML); NaN without it."""
    gpu_comm_alone_s: float = math.nan
    """Seconds per step the typical rank's collectives' kernels ran with no other kernel
    beside them, taken out of NVML's busy time by the split (0 on one device); NaN where not
    recorded, and in records made before it was measured."""
    compute_split_reason: str = ""
    """Why the compute split is not recorded ('' when it is)."""
    comm_inter_step_s: float = math.nan
    """The part of ``comm_step_s`` between nodes (the rest is within a node): 0 on one node;
    all of it where every collective spans the nodes (DDP, FSDP); under HSDP, its all-reduce
    across the shard groups where each group is one node's ranks. NaN where not known."""
    comm_inter_note: str = ""
    """How the inter-node part is known, or why it is not."""
    steps_per_batch: float = 1.0
    """Timed steps per recorded batch (:func:`timed_steps_per_batch`): 2 for a module that
    steps two optimizers a batch (a GAN), 1 otherwise."""

    @property
    def recorded(self) -> bool:
        return not self.reason

    @property
    def samples_per_step(self) -> float | None:
        """Samples per device of one timed step, what every ``*_step_s`` part is per: the
        one definition the per-sample parts, the waterfall's step and the step model read.
        None without a recorded batch."""
        b = self.per_device_batch_size
        return b / self.steps_per_batch if b and b > 0 else None

    def per_sample(self, component: str) -> float:
        """Seconds per sample per device of one component (NaN when not recorded)."""
        b = self.samples_per_step
        value = getattr(self, f"{component}_step_s")
        return value / b if b and not self.reason else math.nan


def timed_steps_per_batch(batch: Any, steps: Any) -> float:
    """Timed steps per recorded batch, from a user's module's record: the optimizer steps
    Lightning counted (``steps``; each optimizer's, so two a batch for a GAN stepping its
    generator and discriminator by hand), over the batches after which they moved
    (``batch.optimizer_steps``). The diagnosis times Lightning's steps; its per-device batch
    is a batch's. 1 for built-in workloads, older records and anything not counted."""
    counted = batch.get("optimizer_steps") if isinstance(batch, Mapping) else None
    a, b = _count(steps), _count(counted)
    return a / b if a is not None and b is not None and a >= b else 1.0


def _count(value: Any) -> float | None:
    """A positive finite count as a float (a frame's Int64 value too), else None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def _num(data: Mapping[str, Any], key: str, where: str) -> float:
    value = finite_number(data.get(key))
    if value is None:
        raise _Malformed(f"diagnosis.{where}{key} is not a number")
    return value


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


def run_parts(
    diagnosis: Any, samples_per_s_per_device: Any, world_size: int, steps_per_batch: float = 1.0
) -> RunParts:
    """Read one record's ``diagnosis`` (see the module doc), its steps ``steps_per_batch`` a
    batch (:func:`timed_steps_per_batch`). Never raises: a missing, switched-off or malformed
    breakdown gives a :class:`RunParts` whose ``reason`` says why."""
    return replace(
        _read(diagnosis, samples_per_s_per_device, world_size), steps_per_batch=steps_per_batch
    )


def _read(diagnosis: Any, samples_per_s_per_device: Any, world_size: int) -> RunParts:
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
    return _recorded(diagnosis, t, batch, by_rank, (typical, slowest), world_size)


def _recorded(
    diagnosis: Mapping[str, Any],
    t: float,
    batch: int,
    by_rank: Mapping[int, Mapping[str, Any]],
    ranks: tuple[int, int],
    world_size: int,
) -> RunParts:
    """The parts of a recorded, well-formed breakdown; ``ranks``: the typical and the slowest
    rank."""
    typical, slowest = ranks
    typ, slow = by_rank[typical], by_rank[slowest]
    calibration = _section(diagnosis, "calibration")
    allreduce = _section(diagnosis, "allreduce")
    calibrated = (
        number_at(calibration, "exposed_comm_s")
        if calibration.get("status") == "measured"
        else math.nan
    )
    own_typ, own_slow = float(typ["own_s"]), float(slow["own_s"])
    overlap, overlap_note = overlap_slowdown(calibration, world_size)
    if overlap_note:  # folded into compute: the calibration's estimate keeps it too
        calibrated = _calibrated_without_overlap(calibration, calibrated)
    compute = float(typ["compute_s"]) - (overlap if math.isfinite(overlap) else 0.0)
    skew = number_at(diagnosis, "rank_skew")
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
        **_fsdp_hidden(
            diagnosis,
            world_size,
            _communication(typ, own_typ, own_slow, calibration, allreduce, calibrated, world_size),
        ),
        calibration_comm_s=calibrated,
        typical_rank=typical,
        slowest_rank=slowest,
        slowest_node=str(node) if node is not None else None,
        rank_skew=skew,
        **_allreduce(allreduce),
        **_bucket_ready(diagnosis, allreduce),
        **_compute_split(diagnosis, typical),
    )


def _bucket_ready(diagnosis: Mapping[str, Any], allreduce: Mapping[str, Any]) -> dict[str, Any]:
    """When each of the all-reduce's buckets was ready in backward (``diagnosis.bucket_ready``),
    or why not: :class:`RunParts` fields. Used only for the very buckets the all-reduce
    section holds, every share a number in [0, 1]."""
    section = diagnosis.get("bucket_ready")
    if not isinstance(section, Mapping):
        return dict(bucket_ready_reason="not in this record (recorded before the readiness)")
    if section.get("status") != "recorded":
        return dict(bucket_ready_reason=str(section.get("reason") or "not recorded"))
    shares = section.get("ready_share")
    buckets = _buckets(allreduce)
    if not buckets or section.get("bucket_bytes") != list(buckets):
        return dict(bucket_ready_reason="recorded for other buckets than the all-reduce's")
    if not isinstance(shares, list) or len(shares) != len(buckets):
        return dict(bucket_ready_reason="malformed: ready_share is not one share per bucket")
    values = [finite_number(v) for v in shares]
    if any(v is None or not 0.0 <= v <= 1.0 for v in values):
        return dict(bucket_ready_reason="malformed: a ready_share is not a number in [0, 1]")
    return dict(bucket_ready_share=tuple(float(v) for v in values if v is not None))


def _compute_split(diagnosis: Mapping[str, Any], typical: int) -> dict[str, Any]:
    """The typical rank's GPU idle share of compute (the section's mean where that rank has
    none), or why there is none: :class:`RunParts` fields. Older records have no split."""
    split = diagnosis.get("compute_split")
    if not isinstance(split, Mapping):
        return dict(compute_split_reason="not in this record (recorded before the split)")
    if split.get("status") != "recorded":
        return dict(compute_split_reason=str(split.get("reason") or "not recorded"))
    rows = [r for r in split.get("ranks") or [] if isinstance(r, Mapping)]
    mine = [r for r in rows if r.get("rank") == typical]
    share = number_at(mine[0], "gpu_idle_share") if mine else math.nan
    if math.isnan(share):
        share = number_at(split, "gpu_idle_share")
    util = number_at(mine[0], "gpu_util_pct") if mine else math.nan
    alone = number_at(mine[0], "comm_alone_s") if mine else math.nan
    return dict(gpu_idle_share=share, gpu_util_pct=util, gpu_comm_alone_s=alone)


def _communication(
    typ: Mapping[str, Any],
    own_typ: float,
    own_slow: float,
    calibration: Mapping[str, Any],
    allreduce: Mapping[str, Any],
    calibrated: float,
    world_size: int,
) -> dict[str, Any]:
    """The typical rank's communication wait split into exposed all-reduce, rank skew and
    rotating stragglers, and the share of the all-reduce hidden: :class:`RunParts` fields."""
    jitter, jitter_reason, source = math.nan, "", ""
    if world_size <= 1:
        comm_reason = ""  # one device: no all-reduce, honestly nothing
        skew_s, jitter = 0.0, 0.0
        exposed = 0.0
        hidden, hidden_reason = math.nan, "1 device: nothing to all-reduce"
    else:
        wait = number_at(typ, "wait_s")
        if math.isfinite(wait):  # every rank's steps: the exposed all-reduce and the waits
            exposed, source = float(typ["comm_wait_s"]) - wait, "steps"
            skew_s = min(max(own_slow - own_typ, 0.0), max(wait, 0.0))
            jitter = wait - skew_s
        else:  # an older record: the calibration's estimate, and no rotating part
            whole = isolates_all_communication(calibration)
            exposed = calibrated if whole else math.nan
            source = "calibration" if math.isfinite(exposed) else ""
            skew_s = own_slow - own_typ
            jitter_reason = "no per-step waits in this record (recorded before they existed)"
        comm_reason = _why(calibration, "calibration") if math.isnan(exposed) else ""
        if math.isnan(exposed) and not isolates_all_communication(calibration):
            comm_reason = f"no per-step waits, and {ISOLATES_REDUCE_SCATTER}"
        predicted = (
            number_at(allreduce, "predicted_step_s")
            if allreduce.get("status") == "measured"
            else math.nan
        )
        hidden, hidden_reason = hidden_share(predicted, exposed)
        if math.isnan(predicted):
            hidden_reason = _why(allreduce, "all-reduce baseline")
    return dict(
        comm_step_s=exposed,
        comm_reason=comm_reason,
        skew_step_s=skew_s,
        jitter_step_s=jitter,
        jitter_reason=jitter_reason,
        comm_source=source,
        exposed_comm_s=exposed,
        hidden_share=hidden,
        hidden_reason=hidden_reason,
    )


FSDP_NOT_PREDICTED = (
    "under FSDP the all-reduce baseline predicts no step: FSDP's collectives are each unit's "
    "all-gathers and reduce-scatter (diagnosis.fsdp_collectives times them)"
)


def _fsdp_hidden(
    diagnosis: Mapping[str, Any], world_size: int, parts: dict[str, Any]
) -> dict[str, Any]:
    """``parts`` with no hidden share under FSDP (a record with FSDP's baseline section):
    the all-reduce the share is computed against is not what an FSDP step communicates."""
    if world_size > 1 and "fsdp_collectives" in diagnosis:
        parts.update(hidden_share=math.nan, hidden_reason=FSDP_NOT_PREDICTED)
    return parts


ISOLATES_REDUCE_SCATTER = (
    "FSDP's calibration windows isolate the exposed reduce-scatter only (under HSDP with the "
    "all-reduce of each shard across the shard groups): the all-gathers run in both kinds of "
    "window (their waits are the per-step measure)"
)


def isolates_all_communication(calibration: Mapping[str, Any]) -> bool:
    """Whether the calibration's synced - no_sync is the whole exposed communication: DDP's
    all-reduce (records before ``isolates`` are DDP's); not under FSDP, whose windows without
    gradient sync keep the all-gathers and isolate the reduce-scatter."""
    return calibration.get("isolates", DDP_GRADIENT.operation) == DDP_GRADIENT.operation


def _allreduce(allreduce: Mapping[str, Any]) -> dict[str, Any]:
    """What the record's all-reduce baseline measured: :class:`RunParts` fields."""
    return dict(
        busbw_gbps=number_at(allreduce, "busbw_gbps"),
        alpha_s=number_at(allreduce.get("fit"), "alpha_s"),
        fit_busbw_gbps=number_at(allreduce.get("fit"), "busbw_gbps"),
        predicted_allreduce_s=number_at(allreduce, "predicted_step_s"),
        bucket_bytes=_buckets(allreduce),
        gradient_bytes=number_at(allreduce, "gradient_bytes"),
    )


OVERLAP_WITHIN_NOISE = "within noise"
OVERLAP_BELOW_ZERO = "below zero beyond its noise"
OVERLAP_ONE_PAIR = "one pair: not enough to tell"


def overlap_slowdown(calibration: Mapping[str, Any], world_size: int) -> tuple[float, str]:
    """The overlap slowdown to take out of compute (seconds per step), and '' -- or NaN
    (left inside compute) and why.

    It is a difference of two timings per pair of calibration windows (synced minus no_sync
    time to the last gradient), so it is only taken out where its Student-t 95% interval over
    the pairs lies above 0. An interval that includes 0 is noise, not a slowdown; one below 0
    would say the all-reduce beside backward sped it up, which is a disagreement between the
    windows, not a gain: neither is subtracted from anything. One pair gives no interval (what
    the default budget affords for passes of about 0.75 to 1.5 s): whatever its sign, it is
    not enough to tell a slowdown from noise, and it stays inside compute too."""
    if world_size <= 1:
        return 0.0, ""
    if calibration.get("status") != "measured":
        return math.nan, ""
    value = number_at(calibration, "overlap_slowdown_s")
    diffs = calibration.get("overlap_diffs_s")
    if math.isnan(value) or not isinstance(diffs, list):
        return value, ""
    s = summarize([d for d in diffs if finite_number(d) is not None])
    if s.n < 2:
        return math.nan, (
            f"{OVERLAP_ONE_PAIR} ({1e3 * value:.2g} ms from a single pair of windows, no "
            "interval): left inside compute"
        )
    if s.ci_low > 0:
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


def group_parts(g: Any) -> list[tuple[pd.Series, RunParts]]:
    """(row, :class:`RunParts`) of every run of one scale group (a ``ScaleGroup``), with the
    inter-node part of its exposed communication (:func:`inter_node`)."""
    diag = g.rows["diagnosis"] if "diagnosis" in g.rows else [None] * len(g.rows)
    out = []
    for (_, r), d in zip(g.rows.iterrows(), diag, strict=True):
        steps = timed_steps_per_batch(r.get("batch"), r.get("steps"))
        parts = run_parts(d, r["steady_samples_per_s_per_device"], g.world_size, steps)
        inter, note = inter_node(parts, d, g.nodes, strategy_of(r), r.get("sharding"))
        out.append((r, replace(parts, comm_inter_step_s=inter, comm_inter_note=note)))
    return out


def inter_node(
    parts: RunParts, diagnosis: Any, nodes: int, strategy: str, sharding: Any
) -> tuple[float, str]:
    """The part of a run's exposed communication per step that crossed nodes, and how it is
    known: none on one node; all of it where every collective spans the nodes (DDP's
    all-reduce, FSDP's gathers and reduce-scatters over every rank); under HSDP, the exposed
    time of its all-reduce across the shard groups (the typical rank's, as recorded) where
    each shard group's ranks share a node, its gathers and reduce-scatters staying inside."""
    exposed = parts.comm_step_s
    if not math.isfinite(exposed):
        return math.nan, parts.comm_reason or "exposed communication not recorded"
    if nodes <= 1:
        return 0.0, "one node: all within it"
    if strategy != "hsdp":
        return exposed, "every collective spans the nodes"
    ranks = diagnosis.get("ranks") if isinstance(diagnosis, Mapping) else None
    node_of = {r.get("rank"): r.get("node") for r in ranks or [] if isinstance(r, Mapping)}
    mesh = sharding.get("mesh") if isinstance(sharding, Mapping) else None
    groups = (mesh or {}).get("groups", {}).get("shard") if isinstance(mesh, Mapping) else None
    if not groups or any(len({node_of.get(k) for k in g}) != 1 for g in groups):
        return exposed, "HSDP whose shard groups span nodes (or are not recorded): all of it"
    typ = next(
        (r for r in ranks or [] if isinstance(r, Mapping) and r.get("rank") == parts.typical_rank),
        None,
    )
    replica = number_at(
        ((typ or {}).get("by_collective") or {}).get("replica_all_reduce") or {}, "exposed_s"
    )
    if math.isnan(replica):
        return (
            math.nan,
            "HSDP: the all-reduce across shard groups is not timed apart in this record",
        )
    return min(max(replica, 0.0), exposed), "HSDP: its all-reduce across the shard groups (nodes)"
