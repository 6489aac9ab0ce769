"""Facts about this process that need no torch (so config errors answer at once)."""

from __future__ import annotations

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
