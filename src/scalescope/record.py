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

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .atomic import write_text_atomic

MARKER = ":::SCALESCOPE"
"""Every event line starts with this marker (possibly after a prefix such as ``0: `` from srun)."""

SCHEMA_VERSION = 1
"""Bump when a field changes meaning or disappears; adding optional fields does not need it."""

EVENT_START = "start"
EVENT_RESULT = "result"


class RecordError(ValueError):
    """A line carries the marker but not a valid event (truncated, bad JSON, newer schema...)."""


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
    """Peak device memory allocated per rank (GPU only; None on CPU)."""
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
    peak_flops_per_s: float | None = None
    """The dense peak per device MFU was computed against; None on CPUs and unknown devices."""
    peak_flops_entry: str | None = None
    """Which peak-table entry matched the device name (product and datasheet), or None."""
    stop_reason: str | None = None
    """Why training stopped before it finished (``sigterm``: Slurm's time limit, preemption or
    scancel); None when it ran to the end. A stopped run's figures cover the steps it ran."""
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
    "tracking",
    "threads_per_process",
    "peak_flops_per_s",
    "peak_flops_entry",
    "stop_reason",
}


def encode(event: StartEvent | ResultRecord) -> str:
    """One log line: marker, space, compact JSON. NaN/inf are not JSON, so they become null."""
    return f"{MARKER} {json.dumps(_finite(event.to_dict()), separators=(',', ':'), sort_keys=True)}"


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


def decode_line(line: str) -> StartEvent | ResultRecord | None:
    """Parse one log line. None when the line has no marker; RecordError when it is broken."""
    at = find_marker(line)
    if at < 0:
        return None
    payload = line[at + len(MARKER) :].strip()
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise RecordError(f"event line is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RecordError("event line does not hold a JSON object")
    return from_dict(data)


def from_dict(data: Mapping[str, Any]) -> StartEvent | ResultRecord:
    """Validate a decoded event. Unknown extra keys are kept out (forward compatible)."""
    version = data.get("schema_version")
    if not isinstance(version, int):
        raise RecordError("event has no integer schema_version")
    if version > SCHEMA_VERSION:
        raise RecordError(
            f"schema_version {version} is newer than this scalescope reads ({SCHEMA_VERSION}); "
            "upgrade scalescope to read it"
        )
    if version < 1:
        raise RecordError(f"schema_version {version} is not valid")
    missing = [k for k in _IDENTITY_FIELDS if k not in data]
    event = data.get("event")
    if event == EVENT_RESULT:
        missing += [k for k in _RESULT_FIELDS if k not in data and k not in _RESULT_OPTIONAL]
    elif event != EVENT_START:
        raise RecordError(f"unknown event {event!r}")
    if missing:
        raise RecordError(f"{event} event lacks field(s): {', '.join(missing)}")
    identity = Identity(**{k: data[k] for k in _IDENTITY_FIELDS})
    if event == EVENT_START:
        return StartEvent(identity=identity, schema_version=version)
    values = {k: data[k] for k in _RESULT_FIELDS if k in data}
    return ResultRecord(identity=identity, schema_version=version, **values)


def write_json_atomic(path: str | os.PathLike[str], data: Mapping[str, Any]) -> Path:
    """Write JSON next to ``path`` then rename: readers never see a half-written file."""
    text = json.dumps(_finite(dict(data)), indent=2, sort_keys=True) + "\n"
    return write_text_atomic(path, text)


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
