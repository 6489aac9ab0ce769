"""How busy other programs kept a run's cores while it trained.

CPU contention from outside the run reads as compute in its efficiency: a rank that gets half
a core computes at half speed, and nothing in its step says why. Each rank samples, at train
start (after the barrier) and at train end, two counters: how long each core it may run on was
busy (the machine's per-core counters) and how much CPU its own process tree used, with how
long its threads waited, runnable, for a core (the scheduler's run delay). Gathered,
per machine: the busy seconds of the cores the run's ranks may use, less what the run's own
processes used (each pid once: a local launch's rank 0 is the parent of the other ranks), is
what other programs took of those cores. Machines are told apart by the kernel's boot id, so a
local cluster's nodes on one machine are one machine here, as they are to its cores. Other
programs' CPU says the cores were shared; the run's wait says whether its threads paid for it
(analysis/read/cpu_load.py needs both before it says a run was slowed).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...procinfo import Tree, busy_cpu_seconds, host_id, tree_cpu


@dataclass(frozen=True)
class CpuSample:
    """One rank's counters at one moment."""

    wall: float
    """time.time() when sampled."""
    busy: dict[int, float]
    """Busy seconds since boot per core this rank may run on, by the core's number."""
    tree: Tree
    """CPU seconds, and seconds waited for a core, of this rank's process and its live
    descendants (:func:`scalescope.procinfo.tree_cpu`)."""


def sample() -> CpuSample | None:
    """Now's counters; None where the machine will not give them. Never raises: a count the
    run cannot take must not stop its training."""
    try:
        busy = busy_cpu_seconds()
        return CpuSample(time.time(), busy, tree_cpu()) if busy else None
    except Exception:  # a measurement beside training, never a reason for it to fail
        return None


def rank_part(start: CpuSample | None, end: CpuSample | None, node: str) -> dict[str, Any] | None:
    """What one rank sends in the timing gather; None where either sample is missing."""
    if start is None or end is None:
        return None
    return {
        "host": host_id(),
        "node": node,
        "wall_s": end.wall - start.wall,
        "busy_s": {c: end.busy[c] - start.busy[c] for c in end.busy if c in start.busy},
        "tree_start": dict(start.tree),
        "tree_end": dict(end.tree),
    }


def _merge(into: dict[Any, Any], got: Mapping[Any, Any]) -> None:
    """The same core or process seen by two ranks: its later (larger) reading."""
    for k, v in got.items():
        into[k] = v if k not in into else max(v, into[k], key=_first)


def _first(v: Any) -> float:
    return float(v[0]) if isinstance(v, tuple) else float(v)


def _own(start: Mapping[Any, Any], end: Mapping[Any, Any]) -> tuple[float, float | None]:
    """The tree's CPU seconds between the samples, and its threads' wait for a core (None
    where a process had no count). A process gone by the end takes its earlier seconds off
    again: they are in its parent's reaped-children seconds, its whole life. A wait is what
    the live threads added, never below zero (an ended thread takes its count with it)."""
    cpu = sum(v[0] for v in end.values()) - sum(v[0] for v in start.values())
    waits = [(v[1], start.get(k, (0.0, 0.0))[1]) for k, v in end.items()]
    if any(w is None or w0 is None for w, w0 in waits):
        return max(0.0, cpu), None
    return max(0.0, cpu), sum(max(0.0, w - w0) for w, w0 in waits)


def host_loads(parts: Sequence[Mapping[str, Any] | None]) -> list[dict[str, Any]] | None:
    """Per machine the run used (first rank's first): its node names, the cores its ranks may
    use, the training interval's wall seconds (the median rank's), the CPU seconds those
    cores were busy, the run's own processes used, and other programs took (busy less own,
    never below zero), and the seconds the run's threads waited for a core (None where the
    kernel keeps no count). None where a rank did not sample (an early stop, a machine
    without the counters)."""
    if not parts or any(p is None for p in parts):
        return None
    hosts: dict[str, list[Mapping[str, Any]]] = {}
    for p in parts:
        assert p is not None
        hosts.setdefault(str(p["host"]), []).append(p)
    out = []
    for ranks in hosts.values():
        busy: dict[int, float] = {}
        start: dict[Any, Any] = {}
        end: dict[Any, Any] = {}
        for p in ranks:
            _merge(busy, p["busy_s"])
            _merge(start, p["tree_start"])
            _merge(end, p["tree_end"])
        busy_s = sum(busy.values())
        own_s, wait_s = _own(start, end)
        out.append(
            {
                "nodes": sorted({str(p["node"]) for p in ranks}),
                "cores": len(busy),
                "wall_s": statistics.median(float(p["wall_s"]) for p in ranks),
                "busy_cpu_s": busy_s,
                "own_cpu_s": own_s,
                "other_cpu_s": max(0.0, busy_s - own_s),
                "own_wait_s": wait_s,
            }
        )
    return out
