"""The result record: the one contract between the job side and the analysis side.

A job prints one line per event, ``:::SCALESCOPE {json}``, so a record survives being
interleaved with anything else a job prints (other ranks, NCCL, Lightning warnings). The
same result record is written atomically to the run directory as ``result.json``.

Two events exist:

* ``start``  -- printed by rank 0 as soon as the topology is known, so that a job that dies
  later can still be attributed to its configuration;
* ``result`` -- printed by rank 0 once, after training finished and every rank agreed on the
  timings.

This module imports neither torch nor pandas: the analysis package (which must run on a
laptop or a login node) reads records through it, and so does the job side. Any arithmetic
both sides need lives here, once.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from .atomic import write_text_atomic

MARKER = ":::SCALESCOPE"
"""Every event line starts with this marker (possibly after a prefix such as ``0: `` from srun)."""

SCHEMA_VERSION = 1
"""Bump when a field changes meaning or disappears; adding optional fields does not need it."""

EVENT_START = "start"
EVENT_RESULT = "result"


CHECKSUM_KEY = "checksum"
"""sha256 (hex) of the event's canonical JSON without this key; see :func:`checksum`."""


class RecordError(ValueError):
    """A line carries the marker but not a valid event (truncated, bad JSON, newer schema, a
    field of the wrong type, a checksum that does not match...)."""


@dataclass(frozen=True)
class Identity:
    """Who a job is: the fields shared by the start and the result event."""

    run_id: str
    """Unique per run: job id, array task and restart count (``1234_2.r0``, ``local-...``)."""
    job_id: str
    """SLURM_JOB_ID, or submitit's local job id, or a generated ``local-...`` id."""
    array_job_id: str | None
    array_task_id: int | None
    restart_count: int
    launcher: str
    """``slurm`` (srun-started tasks), ``submitit-local`` or ``local`` (Lightning's launcher)."""
    config_name: str
    workload: str
    scaling_mode: str
    precision: str
    accelerator: str
    nodes: int
    devices_per_node: int
    world_size: int
    per_device_batch_size: int
    global_batch_size: int
    sweep_id: str | None
    run_dir: str
    started_at: str
    """ISO-8601 UTC wall-clock time of the process start on rank 0."""
    cluster: str | None = None
    """Where it ran: the cluster profile's name, else Slurm's cluster name, else ``local``."""
    repeat_index: int | None = None
    """Which repeat of its shape this run is in a sweep (0-based); None outside a sweep."""
    run_uuid: str | None = None
    """Random and unique for every run (every attempt of a requeued job), on every cluster:
    two clusters' job 1234 are two runs. None in records written before it existed."""
    accumulate_grad_batches: int = 1
    """Micro-batches per optimizer step (``trainer.accumulate_grad_batches``): the batch sizes
    above count the samples of one optimizer step, each device's in this many passes. 1 in
    records written before it existed."""
    strategy: str = "ddp"
    """How the ranks share the model (``trainer.strategy``): ``ddp`` (every rank holds all of
    it), ``fsdp`` (FSDP2: parameters, gradients and optimizer state sharded; the record's
    ``sharding`` says how) or ``hsdp`` (FSDP2 on a 2-D mesh: sharded within each shard
    group, replicated across them). ``ddp`` in records written before it existed."""


@dataclass(frozen=True)
class StartEvent:
    identity: Identity
    schema_version: int = SCHEMA_VERSION
    event: str = EVENT_START

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "event": self.event, **asdict(self.identity)}


@dataclass(frozen=True)
class ResultRecord:
    """Everything a finished job reports. Times are wall-clock seconds agreed by all ranks."""

    identity: Identity
    node_names: list[str]
    device_name: str
    train_samples: int
    val_samples: int
    epochs: int
    steps: int
    steps_per_epoch: int
    setup_time_s: float
    """Process start (earliest rank) to the first training step, after all ranks met."""
    train_time_s: float
    """Sum over epochs of the training part of each epoch; validation excluded."""
    val_time_s: float
    job_time_s: float
    """Process start to the end of training: what a user waits for, start-up included."""
    epoch_times_s: list[float]
    """Training part of each epoch (validation excluded), max over ranks."""
    mean_epoch_time_s: float
    mean_epoch_time_excl_first_s: float | None
    samples_per_s: float
    samples_per_s_per_device: float
    step_time_s: float | None
    """Median time of one optimizer step over measurement windows after the first epoch."""
    predicted_epoch_time_s: float | None
    """steps_per_epoch x step_time_s: checks that step timing predicts the real epoch time."""
    val_loss_final: float | None
    val_acc_final: float | None
    val_loss_best: float | None
    val_acc_best: float | None
    peak_mem_gib: list[float] | None
    """Peak device memory allocated per rank in training (GPU only; None on CPU); validation's
    is ``val_peak_mem_gib``."""
    peak_host_rss_gib: list[float]
    """Peak resident set size per rank process."""
    model_flops_per_sample: float | None
    """Training FLOPs per sample (forward + backward) as the workload counts them."""
    mfu: float | None
    """Model FLOPs utilisation: achieved FLOP/s per device over the device's dense peak for the
    precision used. None where the peak is unknown (CPUs, unlisted GPUs): never guessed."""
    versions: dict[str, str | None]
    config: dict[str, Any]
    finished_at: str
    tracking: dict[str, Any] = field(default_factory=dict)
    """What experiment tracking did (mode, experiment name/key, archive path); never secrets."""
    threads_per_process: int | None = None
    """CPU threads (torch intra-op) each rank used."""
    warmup_steps: int | None = None
    """Optimizer steps excluded from the steady state (``trainer.warmup_steps`` resolved)."""
    steady_steps: int | None = None
    """Optimizer steps after the warm-up; None when the warm-up covered all of training."""
    steady_time_s: float | None = None
    """Training time of the steady-state steps (validation excluded), max over ranks."""
    steady_samples_per_s: float | None = None
    """Samples per second over the steady state: the headline throughput."""
    steady_samples_per_s_per_device: float | None = None
    steady_mfu: float | None = None
    """MFU over the steady state (None where the device's peak is unknown)."""
    peak_flops_per_s: float | None = None
    """The dense peak per device MFU was computed against; None on CPUs and unknown devices."""
    peak_flops_entry: str | None = None
    """Which peak-table entry matched the device name (product and datasheet), or None."""
    flops_source: Literal["module", "measured"] | None = None
    """Where ``model_flops_per_sample`` came from: ``module`` (the module's own
    ``flops_per_sample()``), ``measured`` (FlopCounterMode on one training batch, forward and
    backward, before timing started), or None (no FLOPs)."""
    stop_reason: str | None = None
    """Why training stopped before it finished (``sigterm``: Slurm's time limit, preemption or
    scancel); None when it ran to the end. A stopped run's figures cover the steps it ran."""
    diagnosis: dict[str, Any] | None = None
    """Where the step time went, per rank: input wait, compute and communication wait, the
    calibration windows (with, per rank, the collectives' kernel time per synced pass,
    ``calibration.comm_kernels``), the all-reduce baseline, when DDP's buckets were ready in
    backward (``bucket_ready``, optional: absent in older records), NVML samples and the
    compute split
    into GPU work and host overhead (``compute_split``: per rank ``gpu_util_pct``,
    ``comm_kernel_s`` and ``comm_alone_s``, the collectives' kernel time per step and its part
    no other kernel ran beside, ``gpu_work_s``, ``host_overhead_s``, ``gpu_idle_share``;
    records made before the collectives were timed lack those two and
    ``collectives_source``, and are read as they are) (docs/diagnosis.md; the
    summary's side: docs/analysis.md, "Where the efficiency went"). ``status: off`` with a
    reason when switched off; None in records written before it existed: the analysis shows
    "not recorded", never zeros."""
    batch: dict[str, Any] | None = None
    """A user's module's batch as its loaders yielded it (``loaders``: how many training
    loaders, their batches summed per step; ``per_device_mean``, ``per_device_max``: samples
    per optimizer step on one device; ``accumulate_grad_batches``, ``micro_batches`` (their
    count over ranks), ``micro_batch_mean``, ``micro_batch_max``, ``optimizer_steps``;
    ``passed``: the (micro-)batch_size scalescope gave a
    constructor, or None; ``data``: whether the ranks' data were split, and how that was
    checked). The identity's batch sizes are then the measured ones, a full step's
    (``per_device_max``; older records held the rounded mean). None for built-in
    workloads, whose batches are the configured ones, and in older records."""
    val_peak_mem_gib: list[float] | None = None
    """Peak device memory allocated per rank in validation, apart from training's
    (``peak_mem_gib``): validation often runs a larger batch. None on CPUs, without
    validation, and in older records."""
    compile: dict[str, Any] | None = None
    """``torch.compile`` in the run (``trainer.compile``, or the module's own): ``enabled``,
    ``by`` (scalescope or the module), ``backend``, compile seconds before training
    (``before_s``: the FLOPs probe's, outside every timed interval), during training
    (``training_s``) split into ``warmup_s`` and ``steady_s`` (at the warm-up's end), what
    validation compiled (``validation_s``), and ``warnings``. None for an eager run and in
    older records."""
    profile: dict[str, Any] | None = None
    """A ``torch.profiler`` capture of a few steps in the warm-up (``trainer.profile``; docs/
    diagnosis.md, "Profiling"): ``status`` (``captured`` or ``not captured``) and ``reason``,
    the settings (``requested_steps``, ``ranks_setting``, ``activities``, ``record_shapes``,
    ``profile_memory``), ``steps`` ([first, last] optimizer steps profiled), ``ranks``,
    ``chosen_by``, ``slowest_rank`` and ``measured`` (each rank's busy ms per step, by rank,
    with ``ranks: auto``), ``traces`` (by rank: the trace's path in the run directory),
    ``window_s`` (the profiled steps' time), ``cost_s`` (that beyond as many steady steps),
    ``overhead_s`` (writing and reading the traces) and ``top_ops`` (by rank: the top
    operations by self time, on the device where there is one, communication labelled).
    None when off and in older records."""
    faults_not_applied: dict[str, str] | None = None
    """Each requested fault (``faults.*``) that the trained model's strategy gave nothing to
    act on, and why: the DDP communication hook's faults under FSDP, ``allgather_delay_s``
    under DDP. None where every requested fault applied, and in older records."""
    train_start_unix: float | None = None
    """Wall clock (Unix seconds) when the timed interval began, on the last rank to reach it
    (every rank meets at a barrier first); with ``train_end_unix`` it bounds the interval
    every training time is measured in, validation included. The summary finds runs that
    shared a node within it. None in records written before it existed."""
    train_end_unix: float | None = None
    """Wall clock (Unix seconds) when training ended, on the last rank; None in older
    records."""
    memory: dict[str, Any] | None = None
    """Memory per rank, in rank order: the model state this rank holds (``model_state_bytes``,
    and its parts ``parameter_bytes``, ``gradient_bytes``, ``optimizer_state_bytes``: local
    shards under FSDP, counted from the tensors, exact on any device), and on GPUs training's
    ``reserved_peak_gib`` (the allocator's cache included), ``alloc_retries``, ``ooms`` and
    ``device_memory_gib`` (the device's total memory; absent in records made before it)
    (None elsewhere, ``allocator_reason`` says why). None in older records."""
    sharding: dict[str, Any] | None = None
    """Under ``strategy: fsdp`` or ``hsdp``, the sharding applied: ``applied_by`` (scalescope,
    a wrap rule, or the module's own configure_model), ``wrapped`` (the modules ``fully_shard``
    wrapped, by name, the root ``""``), ``wrapped_classes``, ``mesh`` (dims, shape, device
    type, and ``groups``: per dimension the ranks that communicate along it; under hsdp
    ``replicate`` and ``shard``), ``reshard_after_forward``, ``param_dtype`` and
    ``reduce_dtype`` (what parameters are gathered and gradients reduced in; None = the
    parameter's own), ``autocast`` (the dtype Lightning's autocast computes in, or None),
    ``unit_bytes`` (per unit of
    ``wrapped``, in its order, which is the order forward gathers them, the root first: the
    unsharded bytes of the unit's own parameters in the dtype it gathers them in; they add up
    to the model's parameters in that dtype; absent in records made before it). None under
    DDP and in older records."""
    host_load: list[dict[str, Any]] | None = None
    """Per machine the run used, what its cores gave while it trained (train start to end):
    ``nodes`` (the run's node names on that machine: a local cluster's nodes share one),
    ``cores`` (those its ranks may run on), ``wall_s``, and the CPU seconds those cores were
    busy (``busy_cpu_s``), the run's own processes used (``own_cpu_s``) and other programs
    took (``other_cpu_s``), and the seconds the run's threads waited, runnable, for a core
    (``own_wait_s``; None where the kernel keeps no count); docs/analysis.md, "Runs slowed
    by other programs". None where a rank could not sample, and in older records."""
    tokens_per_sample: int | None = None
    """Tokens in one training sample (:mod:`scalescope.workloads.tokens`): the ``gpt`` workload's
    sequence length, a user's module's ``workload.tokens_per_sample`` or its class attribute.
    None for a workload that counts no tokens, and in older records."""
    schema_version: int = SCHEMA_VERSION
    event: str = EVENT_RESULT

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema_version": self.schema_version, "event": self.event}
        out.update(asdict(self.identity))
        for f in fields(self):
            if f.name not in ("identity", "schema_version", "event"):
                out[f.name] = getattr(self, f.name)
        return out


_IDENTITY_FIELDS = tuple(f.name for f in fields(Identity))
_RESULT_FIELDS = tuple(
    f.name for f in fields(ResultRecord) if f.name not in ("identity", "schema_version", "event")
)
_RESULT_OPTIONAL = {
    f.name
    for f in fields(ResultRecord)
    if f.name in _RESULT_FIELDS and (f.default is not MISSING or f.default_factory is not MISSING)
}
_IDENTITY_OPTIONAL = {
    f.name for f in fields(Identity) if f.default is not MISSING or f.default_factory is not MISSING
}
# Annotations resolved once: every field is checked against them, so a field added to one of
# the dataclasses is validated without touching the decoder.
_IDENTITY_TYPES = get_type_hints(Identity)
_RESULT_TYPES = get_type_hints(ResultRecord)


def _canonical(data: Mapping[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k != CHECKSUM_KEY}
    try:  # the common case: nothing to replace, no copy of the whole record
        return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or infinity somewhere: written as null
        return json.dumps(_finite(body), sort_keys=True, separators=(",", ":"))


def checksum(data: Mapping[str, Any]) -> str:
    """sha256 hex of an event dict's canonical JSON (sorted keys, compact separators, NaN and
    infinity as null) with the ``checksum`` key left out: the same for an event's log line and
    its ``result.json``, whatever the indentation of either."""
    return hashlib.sha256(_canonical(data).encode("utf-8")).hexdigest()


def _with_checksum(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = _finite({k: v for k, v in data.items() if k != CHECKSUM_KEY})
    out[CHECKSUM_KEY] = checksum(out)
    return out


def _is_event(data: Mapping[str, Any]) -> bool:
    return data.get("event") in (EVENT_START, EVENT_RESULT) and "schema_version" in data


def encode(event: StartEvent | ResultRecord) -> str:
    """One log line: marker, space, compact JSON carrying its checksum. NaN/inf are not JSON,
    so they become null."""
    data = _with_checksum(event.to_dict())
    return f"{MARKER} {json.dumps(data, separators=(',', ':'), sort_keys=True)}"


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def find_marker(line: str) -> int:
    """Index of the marker in ``line`` or -1. Cheap enough to call on every line of a big log."""
    return line.find(MARKER)


_DECODER = json.JSONDecoder()


def decode_line(line: str) -> StartEvent | ResultRecord | None:
    """Parse one log line. None when the line has no marker; RecordError when it is broken."""
    at = find_marker(line)
    if at < 0:
        return None
    payload = line[at + len(MARKER) :].strip()
    try:
        # What follows the object on the same line is not part of it: another rank's output
        # or bytes a crash left behind (the checksum vouches for the object itself).
        data, _ = _DECODER.raw_decode(payload)
    except json.JSONDecodeError as exc:
        raise RecordError(f"event line is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RecordError("event line does not hold a JSON object")
    return from_dict(data)


def from_dict(data: Mapping[str, Any]) -> StartEvent | ResultRecord:
    """Validate a decoded event. Unknown extra keys are kept out (forward compatible).

    A ``checksum`` key, when present, must match the rest of the event (records written
    before checksums existed have none and are accepted). Every field must have the type its
    dataclass annotation says: ints pass for floats, booleans are not ints, and ``null`` passes
    for a float (NaN and infinity are written as null)."""
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise RecordError("event has no integer schema_version")
    if version > SCHEMA_VERSION:
        raise RecordError(
            f"schema_version {version} is newer than this scalescope reads ({SCHEMA_VERSION}); "
            "upgrade scalescope to read it"
        )
    if version < 1:
        raise RecordError(f"schema_version {version} is not valid")
    if CHECKSUM_KEY in data and data[CHECKSUM_KEY] != checksum(data):
        raise RecordError("checksum mismatch: the record was altered after it was written")
    missing = [k for k in _IDENTITY_FIELDS if k not in data and k not in _IDENTITY_OPTIONAL]
    event = data.get("event")
    if event == EVENT_RESULT:
        missing += [k for k in _RESULT_FIELDS if k not in data and k not in _RESULT_OPTIONAL]
    elif event != EVENT_START:
        raise RecordError(f"unknown event {event!r}")
    if missing:
        raise RecordError(f"{event} event lacks field(s): {', '.join(missing)}")
    _check_types(event, data, _IDENTITY_CHECKS)
    identity = Identity(**{k: data[k] for k in _IDENTITY_FIELDS if k in data})
    if event == EVENT_START:
        return StartEvent(identity=identity, schema_version=version)
    _check_types(event, data, _RESULT_CHECKS)
    values = {k: data[k] for k in _RESULT_FIELDS if k in data}
    return ResultRecord(identity=identity, schema_version=version, **values)


# --- field types -----------------------------------------------------------------------------


def _check_types(event: str, data: Mapping[str, Any], checks: _Checks) -> None:
    for name, tp, ok in checks:
        if name in data and not ok(data[name]):
            raise RecordError(
                f"{event} event field {name!r} should be {type_name(tp)}, "
                f"got {_describe(data[name])}"
            )


_Checker = Callable[[Any], bool]
_Checks = tuple[tuple[str, Any, _Checker], ...]


def _always(value: Any) -> bool:
    return True


def _is_int(value: Any) -> bool:
    return type(value) is int or (isinstance(value, int) and not isinstance(value, bool))


def _is_number_or_null(value: Any) -> bool:
    # null stands for NaN or infinity, which JSON cannot write
    return value is None or type(value) is float or _is_int(value) or isinstance(value, float)


def _compile(tp: Any) -> _Checker:
    """A check that a decoded JSON value fits the annotation ``tp``, built once per field
    (reading 10,000 records must not re-inspect annotations each time). Ints pass for floats,
    booleans are not ints; unknown annotations pass."""
    if tp is Any:
        return _always
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        members = tuple(_compile(a) for a in get_args(tp))
        return lambda v: any(ok(v) for ok in members)
    if origin is Literal:
        allowed = get_args(tp)
        return lambda v: v in allowed
    if tp is type(None):
        return lambda v: v is None
    if tp is bool:
        return lambda v: isinstance(v, bool)
    if tp is int:
        return _is_int
    if tp is float:
        return _is_number_or_null
    if tp is str:
        return lambda v: isinstance(v, str)
    if tp in (list, tuple) or origin in (list, tuple, Sequence):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        item = _compile(args[0]) if args else _always
        if item is _always:
            return lambda v: isinstance(v, list)
        return lambda v: isinstance(v, list) and all(map(item, v))
    if tp is dict or origin in (dict, Mapping):
        kv = get_args(tp)
        key, val = (_compile(kv[0]), _compile(kv[1])) if kv else (_always, _always)
        return lambda v: (
            isinstance(v, dict) and all(map(key, v.keys())) and all(map(val, v.values()))
        )
    return _always


def _checks(names: Sequence[str], hints: Mapping[str, Any]) -> _Checks:
    return tuple((n, hints[n], _compile(hints[n])) for n in names)


_IDENTITY_CHECKS = _checks(_IDENTITY_FIELDS, _IDENTITY_TYPES)
_RESULT_CHECKS = _checks(_RESULT_FIELDS, _RESULT_TYPES)


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def type_name(tp: Any) -> str:
    """An annotation in JSON words: ``a number or null``, ``a list of numbers``."""
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        members = get_args(tp)
        named = [type_name(a) for a in members if a is not type(None)]
        return " or ".join(named + (["null"] if type(None) in members else []))
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in get_args(tp))
    if tp in (list, tuple) or origin in (list, tuple, Sequence):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        if not args or args[0] is Any:
            return "a list"
        inner = type_name(args[0])
        plural = {"an integer": "integers", "a number": "numbers", "a string": "strings"}
        return f"a list of {plural.get(inner, inner)}"
    if tp is dict or origin in (dict, Mapping):
        return "an object"
    return _TYPE_NAMES.get(tp, getattr(tp, "__name__", str(tp)))


def _describe(value: Any) -> str:
    kind = (
        "null"
        if value is None
        else "true or false"
        if isinstance(value, bool)
        else "a number"
        if isinstance(value, (int, float))
        else "a string"
        if isinstance(value, str)
        else "a list"
        if isinstance(value, list)
        else "an object"
        if isinstance(value, dict)
        else type(value).__name__
    )
    text = json.dumps(value, default=str)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{kind} ({text})" if kind != "null" else kind


def write_json_atomic(path: str | os.PathLike[str], data: Mapping[str, Any]) -> Path:
    """Write JSON next to ``path`` then rename: readers never see a half-written file.

    A start or result event dict (``event`` and ``schema_version`` keys) gets its
    ``checksum`` key, equal to the one of its log line (:func:`encode`)."""
    body = _with_checksum(data) if _is_event(data) else _finite(dict(data))
    return write_text_atomic(path, json.dumps(body, indent=2, sort_keys=True) + "\n")


def read_result_json(path: str | os.PathLike[str]) -> ResultRecord:
    """Read a run directory's ``result.json``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"cannot read result record: {exc}") from None
    if not isinstance(data, dict):
        raise RecordError("result.json does not hold a JSON object")
    event = from_dict(data)
    if not isinstance(event, ResultRecord):
        raise RecordError("result.json holds a start event, not a result")
    return event


# --- arithmetic shared by both sides -------------------------------------------------------


def mean_excluding_first(values: Sequence[float]) -> float | None:
    """Mean of all but the first value (the first epoch carries warm-up); None if only one."""
    if len(values) < 2:
        return None
    return statistics.fmean(values[1:])


def rate(count: float, seconds: float) -> float:
    """count / seconds, NaN when no time elapsed (never a division error in a record)."""
    return count / seconds if seconds > 0 else math.nan


def _other_share(machine: Any) -> float | None:
    if not isinstance(machine, Mapping):
        return None
    cores, wall, other = (machine.get(k) for k in ("cores", "wall_s", "other_cpu_s"))
    if not all(isinstance(v, (int, float)) for v in (cores, wall, other)) or cores * wall <= 0:
        return None
    return float(other) / (cores * wall)


def busiest_machine(host_load: Any) -> dict[str, Any] | None:
    """The machine of a record's ``host_load`` whose cores other programs kept busiest, with
    its ``share`` of them (``other_cpu_s / (cores * wall_s)``) and ``wait_share``, how long
    the run's threads there waited for a core per second they ran (``own_wait_s /
    own_cpu_s``; None where not counted); None for an older record or one without the
    counters."""
    if not isinstance(host_load, list):
        return None
    shares = [(s, m) for m in host_load if (s := _other_share(m)) is not None]
    if not shares:
        return None
    share, machine = max(shares, key=lambda p: p[0])
    wait, own = machine.get("own_wait_s"), machine.get("own_cpu_s")
    known = isinstance(wait, (int, float)) and isinstance(own, (int, float)) and own > 0
    return {**machine, "share": share, "wait_share": float(wait) / own if known else None}


def other_cpu_share(host_load: Any) -> float | None:
    """The share of a run's cores other programs kept busy while it trained, on its busiest
    machine; None where not recorded."""
    b = busiest_machine(host_load)
    return b["share"] if b is not None else None
