"""Process facts through psutil: start times and process trees of real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from scalescope.launch import local_cluster_daemons, monitor
from scalescope.procinfo import busy_cpu_seconds, process_start_unix, run_delay_s, tree_cpu

REPO = Path(__file__).resolve().parents[2]


def test_process_start_is_when_the_process_was_created() -> None:
    before = time.time()
    code = "import time; t0 = time.time(); from scalescope.procinfo import process_start_unix; "
    code += "print(process_start_unix(), t0)"
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    started, first_line = map(float, out.stdout.split())
    # created after we asked for it and before its first line of Python ran; Linux counts it
    # from the boot time, which it gives in whole seconds
    assert before - 1.05 <= started <= first_line + 1.05
    assert process_start_unix() < before


def test_descendants_finds_grandchildren_and_cmdline_reads_argv() -> None:
    child = subprocess.Popen(["bash", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        tree: dict[int, float] = {}
        while time.monotonic() < deadline and not tree:
            tree = monitor._descendants(child.pid)
            time.sleep(0.05)
        (grandchild,) = tree
        assert local_cluster_daemons._cmdline(grandchild) == ["sleep", "30"]
    finally:
        child.kill()
        child.wait()
        subprocess.run(["kill", str(grandchild)], check=False)
    assert local_cluster_daemons._cmdline(2**22 + 12345) is None  # no such process


BURN = "import time\nwhile time.process_time() < {s}: pass\nprint('done', flush=True)\n{then}"


def _burner(seconds: float, then: str = "") -> subprocess.Popen[str]:
    code = BURN.format(s=seconds, then=then)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _cpu(tree: dict[tuple[int, int], tuple[float, float | None]]) -> dict[int, float]:
    return {pid: cpu for (_, pid), (cpu, _) in tree.items()}


def test_the_tree_counts_a_live_child_and_one_it_reaped() -> None:
    """A child that burned 0.6 s of CPU (at least 0.5 in the kernel's 10 ms ticks) and
    waits: its seconds are in the tree under its pid; once reaped, under this process's
    reaped-children seconds. Either way the sum grew by them (CPU time, not wall time: a
    busy machine slows the child, never its count)."""
    tree = _cpu(tree_cpu())
    before, mine = sum(tree.values()), tree[os.getpid()]
    busy_before = sum((busy_cpu_seconds() or {}).values())
    child = _burner(0.6, then="time.sleep(30)")
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        alive = _cpu(tree_cpu())
        assert alive[child.pid] >= 0.5
        assert sum(alive.values()) - before >= 0.5
    finally:
        child.kill()
        child.wait()
    reaped = _cpu(tree_cpu())
    assert child.pid not in reaped and reaped[os.getpid()] - mine >= 0.5
    assert sum((busy_cpu_seconds() or {}).values()) - busy_before >= 0.45  # the cores saw it


def test_threads_that_queue_for_one_core_count_their_wait() -> None:
    """Three busy processes pinned to one core: each runs about a third of the time and
    waits, runnable, the rest; the scheduler's run delay says so (a wait of the same order
    as the CPU, never none). A process alone on an idle core would wait little, but this
    machine is never known to be idle: only the contended side is asserted."""
    core = min(os.sched_getaffinity(0))
    code = BURN.format(s=0.4, then="time.sleep(30)")

    def pin() -> None:
        os.sched_setaffinity(0, {core})

    kids = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, preexec_fn=pin
        )
        for _ in range(3)
    ]
    try:
        for k in kids:
            assert k.stdout is not None and k.stdout.readline().strip() == "done"
        waits = [run_delay_s(k.pid) for k in kids]
        assert all(w is not None for w in waits), waits
        assert sum(w or 0.0 for w in waits) >= 0.4  # 1.2 s of CPU queued on one core
    finally:
        for k in kids:
            k.kill()
            k.wait()
