"""How busy other programs kept a run's cores while it trained.

CPU contention from outside the run reads as compute in its efficiency: a rank that gets half
a core computes at half speed, and nothing in its step says why. Each rank samples, at train
start (after the barrier) and at train end, two counters: how long each core it may run on was
busy (the machine's per-core counters) and how much CPU its own process tree used. Gathered,
per machine: the busy seconds of the cores the run's ranks may use, less what the run's own
processes used (each pid once: a local launch's rank 0 is the parent of the other ranks), is
what other programs took of those cores. Machines are told apart by the kernel's boot id, so a
local cluster's nodes on one machine are one machine here, as they are to its cores.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

from ...procinfo import busy_cpu_seconds, host_id, tree_cpu_seconds


@dataclass(frozen=True)
class CpuSample:
    """One rank's counters at one moment."""

    wall: float
    """time.time() when sampled."""
    busy: dict[int, float]
    """Busy seconds since boot per core this rank may run on."""
    tree: dict[int, float]
    """CPU seconds of this rank's process and its live descendants, by pid."""


def sample() -> CpuSample | None:
    """Now's counters; None where the machine will not give them (training goes on)."""
    try:
        return CpuSample(time.time(), busy_cpu_seconds(), tree_cpu_seconds())
    except (OSError, psutil.Error):
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


def host_loads(parts: Sequence[Mapping[str, Any] | None]) -> list[dict[str, Any]] | None:
    """Per machine the run used (first rank's first): its node names, the cores its ranks may
    use, the training interval's wall seconds (the median rank's), and the CPU seconds those
    cores were busy, the run's own processes used, and other programs took (busy less own,
    never below zero). None where a rank did not sample (an older rank part, an early stop)."""
    if not parts or any(p is None for p in parts):
        return None
    hosts: dict[str, list[Mapping[str, Any]]] = {}
    for p in parts:
        assert p is not None
        hosts.setdefault(str(p["host"]), []).append(p)
    out = []
    for ranks in hosts.values():
        busy: dict[int, float] = {}
        start: dict[int, float] = {}
        end: dict[int, float] = {}
        for p in ranks:  # the same core or pid seen by two ranks: its larger reading
            for into, got in ((busy, p["busy_s"]), (start, p["tree_start"]), (end, p["tree_end"])):
                for k, v in got.items():
                    into[k] = max(v, into.get(k, v))
        busy_s = sum(busy.values())
        own_s = max(0.0, sum(end.values()) - sum(start.values()))
        out.append(
            {
                "nodes": sorted({str(p["node"]) for p in ranks}),
                "cores": len(busy),
                "wall_s": statistics.median(float(p["wall_s"]) for p in ranks),
                "busy_cpu_s": busy_s,
                "own_cpu_s": own_s,
                "other_cpu_s": max(0.0, busy_s - own_s),
            }
        )
    return out
