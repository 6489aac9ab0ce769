"""Other programs' CPU while a run trained (:mod:`scalescope.job.clocks.host_load`): the
gathered ranks' counters reduced per machine. Pure: the counters are written here."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.clocks.host_load import CpuSample, host_loads, rank_part

NS = 4026531836
"""A pid namespace's inode."""


def _tree(cpu: dict[int, float], wait: float | None = 0.0) -> dict[tuple[int, int], Any]:
    return {(NS, pid): (s, wait) for pid, s in cpu.items()}


def _part(
    host: str,
    node: str,
    busy: dict[int, float],
    start: dict[Any, Any],
    end: dict[Any, Any],
    wall: float = 10.0,
) -> dict[str, Any]:
    return {
        "host": host,
        "node": node,
        "wall_s": wall,
        "busy_s": busy,
        "tree_start": start,
        "tree_end": end,
    }


def test_a_pid_two_ranks_see_counts_once() -> None:
    """A local launch: rank 0 (pid 100) is the parent of rank 1 (pid 200), so rank 0's tree
    holds rank 1 too. Rank 1's own reading and rank 0's of it are one process."""
    r0 = _part(
        "boot-a",
        "n1",
        {0: 10.0, 1: 10.0},
        _tree({100: 5.0, 200: 4.0}),
        _tree({100: 14.0, 200: 12.9}),
    )
    r1 = _part("boot-a", "n1", {0: 10.0, 1: 10.0}, _tree({200: 4.0}), _tree({200: 13.0}))
    (m,) = host_loads([r0, r1]) or []
    assert m["own_cpu_s"] == pytest.approx(9.0 + 9.0)
    assert m["busy_cpu_s"] == pytest.approx(20.0)
    assert m["other_cpu_s"] == pytest.approx(2.0)
    assert m["cores"] == 2 and m["nodes"] == ["n1"]


def test_the_same_pid_in_two_containers_is_two_processes() -> None:
    """Two ranks in containers of their own on one machine (one boot id), each pid 7 in its
    own pid namespace: both count."""
    a = _part("boot-a", "n1", {0: 10.0}, {(1, 7): (0.0, 0.0)}, {(1, 7): (6.0, 0.0)})
    b = _part("boot-a", "n1", {1: 10.0}, {(2, 7): (0.0, 0.0)}, {(2, 7): (7.0, 0.0)})
    (m,) = host_loads([a, b]) or []
    assert m["own_cpu_s"] == pytest.approx(13.0) and m["other_cpu_s"] == pytest.approx(7.0)


def test_a_worker_that_ended_counts_only_its_time_in_the_window() -> None:
    """A data-loader worker (pid 300) alive at the start, reaped by the end: its lifetime is in
    its parent's reaped-children seconds at the end, so what it had used before the start is
    taken off again."""
    start = _tree({100: 5.0, 300: 2.0})
    end = _tree({100: 5.0 + 3.0 + (2.0 + 1.5)})  # the rank's 3 s, and the worker's 3.5 s life
    (m,) = host_loads([_part("h", "n1", {0: 6.0}, start, end)]) or []
    assert m["own_cpu_s"] == pytest.approx(4.5)
    assert m["other_cpu_s"] == pytest.approx(1.5)


def test_the_wait_is_what_live_threads_added_and_unknown_where_not_counted() -> None:
    """Rank 100 waited 0.4 s more, a new worker 0.1 s; a process whose threads' count fell
    (a thread ended) adds nothing, never less. Without the kernel's count: None."""
    start = {(NS, 100): (1.0, 2.0), (NS, 200): (1.0, 5.0)}
    end = {(NS, 100): (2.0, 2.4), (NS, 200): (2.0, 4.0), (NS, 300): (0.5, 0.1)}
    (m,) = host_loads([_part("h", "n1", {0: 9.0}, start, end)]) or []
    assert m["own_wait_s"] == pytest.approx(0.5)
    blind = {k: (v[0], None) for k, v in end.items()}
    (m,) = host_loads([_part("h", "n1", {0: 9.0}, start, blind)]) or []
    assert m["own_wait_s"] is None and m["own_cpu_s"] == pytest.approx(2.5)


def test_machines_apart_and_a_local_clusters_nodes_as_one() -> None:
    a1 = _part("boot-a", "node1", {0: 8.0}, _tree({1: 0.0}), _tree({1: 6.0}))
    a2 = _part("boot-a", "node2", {1: 9.0}, _tree({2: 0.0}), _tree({2: 7.0}))
    b = _part("boot-b", "gpu7", {0: 10.0, 1: 10.0}, _tree({3: 0.0}), _tree({3: 20.0}), wall=12.0)
    first, second = host_loads([a1, a2, b]) or []
    assert first["nodes"] == ["node1", "node2"] and first["cores"] == 2
    assert first["other_cpu_s"] == pytest.approx(17.0 - 13.0)
    assert second["nodes"] == ["gpu7"] and second["other_cpu_s"] == 0.0
    assert second["wall_s"] == 12.0


def test_own_beyond_busy_is_no_negative_load_and_a_missing_rank_is_none() -> None:
    (m,) = host_loads([_part("h", "n", {0: 1.0}, _tree({1: 0.0}), _tree({1: 1.02}))]) or []
    assert m["other_cpu_s"] == 0.0  # counters a tick apart
    assert host_loads([_part("h", "n", {0: 1.0}, {}, {}), None]) is None
    assert host_loads([]) is None


def test_rank_part_takes_differences_over_the_cores_sampled_both_times() -> None:
    start = CpuSample(100.0, {0: 50.0, 1: 60.0}, _tree({7: 1.0}))
    end = CpuSample(104.0, {0: 53.0, 1: 61.5, 2: 9.0}, _tree({7: 4.0, 8: 0.5}))
    p = rank_part(start, end, "n1")
    assert p is not None
    assert p["wall_s"] == 4.0 and p["busy_s"] == {0: 3.0, 1: 1.5}
    assert p["tree_start"] == _tree({7: 1.0}) and p["tree_end"] == _tree({7: 4.0, 8: 0.5})
    assert rank_part(None, end, "n1") is None and rank_part(start, None, "n1") is None


seconds = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)


@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.integers(0, 7), seconds, min_size=1),
            st.dictionaries(st.integers(1, 50), seconds),
        ),
        min_size=1,
        max_size=6,
    ),
    st.dictionaries(st.integers(1, 50), seconds),
)
def test_other_and_own_split_the_busy_time(ranks: list[Any], used: dict[int, float]) -> None:
    """However the ranks' readings overlap: other + own is the busy time where the run used
    less than it, other is never below zero, and a busier core only adds to other."""
    parts = [
        _part(
            "h",
            f"n{i}",
            busy,
            _tree(start),
            _tree({pid: s + used.get(pid, 0.0) for pid, s in start.items()}),
        )
        for i, (busy, start) in enumerate(ranks)
    ]
    (m,) = host_loads(parts) or []
    assert m["other_cpu_s"] >= 0.0 and m["own_wait_s"] == 0.0
    if m["busy_cpu_s"] >= m["own_cpu_s"]:
        assert m["other_cpu_s"] + m["own_cpu_s"] == pytest.approx(m["busy_cpu_s"], abs=1e-6)
    busier = [{**p, "busy_s": {c: v + 1.0 for c, v in p["busy_s"].items()}} for p in parts]
    (m2,) = host_loads(busier) or []
    assert m2["other_cpu_s"] >= m["other_cpu_s"]


STAT = """cpu  900 10 300 5000 20 1 2 30 0 0
cpu0 400 5 100 2500 10 1 1 10 0 0
cpu2 300 5 150 1500 5 0 1 15 0 0
cpu6 200 0 50 1000 5 0 0 5 0 0
intr 12345 0 0
ctxt 999
"""


def test_the_cores_are_read_by_their_numbers_not_their_places() -> None:
    """Cores 1, 3-5 offline (or not in this machine's numbering): core 6 is the third cpu line
    and still core 6; busy is user + nice + system + steal, in the kernel's ticks."""
    from scalescope.procinfo import busy_from_stat

    lines = STAT.splitlines()
    assert busy_from_stat(lines, None, 100) == {0: 5.15, 2: 4.7, 6: 2.55}
    assert busy_from_stat(lines, {2, 6, 7}, 100) == {2: 4.7, 6: 2.55}
    assert busy_from_stat(lines, {1}, 100) == {}


def test_a_sample_that_cannot_be_taken_is_none_not_an_error(monkeypatch: Any) -> None:
    """Whatever reading the counters raises, training goes on without them."""
    from scalescope.job.clocks import host_load

    def broken() -> dict[int, float]:
        raise IndexError("list index out of range")

    monkeypatch.setattr(host_load, "busy_cpu_seconds", broken)
    assert host_load.sample() is None
    monkeypatch.setattr(host_load, "busy_cpu_seconds", lambda: None)
    assert host_load.sample() is None


def test_a_part_that_cannot_be_reduced_costs_the_record_nothing() -> None:
    """A rank's part missing its counters (another version's, a broken sample) leaves the
    record without ``host_load``, never without the record."""
    from scalescope.job.clocks.timing import _host_loads

    assert _host_loads([{"cpu": {"host": "h", "node": "n"}}]) is None


def test_the_cores_are_every_threads_not_the_main_threads() -> None:
    """A runtime that pins the main thread to one core (OpenMP's binding) leaves the others on
    the rest: the cores counted are the union of the threads' masks."""
    import os
    import threading

    from scalescope.procinfo import busy_cpu_seconds, threads_affinity

    cores = os.sched_getaffinity(0)
    if len(cores) < 2:
        pytest.skip("one core: nothing to pin apart")
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()  # created with every core
    try:
        os.sched_setaffinity(0, {min(cores)})
        assert threads_affinity() == cores
        assert set(busy_cpu_seconds() or {}) == cores
    finally:
        os.sched_setaffinity(0, cores)
        stop.set()
        worker.join()
