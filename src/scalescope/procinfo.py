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


Tree = dict[tuple[int, int], tuple[float, float | None]]
"""(pid namespace, pid) -> (CPU seconds, seconds waited for a core or None)."""


def _pid_namespace() -> int:
    """The pid namespace's inode: two containers on one machine may reuse each other's pids."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def run_delay_s(pid: int) -> float | None:
    """Seconds the live threads of ``pid`` have spent runnable but waiting for a core (the
    scheduler's run delay: the second field of ``/proc/<pid>/task/<tid>/schedstat``); None
    where the kernel keeps no such count."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total, seen = 0, False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[1])
            seen = True
        except (OSError, ValueError, IndexError):  # a thread that ended, or no schedstat
            continue
    return total / 1e9 if seen else None


def tree_cpu() -> Tree:
    """This process and each live descendant: its CPU seconds (user and system, with those of
    the children it reaped) and the seconds its live threads waited for a core. A sum over a
    tree sampled twice counts what the tree used in between, data-loader workers that came
    and went included; keyed by pid namespace and pid, so that the pids of two containers on
    one machine stay apart."""
    me = psutil.Process()
    try:
        tree = [me, *me.children(recursive=True)]
    except psutil.Error:
        tree = [me]
    ns = _pid_namespace()
    out: Tree = {}
    for p in tree:
        try:
            t = p.cpu_times()
        except psutil.Error:  # ended between the listing and the read
            continue
        cpu = t.user + t.system + t.children_user + t.children_system
        out[(ns, p.pid)] = (cpu, run_delay_s(p.pid))
    return out


def threads_affinity() -> set[int] | None:
    """The cores any thread of this process may run on: the union of its threads' masks (an
    OpenMP runtime may pin the main thread to one core and its workers to others); None where
    the OS gives no masks."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = set(os.sched_getaffinity(0))
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return allowed
    for tid in tids:
        try:
            allowed |= os.sched_getaffinity(tid)
        except OSError:  # a thread that ended
            continue
    return allowed


def busy_cpu_seconds() -> dict[int, float] | None:
    """Seconds each core this process may run on was busy since boot, by the core's number
    (``/proc/stat``'s ``cpuN`` lines, so offline or missing cores cannot shift them): user,
    nice, system and steal (a hypervisor's other guests); idle, I/O wait and interrupt
    handling are no program's. None where the kernel gives no such counters."""
    allowed = threads_affinity()
    try:
        with open("/proc/stat", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    return busy_from_stat(lines, allowed, os.sysconf("SC_CLK_TCK")) or None


def busy_from_stat(lines: list[str], allowed: set[int] | None, tick: int) -> dict[int, float]:
    """:func:`busy_cpu_seconds` of ``/proc/stat``'s lines, the cores in ``allowed`` (all where
    None), its counts in ``tick``s a second."""
    out: dict[int, float] = {}
    for line in lines:
        name, *fields = line.split() or [""]
        if not name.startswith("cpu") or not name[3:].isdigit():
            continue
        core = int(name[3:])
        if allowed is not None and core not in allowed:
            continue
        v = [int(x) for x in fields]
        steal = v[7] if len(v) > 7 else 0
        out[core] = (v[0] + v[1] + v[2] + steal) / tick
    return out


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
