"""The "Read this first" notes of what a user's module's job warned about its batch: the
record's ``batch.warnings`` (docs/your-module.md), such as ranks whose first training batches
were identical or a loader that did not yield the batch scalescope passed. Pure: no printing.

Said once per series and scale: each distinct warning, with how many of the scale's runs gave
it. Where the ranks may have trained on the same data (the record's
``batch.data.same_first_batch``), the note says the speedup is in doubt: throughput counts
every rank's samples, so N copies of the same batch count as N batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from analysis.compute.groups import DEFAULT_CONFIDENCE, series_scale_groups
from analysis.read.overlap import shape_label

IN_DOUBT = (
    "The speedup here is in doubt: throughput counts every rank's samples, and the ranks may "
    "have trained on the same ones (the same batch on N ranks is not N batches of data)."
)


def _sections(rows: pd.DataFrame) -> list[Mapping[str, Any]]:
    """The rows' ``batch`` sections (empty for built-in workloads and older records)."""
    if "batch" not in rows.columns:
        return []
    return [b if isinstance(b, Mapping) else {} for b in rows["batch"]]


def _warnings(section: Mapping[str, Any]) -> list[str]:
    found = section.get("warnings")
    return [w for w in found if isinstance(w, str) and w] if isinstance(found, list) else []


def _same_data(section: Mapping[str, Any]) -> bool:
    data = section.get("data")
    return isinstance(data, Mapping) and data.get("same_first_batch") is True


def batch_notes(runs: pd.DataFrame, confidence: float = DEFAULT_CONFIDENCE) -> list[str]:
    """One sentence per series and scale whose runs' records warned about their batch."""
    notes: list[str] = []
    if runs.empty or "batch" not in runs.columns:
        return notes
    for _key, label, members in series_scale_groups(runs, confidence):
        for g in members:
            sections = _sections(g.rows)
            counts: dict[str, int] = {}
            for section in sections:
                for warning in dict.fromkeys(_warnings(section)):  # once per run
                    counts[warning] = counts.get(warning, 0) + 1
            if not counts:
                continue
            said = "; ".join(f"{w} ({k} of {len(sections)} runs)" for w, k in counts.items())
            note = f"{label} at {shape_label(g.nodes, g.devices_per_node)}: the job warned: {said}."
            if g.world_size > 1 and any(_same_data(s) for s in sections):
                note += " " + IN_DOUBT
            notes.append(note)
    return notes
