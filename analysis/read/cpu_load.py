"""Runs timed while other programs kept their cores busy.

A run's record says, per machine it used, how many CPU seconds the cores its ranks could run
on were busy while it trained, and how many of those its own processes used (``host_load``;
docs/analysis.md, "Runs slowed by other programs"). The rest went to other programs: a rank
that gets part of a core computes slower, and its breakdown counts that as compute. This
module reads the share of those cores other programs took (the busiest machine's) and how
long the run's threads waited, runnable, for a core there, and says a run was slowed where
both reached their thresholds over a training interval long enough for the counters.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.read.overlap import shape_label
from scalescope.record import busiest_machine

OTHER_SHARE = 0.10
"""Other programs' share of a run's cores from which it may have been slowed."""

WAIT_SHARE = 0.10
"""...and the run's threads' wait for a core, per second they ran, from which it was: other
programs' CPU on cores the run left idle (a GPU run's spare cores, a niced job filling gaps)
costs it nothing, and then its threads do not wait."""

MIN_WALL_S = 2.0
"""Training intervals shorter than this are not judged: the counters tick every 10 ms a core,
and the ranks sample a few milliseconds apart, a tenth of a core on a 0.1 s interval."""

NOTE_ROWS = 6
"""Runs named in the note; the rest are counted."""


def slowed(host_load: Any) -> bool | None:
    """Whether other programs slowed the run on its busiest machine: they took
    :data:`OTHER_SHARE` of its cores and its threads waited :data:`WAIT_SHARE` (where the
    kernel counts the wait), over at least :data:`MIN_WALL_S`; None where not recorded."""
    b = busiest_machine(host_load)
    if b is None:
        return None
    waited = b["wait_share"] is None or b["wait_share"] >= WAIT_SHARE
    return bool(b["share"] >= OTHER_SHARE and waited and b["wall_s"] >= MIN_WALL_S)


def load_columns(host_load: Any) -> dict[str, Any]:
    """The runs frame's columns of a record's ``host_load``: ``other_cpu_share`` and
    ``cpu_wait_share`` of its busiest machine, and ``cpu_slowed`` (:func:`slowed`)."""
    b = busiest_machine(host_load)
    return {
        "other_cpu_share": b["share"] if b else None,
        "cpu_wait_share": b["wait_share"] if b else None,
        "cpu_slowed": slowed(host_load),
    }


def slowed_runs(runs: pd.DataFrame) -> pd.Series:
    """Per row of a runs frame, whether other programs slowed the run (its ``cpu_slowed``;
    False where not recorded, and for a frame without the column)."""
    if "cpu_slowed" not in runs.columns:
        return pd.Series(False, index=runs.index, dtype=bool)
    return runs["cpu_slowed"].fillna(False).astype(bool)


def _phrase(row: Any, beside: set[Any]) -> str:
    b = busiest_machine(row.get("host_load"))
    assert b is not None
    where = ", ".join(str(n) for n in b.get("nodes") or ()) or "its machine"
    other_cores = b["other_cpu_s"] / b["wall_s"]
    wait = (
        ""
        if b["wait_share"] is None
        else f", its threads waiting for a core {b['wait_share']:.0%} as long as they ran"
    )
    also = " (also timed beside another job: above)" if row.name in beside else ""
    shape = shape_label(row.get("nodes"), row.get("devices_per_node"))
    return (
        f"job {row.get('job_id')} ({shape}) on {where}: {other_cores:.1f} of "
        f"{int(b['cores'])} core(s) ({b['share']:.0%}){wait}{also}"
    )


def cpu_load_notes(runs: pd.DataFrame, overlaps: pd.DataFrame, limit: int = NOTE_ROWS) -> list[str]:
    """The "Read this first" sentence: the runs other programs slowed (:func:`slowed`), the
    busiest first; those ``overlaps`` names (timed beside another of these jobs) say so. None
    without such runs."""
    hit = runs[slowed_runs(runs)]
    if hit.empty:
        return []
    share = pd.to_numeric(hit["other_cpu_share"], errors="coerce")
    hit = hit.assign(_s=share).sort_values("_s", ascending=False, kind="stable")
    beside = set(overlaps["row"]) if not overlaps.empty else set()
    said = [_phrase(r, beside) for _, r in hit.head(limit).iterrows()]
    if len(hit) > limit:
        said.append(f"and {len(hit) - limit} more (the runs table's Other load column)")
    return [
        f"{len(hit)} run(s) were slowed by other programs on their cores (the share of the "
        f"cores their ranks could use, on average over training): {'; '.join(said)}. Their "
        "ranks got less CPU than they would alone, and the breakdown counts that as compute: "
        "rerun them on an idle machine (on Slurm, nodes of their own: the cluster profile's "
        "`exclusive: true`; a local cluster's nodes share this machine's cores, so one job at "
        "a time there)."
    ]


__all__ = [
    "MIN_WALL_S",
    "NOTE_ROWS",
    "OTHER_SHARE",
    "WAIT_SHARE",
    "cpu_load_notes",
    "load_columns",
    "slowed",
    "slowed_runs",
]
