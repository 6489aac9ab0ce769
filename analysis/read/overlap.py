"""Runs timed while another job ran on their node.

Two jobs on one node share its cores, memory bandwidth and network link: each is timed as if
alone and is not. Slurm puts jobs of a partition that shares nodes side by side unless they
ask for ``--exclusive``, and a sweep that submits every job at once does the same on one
machine. A run's figures come from its timed interval (``train_start_unix`` to
``train_end_unix``, the record's wall-clock bounds); another job loads the node from its
process start (``train_start_unix - setup_time_s``: importing, building, meeting its ranks)
to its end. For every run and every other run on a node both used, this measures how many
seconds of the first one's timed interval the second one was there. Records written before
the bounds existed are not checked: nothing here guesses their interval.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import Any

import pandas as pd

from scalescope.launch.resources import Shape

MIN_SHARE = 0.01
"""Overlaps under this share of a run's timed interval are not reported: they cannot move its
figures by more than that. (Two processes on one node read the same clock.)"""

OVERLAP_COLUMNS = [
    "job",
    "shape",
    "other_job",
    "other_shape",
    "nodes",
    "overlap_s",
    "share",
    "run_id",
    "other_run_id",
    "row",
    "other_row",
]
"""One row per (run, other run): the run's job id and shape (nodes x devices per node), the
other's, the nodes they shared (comma-separated), the seconds of the run's timed interval the
other job was on them, that as a share of the interval, both run ids, and both runs' row
labels in the runs frame."""

NOTE_ROWS = 6
"""Overlaps named in the note; the runs table names every one."""

ADVICE = (
    "their figures include another job's load, not one job alone: rerun them one job at a "
    "time (`scalescope sweep --max-parallel 1`), or on nodes of their own (the cluster "
    "profile's `exclusive: true`)"
)


@dataclass(frozen=True)
class _Run:
    row: Any
    timed: tuple[float, float]
    """The run's timed interval (Unix seconds)."""
    present: tuple[float, float]
    """When its job loaded the node: process start to the end of training."""


def shape_label(nodes: Any, devices: Any) -> str:
    """``2x4`` (nodes x devices per node), as a sweep names its shapes
    (:attr:`scalescope.launch.resources.Shape.label`); ``?`` where either is missing."""
    if pd.isna(nodes) or pd.isna(devices):
        return "?"
    return Shape(int(nodes), int(devices)).label


def _runs_by_node(runs: pd.DataFrame) -> dict[str, list[_Run]]:
    """Per node name, every run with both bounds recorded."""
    needed = {"train_start_unix", "train_end_unix", "setup_time_s", "node_names"}
    by_node: dict[str, list[_Run]] = {}
    if runs.empty or not needed <= set(runs.columns):
        return by_node
    columns = zip(
        runs.index,
        runs["train_start_unix"],
        runs["train_end_unix"],
        runs["setup_time_s"],
        runs["node_names"],
        strict=True,
    )
    for label, start, end, setup, names in columns:
        if pd.isna(start) or pd.isna(end) or pd.isna(names) or not end > start:
            continue
        first = float(start) - (float(setup) if not pd.isna(setup) and setup > 0 else 0.0)
        run = _Run(label, (float(start), float(end)), (first, float(end)))
        for node in {n for n in str(names).split(",") if n}:
            by_node.setdefault(node, []).append(run)
    return by_node


def _beside(items: list[_Run], min_share: float) -> dict[tuple[Any, Any], float]:
    """{(run, other run): seconds of the run's timed interval the other was present} on one
    node. Sorted by arrival, with the latest departure so far: the scan for a run stops at
    the first arrival after its interval, and goes back only while an earlier job may still
    be there, so runs that followed each other cost a step or two each."""
    order = sorted(items, key=lambda r: r.present)
    arrivals = [r.present[0] for r in order]
    left_by = list(itertools.accumulate((r.present[1] for r in order), max))
    found: dict[tuple[Any, Any], float] = {}
    for run in items:
        start, end = run.timed
        j = bisect.bisect_left(arrivals, end) - 1
        while j >= 0 and left_by[j] > start:
            other = order[j]
            j -= 1
            if other.row == run.row:
                continue
            seconds = min(end, other.present[1]) - max(start, other.present[0])
            if seconds > 0 and seconds >= min_share * (end - start):
                found[(run.row, other.row)] = seconds
    return found


def _about(runs: pd.DataFrame, labels: set[Any]) -> dict[Any, tuple[str, str, str, float]]:
    """Per row label: job id, shape, run id and the timed interval's length (read column by
    column: thousands of overlaps cost no row lookups)."""
    part = runs.loc[sorted(labels, key=str)]
    cols = zip(
        part.index,
        part["job_id"],
        part["nodes"],
        part["devices_per_node"],
        part["run_id"],
        part["train_end_unix"] - part["train_start_unix"],
        strict=True,
    )
    return {
        label: (str(job), shape_label(nodes, devices), str(run_id), float(length))
        for label, job, nodes, devices, run_id, length in cols
    }


def node_overlaps(runs: pd.DataFrame, min_share: float = MIN_SHARE) -> pd.DataFrame:
    """Every run timed while another job ran on a node both used (:data:`OVERLAP_COLUMNS`),
    the longest overlap first. Runs without recorded bounds are left out."""
    nodes: dict[tuple[Any, Any], list[str]] = {}
    seconds: dict[tuple[Any, Any], float] = {}
    for node, items in _runs_by_node(runs).items():
        for pair, value in _beside(items, min_share).items():
            nodes.setdefault(pair, []).append(node)
            seconds[pair] = value
    if not seconds:
        return pd.DataFrame(columns=OVERLAP_COLUMNS)
    about = _about(runs, {row for pair in seconds for row in pair})
    rows = []
    for (a, b), value in seconds.items():
        (job, shape, run_id, timed_s), (other_job, other_shape, other_run, _) = about[a], about[b]
        rows.append(
            (
                job,
                shape,
                other_job,
                other_shape,
                ",".join(sorted(nodes[(a, b)])),
                value,
                value / timed_s,
                run_id,
                other_run,
                a,
                b,
            )
        )
    frame = pd.DataFrame(rows, columns=OVERLAP_COLUMNS)
    if len(frame):
        frame = frame.sort_values(
            ["overlap_s", "job", "other_job"], ascending=[False, True, True], kind="stable"
        ).reset_index(drop=True)
    return frame


def _seconds(row: Any) -> str:
    return f"{row['overlap_s']:,.1f} s ({row['share']:.0%})"


def overlap_phrase(row: Any) -> str:
    """``job 11 (1x1) was timed beside job 12 (2x1) on node1 for 12.5 s (42%)``."""
    nodes = str(row["nodes"]).replace(",", ", ")
    return (
        f"job {row['job']} ({row['shape']}) was timed beside job {row['other_job']} "
        f"({row['other_shape']}) on {nodes} for {_seconds(row)}"
    )


def overlap_notes(overlaps: pd.DataFrame, limit: int = NOTE_ROWS) -> list[str]:
    """The "Read this first" sentence: which runs were timed beside which job, on which node
    and for how long (the share of their timed interval), and what to do about it; none
    without overlaps."""
    if overlaps.empty:
        return []
    said = [overlap_phrase(r) for _, r in overlaps.head(limit).iterrows()]
    more = len(overlaps) - len(said)
    if more > 0:
        said.append(f"and {more} more (the runs table's Shared node column)")
    runs = overlaps["row"].nunique()
    return [
        f"{runs} run(s) shared a node with another job while timed: {'; '.join(said)}. "
        f"{ADVICE[0].upper()}{ADVICE[1:]}."
    ]


CELL_ENTRIES = 3
"""Other jobs named in one run's cell of the runs table; the rest are counted."""


def run_cells(overlaps: pd.DataFrame) -> dict[Any, str]:
    """Per runs-frame row timed beside another job: ``node1 12.5 s (42%) beside job 12``,
    the longest first, at most :data:`CELL_ENTRIES` of them and a count of the others."""
    cells: dict[Any, list[str]] = {}
    for r in overlaps.to_dict("records"):
        nodes = str(r["nodes"]).replace(",", ", ")
        cells.setdefault(r["row"], []).append(f"{nodes} {_seconds(r)} beside job {r['other_job']}")
    out = {}
    for row, parts in cells.items():
        more = len(parts) - CELL_ENTRIES
        shown = parts[:CELL_ENTRIES] + ([f"and {more} other job(s)"] if more > 0 else [])
        out[row] = "; ".join(shown)
    return out


def side_note(name: str, overlaps: pd.DataFrame) -> str | None:
    """A line for a command that compares results (compare, check): ``name`` holds runs timed
    beside another job, so their figures are not those of jobs alone."""
    if overlaps.empty:
        return None
    return (
        f"{name} holds {overlaps['row'].nunique()} run(s) that shared a node with another "
        f"job while timed (the longest: {overlap_phrase(overlaps.iloc[0])}): {ADVICE}"
    )
