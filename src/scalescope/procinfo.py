"""Facts about this process that need no torch (so config errors answer at once)."""

from __future__ import annotations

import os
import resource
import time


def process_start_unix() -> float:
    """Wall-clock time this process was created (Linux /proc), else now.

    Setup time is measured from here, so interpreter start-up and imports are counted.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields_after_comm = fh.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields_after_comm[19])  # field 22 of stat, 1-based after pid/comm
        with open("/proc/stat", encoding="ascii") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith("btime"))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def peak_host_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
