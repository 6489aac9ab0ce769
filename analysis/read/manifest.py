"""A sweep's manifest (``sweep.json``, written by :mod:`scalescope.launch.sweep`): the jobs it
planned (:class:`PlannedJob`), their states and logs, and the command line that submitted it
(:func:`sweep_command`), read by :func:`read_manifest`."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

MANIFEST_BYTES = 8 << 20
"""The most of a sweep.json read (a manifest of thousands of jobs is a few MB)."""

_NOT_RUN = frozenset({"WAITING", "PENDING"})
_FAILED = frozenset({"FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL"})
"""Manifest states of a job that ended badly (the sweep's own FAILED: a task raised, or left
no record; Slurm's end states; ``CANCELLED by 0`` counts as CANCELLED)."""


@dataclass(frozen=True)
class PlannedJob:
    """One job of a sweep's manifest: what was planned and where its logs should be."""

    manifest: str
    """Display name of the sweep.json that lists it."""
    job_id: str | None
    """None when the sweep never submitted it (interrupted before its turn)."""
    shape: str | None
    repeat: int | None
    state: str | None
    logs: tuple[str, ...]
    sweep_id: str | None
    nodes: int | None
    devices_per_node: int | None
    world_size: int | None
    elapsed_s: float | None = None
    command: str | None = None
    """The command line that submitted the sweep (:func:`sweep_command`), where recorded."""
    detail: str | None = None
    """Why the sweep says the job failed (``task 1: RuntimeError: ...``), where it says."""

    @property
    def ran(self) -> bool:
        """Did the scheduler ever run it (as far as the manifest knows)?"""
        if self.state in _NOT_RUN:
            return False
        return bool(self.elapsed_s) or self.state not in ("CANCELLED", "UNKNOWN", None)

    @property
    def failed(self) -> bool:
        """Does the manifest say the job ended badly?"""
        return bool(self.state) and str(self.state).split()[0] in _FAILED

    def of_sweep(self, sweep: str) -> bool:
        """Can a job of ``sweep`` be this entry's? Job ids start again on another cluster or
        after a reinstalled controller, so only a job of the manifest's own sweep is, or one
        whose sweep is unknown on either side (a log known by its file name only, a manifest
        without a sweep id)."""
        return not sweep or not self.sweep_id or sweep == self.sweep_id

    @property
    def what(self) -> str:
        return f"shape {self.shape or '?'} repeat {'?' if self.repeat is None else self.repeat}"


def _opt_int(entry: dict[str, object], key: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{where}.{key} is not an integer")
    return value


def _opt_float(entry: dict[str, object], key: str, where: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{where}.{key} is not a number")
    return float(value)


def _opt_str(entry: dict[str, object], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{where}.{key} is not a string")
    return str(value)  # a job id may have been written as a number


def read_manifest(path: str, display: str) -> list[PlannedJob]:
    """The jobs of a sweep.json (``scalescope.launch.sweep.manifest``); ValueError saying what is
    wrong when it is not one. Keys it does not know are ignored."""
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(MANIFEST_BYTES).decode("utf-8", errors="replace"))
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("the top level is not an object")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise ValueError("'jobs' is not a list")
    sweep_id = data.get("sweep_id") if isinstance(data.get("sweep_id"), str) else None
    command = sweep_command(data.get("argv"))
    out = []
    for i, entry in enumerate(jobs):
        where = f"jobs[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} is not an object")
        logs = (_opt_str(entry, "stdout", where), _opt_str(entry, "stderr", where))
        out.append(
            PlannedJob(
                manifest=display,
                job_id=_opt_str(entry, "job_id", where),
                shape=_opt_str(entry, "shape", where),
                repeat=_opt_int(entry, "repeat", where),
                state=_opt_str(entry, "state", where),
                logs=tuple(log for log in logs if log),
                sweep_id=sweep_id,
                nodes=_opt_int(entry, "nodes", where),
                devices_per_node=_opt_int(entry, "devices_per_node", where),
                world_size=_opt_int(entry, "world_size", where),
                elapsed_s=_opt_float(entry, "elapsed_s", where),
                command=command,
                detail=_opt_str(entry, "detail", where),
            )
        )
    return out


_NOT_REPEATED = {"--sweep-id": 1, "--dry-run": 0}
"""Options of the recorded command left out of a rerun: a new sweep needs its own folder."""


def sweep_command(argv: Any) -> str | None:
    """``scalescope sweep ...`` as the manifest's ``argv`` recorded it, ready to run again
    (the executable by its name, the sweep's own folder name and a dry run left out); None
    when it is not a recorded ``scalescope sweep`` command line."""
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return None
    words = list(argv)
    if "sweep" not in words:
        return None
    words = ["scalescope", *words[words.index("sweep") :]]
    out: list[str] = []
    skip = 0
    for word in words:
        if skip:
            skip -= 1
            continue
        name = word.split("=", 1)[0]
        if name in _NOT_REPEATED:
            skip = _NOT_REPEATED[name] if "=" not in word else 0
            continue
        out.append(word)
    return shlex.join(out)
