"""Rank 0 of a local multi-process run, stopping on Ctrl-C: end the child ranks itself.

Lightning's local launcher re-executes the command for ranks 1..N-1 and watches them from a
thread in rank 0 (``_ChildProcessObserver``, every 5 s). When a child has exited non-zero it
SIGKILLs every child *and rank 0 itself*. After Ctrl-C every rank exits 130 on purpose, so a
rank 0 still tearing down when the observer wakes (atexit handlers, a busy machine) died with
-9 instead of returning 130. :func:`take_over_from_observer` disarms the observer and does its
useful part: wait for the children, kill the ones that do not end.

Under srun or submitit there is no such thread, and nothing here runs.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from typing import Any

OBSERVER_CLASS = "_ChildProcessObserver"


def _observers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if type(t).__name__ == OBSERVER_CLASS]


def take_over_from_observer(grace_s: float = 10.0) -> int:
    """Disarm Lightning's child observer; wait up to ``grace_s`` for the children it watched,
    then SIGKILL the ones still running. Returns how many had to be killed."""
    children: list[Any] = []
    for observer in _observers():
        # Instance attributes shadow the methods its loop calls: a call already under way
        # finds a no-op kill, and its next wake-up ends the loop without signalling anyone.
        observer._terminate_all = lambda: None  # type: ignore[attr-defined]
        observer._run = lambda: True  # type: ignore[attr-defined]
        children += list(getattr(observer, "_child_processes", []))
    deadline = time.monotonic() + grace_s
    killed = 0
    for proc in children:
        if not isinstance(proc, subprocess.Popen):
            continue
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            killed += 1
    return killed
