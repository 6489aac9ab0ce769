"""Runs timed while other programs kept their cores busy.

A run's record says, per machine it used, how many CPU seconds the cores its ranks could run
on were busy while it trained, and how many of those its own processes used (``host_load``;
docs/analysis.md, "Runs slowed by other programs"). The rest went to other programs: a rank
that gets part of a core computes slower, and its breakdown counts that as compute. This
module reads the share of those cores other programs took (the busiest machine's) and words
the runs where it reached :data:`OTHER_SHARE`. Runs timed beside another of the sweep's own
jobs are named by :mod:`analysis.read.overlap`, which says which job; they are left out here.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from scalescope.record import busiest_machine

OTHER_SHARE = 0.10
"""Runs whose cores other programs kept busy for this share of their time or more are named:
below it, a counter's resolution (10 ms a core) and the samples' few milliseconds apart on a
short run are of the same order."""

NOTE_ROWS = 6
"""Runs named in the note; the rest are counted."""


def _shape(row: Any) -> str:
    nodes, devices = row.get("nodes"), row.get("devices_per_node")
    if pd.isna(nodes) or pd.isna(devices):
        return "?"
    return f"{int(nodes)}x{int(devices)}"


def _phrase(row: Any) -> str:
    b = busiest_machine(row.get("host_load"))
    assert b is not None
    where = ", ".join(str(n) for n in b.get("nodes") or ()) or "its machine"
    other_cores = b["other_cpu_s"] / b["wall_s"]
    return (
        f"job {row.get('job_id')} ({_shape(row)}) on {where}: {other_cores:.1f} of "
        f"{int(b['cores'])} core(s) ({b['share']:.0%})"
    )


def cpu_load_notes(runs: pd.DataFrame, overlaps: pd.DataFrame, limit: int = NOTE_ROWS) -> list[str]:
    """The "Read this first" sentence: the runs whose cores other programs kept busy for
    :data:`OTHER_SHARE` of their timed interval or more, busiest first, apart from those
    ``overlaps`` names (timed beside another of these jobs); none without such runs."""
    if runs.empty or "other_cpu_share" not in runs.columns:
        return []
    beside = set(overlaps["row"]) if not overlaps.empty else set()
    share = pd.to_numeric(runs["other_cpu_share"], errors="coerce")
    hit = runs[(share >= OTHER_SHARE) & ~runs.index.isin(beside)]
    if hit.empty:
        return []
    hit = hit.assign(_s=share[hit.index]).sort_values("_s", ascending=False, kind="stable")
    said = [_phrase(r) for _, r in hit.head(limit).iterrows()]
    if len(hit) > limit:
        said.append(f"and {len(hit) - limit} more (the runs frame's other_cpu_share)")
    return [
        f"{len(hit)} run(s) were timed while other programs kept their cores busy (of the "
        f"cores their ranks could use, on average over training): {'; '.join(said)}. Their "
        "ranks got less CPU than they would alone, and the breakdown counts that as compute: "
        "rerun them on an idle machine (on Slurm, nodes of their own: the cluster profile's "
        "`exclusive: true`)."
    ]


__all__ = ["NOTE_ROWS", "OTHER_SHARE", "cpu_load_notes"]
