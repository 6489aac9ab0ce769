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


def tree_cpu_seconds() -> dict[int, float]:
    """CPU seconds (user and system) of this process and of each live descendant, by pid,
    each with the seconds of the children it has reaped: a sum over a tree sampled twice
    counts what the tree used in between, data-loader workers that came and went included."""
    me = psutil.Process()
    try:
        tree = [me, *me.children(recursive=True)]
    except psutil.Error:
        tree = [me]
    out: dict[int, float] = {}
    for p in tree:
        try:
            t = p.cpu_times()
        except psutil.Error:  # ended between the listing and the read
            continue
        out[p.pid] = t.user + t.system + t.children_user + t.children_system
    return out


def busy_cpu_seconds() -> dict[int, float]:
    """Seconds each core this process may run on was busy since boot, by core: user, nice,
    system and steal (a hypervisor's other guests); idle, I/O wait and interrupt handling
    are not a program's. Every core where the per-core counters do not match the cores'
    numbering."""
    per_core = psutil.cpu_times(percpu=True)
    cores = range(len(per_core))
    if hasattr(os, "sched_getaffinity") and len(per_core) == os.cpu_count():
        cores = sorted(os.sched_getaffinity(0))
    return {
        c: per_core[c].user
        + per_core[c].nice
        + per_core[c].system
        + getattr(per_core[c], "steal", 0.0)
        for c in cores
    }


def host_id() -> str:
    """What tells two processes apart that run on different machines: the kernel's boot id
    (shared by containers and by a local cluster's nodes on one machine, whose cores they
    share), else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        import socket

        return socket.gethostname()
