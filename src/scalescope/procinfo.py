"""Facts about this process that need no torch (so config errors answer at once)."""

from __future__ import annotations

import os
import resource
import time

import psutil


def process_start_unix() -> float:
    """Wall-clock time this process was created, else now.

    Setup time is measured from here, so interpreter start-up and imports are counted.
    """
    try:
        return float(psutil.Process().create_time())
    except psutil.Error:
        return time.time()


def peak_host_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def usable_cores() -> int:
    """Cores this process may run on: its affinity, which a job's cgroup or ``taskset``
    narrows below the machine's count, where the OS has one; else every core."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def core_sharing(processes: int, cores: int) -> str | None:
    """What it means to put more CPU processes on a node than it has cores, or None where
    each has one: the contention then reads as compute in the efficiency."""
    if processes <= cores:
        return None
    return (
        f"{processes} processes on {cores} cores: they will share cores and the efficiency "
        "measured will include that contention"
    )
