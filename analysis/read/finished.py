"""A finished job that says something failed: rank 0 wrote a complete record, but another
rank's log ends with an error, or the sweep's manifest says the job failed (a task raised
after rank 0 was done). The record is complete, so the run is kept; a warning names the log
and the error, so that it is never counted in silence."""

from __future__ import annotations

import os
from collections.abc import Sequence

from analysis.read.cause import diagnose
from analysis.read.classify import Evidence
from analysis.read.files import Problem
from analysis.read.manifest import PlannedJob


def finished_with_errors(
    job_id: str, evidence: Sequence[Evidence], planned: PlannedJob | None
) -> Problem | None:
    """The warning for a finished job whose other logs (``evidence``: their ends) or
    manifest entry (``planned``) say it failed; None when neither does."""
    found = diagnose(evidence) if evidence else None
    cause = found.evidence if found is not None else None
    said = None
    if planned is not None and planned.failed:
        why = f" ({planned.detail})" if planned.detail else ""
        said = f"{os.path.basename(planned.manifest)} says {planned.state}{why}"
    if cause is None and said is None:
        return None
    parts = [f"{cause.where} says {cause.label}: {cause.detail}"] if cause is not None else []
    parts += [said] if said is not None else []
    where = cause.file if cause is not None else planned.manifest if planned else ""
    return Problem(where, f"job {job_id} finished and its record is kept, but " + "; ".join(parts))
