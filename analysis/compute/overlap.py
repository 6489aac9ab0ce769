"""Runs that shared a node while they were timed.

Two jobs on one node share its cores, memory bandwidth and network link: each is timed as if
alone and is not. Slurm puts jobs of a partition that shares nodes side by side unless they
ask for ``--exclusive``, and a sweep that submits every job at once does the same on one
machine. From each run's timed interval (``train_start_unix`` to ``train_end_unix``, the
record's wall-clock bounds) and its node names, this finds every pair of runs whose intervals
overlapped on a node they both used. Records written before the bounds existed are not
checked: nothing here guesses their interval.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

MIN_OVERLAP_S = 1.0
"""Overlaps shorter than this are not reported: the clocks of two processes on one node
agree to far better than a second, but a second of sharing does not move a run's figures."""

OVERLAP_COLUMNS = [
    "nodes",
    "overlap_s",
    "run_a",
    "job_a",
    "shape_a",
    "run_b",
    "job_b",
    "shape_b",
    "row_a",
    "row_b",
]
"""One row per pair of runs: the nodes they shared (comma-separated), the seconds their timed
intervals overlapped, each run's id, job id and shape (nodes x devices per node), and each
run's row label in the runs frame."""

NOTE_PAIRS = 6
"""Pairs named in the note; the runs table names every one."""

ADVICE = (
    "their times include another job's load on the node, not one job alone: rerun them one "
    "job at a time (`scalescope sweep --max-parallel 1`), or on nodes of their own (the "
    "cluster profile's `exclusive: true`)"
)


def _shape(nodes: Any, devices: Any) -> str:
    if pd.isna(nodes) or pd.isna(devices):
        return "?"
    return f"{int(nodes)}x{int(devices)}"


def _intervals(runs: pd.DataFrame) -> dict[str, list[tuple[float, float, Any]]]:
    """Per node name: (start, end, row label) of every run with both bounds recorded."""
    needed = {"train_start_unix", "train_end_unix", "node_names"}
    by_node: dict[str, list[tuple[float, float, Any]]] = {}
    if runs.empty or not needed <= set(runs.columns):
        return by_node
    columns = zip(
        runs.index,
        runs["train_start_unix"],
        runs["train_end_unix"],
        runs["node_names"],
        strict=True,
    )
    for label, start, end, names in columns:
        if pd.isna(start) or pd.isna(end) or pd.isna(names) or not end > start:
            continue
        for node in {n for n in str(names).split(",") if n}:
            by_node.setdefault(node, []).append((float(start), float(end), label))
    return by_node


def node_overlaps(runs: pd.DataFrame, min_overlap_s: float = MIN_OVERLAP_S) -> pd.DataFrame:
    """Every pair of runs whose timed intervals overlapped by at least ``min_overlap_s`` on a
    node both used (:data:`OVERLAP_COLUMNS`), the longest overlap first. Runs without
    recorded bounds are left out."""
    shared: dict[tuple[Any, Any], tuple[list[str], float]] = {}
    for node, items in _intervals(runs).items():
        items.sort(key=lambda x: (x[0], x[1]))
        for i, (_, end, a) in enumerate(items):
            for start_b, end_b, b in items[i + 1 :]:
                if start_b >= end:  # sorted by start: no later one overlaps this run
                    break
                seconds = min(end, end_b) - start_b
                if seconds < min_overlap_s or a == b:
                    continue
                pair = (a, b) if str(a) <= str(b) else (b, a)
                nodes, _ = shared.get(pair, ([], 0.0))
                shared[pair] = (sorted({*nodes, node}), seconds)
    rows = []
    for (a, b), (nodes, seconds) in shared.items():
        ra, rb = runs.loc[a], runs.loc[b]
        first, second = sorted((ra, rb), key=lambda r: r["train_start_unix"])
        rows.append(
            {
                "nodes": ",".join(nodes),
                "overlap_s": seconds,
                "run_a": first["run_id"],
                "job_a": first["job_id"],
                "shape_a": _shape(first["nodes"], first["devices_per_node"]),
                "run_b": second["run_id"],
                "job_b": second["job_id"],
                "shape_b": _shape(second["nodes"], second["devices_per_node"]),
                "row_a": first.name,
                "row_b": second.name,
            }
        )
    frame = pd.DataFrame(rows, columns=OVERLAP_COLUMNS)
    if len(frame):
        frame = frame.sort_values(
            ["overlap_s", "job_a", "job_b"], ascending=[False, True, True], kind="stable"
        ).reset_index(drop=True)
    return frame


def _seconds(value: float) -> str:
    return f"{value:,.1f} s"


def pair_phrase(row: Any) -> str:
    """``job 12 (1x1) and job 13 (2x1) on node1 for 9.0 s``."""
    nodes = str(row["nodes"]).replace(",", ", ")
    return (
        f"job {row['job_a']} ({row['shape_a']}) and job {row['job_b']} ({row['shape_b']}) "
        f"on {nodes} for {_seconds(row['overlap_s'])}"
    )


def overlap_notes(overlaps: pd.DataFrame, limit: int = NOTE_PAIRS) -> list[str]:
    """The "Read this first" sentence: which runs shared which node and for how long, and
    what to do about it; none without overlaps."""
    if overlaps.empty:
        return []
    pairs = [pair_phrase(r) for _, r in overlaps.head(limit).iterrows()]
    more = len(overlaps) - len(pairs)
    if more > 0:
        pairs.append(f"and {more} more pair(s) (the runs table's Shared node column)")
    runs = len({*overlaps["row_a"], *overlaps["row_b"]})
    return [
        f"{runs} run(s) shared a node with another run while timed: {'; '.join(pairs)}. "
        f"{ADVICE[0].upper()}{ADVICE[1:]}."
    ]


def run_cells(runs: pd.DataFrame, overlaps: pd.DataFrame) -> dict[Any, str]:
    """Per runs-frame row that shared a node: ``node1 9.0 s with job 13`` (one entry per
    other run, the longest first)."""
    cells: dict[Any, list[str]] = {}
    for _, r in overlaps.iterrows():
        nodes, seconds = str(r["nodes"]).replace(",", ", "), _seconds(r["overlap_s"])
        cells.setdefault(r["row_a"], []).append(f"{nodes} {seconds} with job {r['job_b']}")
        cells.setdefault(r["row_b"], []).append(f"{nodes} {seconds} with job {r['job_a']}")
    return {row: "; ".join(parts) for row, parts in cells.items()}


def side_note(name: str, overlaps: pd.DataFrame) -> str | None:
    """A line for a command that reads results and compares them (compare, check): ``name``
    holds runs that shared a node, so its figures are not those of jobs alone."""
    if overlaps.empty:
        return None
    runs = len({*overlaps["row_a"], *overlaps["row_b"]})
    worst = overlaps.iloc[0]
    return (
        f"{name} holds {runs} run(s) that shared a node with another run while timed "
        f"({len(overlaps)} pair(s); the longest: {pair_phrase(worst)}): {ADVICE}"
    )
