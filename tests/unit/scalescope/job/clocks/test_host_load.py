"""Other programs' CPU while a run trained (:mod:`scalescope.job.clocks.host_load`): the
gathered ranks' counters reduced per machine. Pure: the counters are written here."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.clocks.host_load import CpuSample, host_loads, rank_part


def _part(
    host: str,
    node: str,
    busy: dict[int, float],
    start: dict[int, float],
    end: dict[int, float],
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
    r0 = _part("boot-a", "n1", {0: 10.0, 1: 10.0}, {100: 5.0, 200: 4.0}, {100: 14.0, 200: 12.9})
    r1 = _part("boot-a", "n1", {0: 10.0, 1: 10.0}, {200: 4.0}, {200: 13.0})
    (m,) = host_loads([r0, r1])
    assert m["own_cpu_s"] == pytest.approx(9.0 + 9.0)
    assert m["busy_cpu_s"] == pytest.approx(20.0)
    assert m["other_cpu_s"] == pytest.approx(2.0)
    assert m["cores"] == 2 and m["nodes"] == ["n1"]


def test_a_worker_that_ended_counts_only_its_time_in_the_window() -> None:
    """A data-loader worker (pid 300) alive at the start, reaped by the end: its lifetime is in
    its parent's reaped-children seconds at the end, so what it had used before the start is
    taken off again."""
    start = {100: 5.0, 300: 2.0}
    end = {100: 5.0 + 3.0 + (2.0 + 1.5)}  # the rank's 3 s, and the worker's 3.5 s lifetime
    (m,) = host_loads([_part("h", "n1", {0: 6.0}, start, end)])
    assert m["own_cpu_s"] == pytest.approx(4.5)
    assert m["other_cpu_s"] == pytest.approx(1.5)


def test_machines_apart_and_a_local_clusters_nodes_as_one() -> None:
    a1 = _part("boot-a", "node1", {0: 8.0}, {1: 0.0}, {1: 6.0})
    a2 = _part("boot-a", "node2", {1: 9.0}, {2: 0.0}, {2: 7.0})
    b = _part("boot-b", "gpu7", {0: 10.0, 1: 10.0}, {3: 0.0}, {3: 20.0}, wall=12.0)
    first, second = host_loads([a1, a2, b]) or []
    assert first["nodes"] == ["node1", "node2"] and first["cores"] == 2
    assert first["other_cpu_s"] == pytest.approx(17.0 - 13.0)
    assert second["nodes"] == ["gpu7"] and second["other_cpu_s"] == 0.0
    assert second["wall_s"] == 12.0


def test_own_beyond_busy_is_no_negative_load_and_a_missing_rank_is_none() -> None:
    (m,) = host_loads([_part("h", "n", {0: 1.0}, {1: 0.0}, {1: 1.02})])
    assert m["other_cpu_s"] == 0.0  # counters a tick apart
    assert host_loads([_part("h", "n", {0: 1.0}, {}, {}), None]) is None
    assert host_loads([]) is None


def test_rank_part_takes_differences_over_the_cores_sampled_both_times() -> None:
    start = CpuSample(100.0, {0: 50.0, 1: 60.0}, {7: 1.0})
    end = CpuSample(104.0, {0: 53.0, 1: 61.5, 2: 9.0}, {7: 4.0, 8: 0.5})
    p = rank_part(start, end, "n1")
    assert p is not None
    assert p["wall_s"] == 4.0 and p["busy_s"] == {0: 3.0, 1: 1.5}
    assert p["tree_start"] == {7: 1.0} and p["tree_end"] == {7: 4.0, 8: 0.5}
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
        _part("h", f"n{i}", busy, start, {pid: s + used.get(pid, 0.0) for pid, s in start.items()})
        for i, (busy, start) in enumerate(ranks)
    ]
    (m,) = host_loads(parts) or []
    assert m["other_cpu_s"] >= 0.0
    if m["busy_cpu_s"] >= m["own_cpu_s"]:
        assert m["other_cpu_s"] + m["own_cpu_s"] == pytest.approx(m["busy_cpu_s"], abs=1e-6)
    busier = [{**p, "busy_s": {c: v + 1.0 for c, v in p["busy_s"].items()}} for p in parts]
    (m2,) = host_loads(busier) or []
    assert m2["other_cpu_s"] >= m["other_cpu_s"]
