"""A finished job that says something failed: rank 0 wrote a complete record, but another
rank's log ends with an error, or the sweep's manifest says the job failed (a task raised
after rank 0 was done). The record is complete, so the run is kept; a warning names the log
and the error, so that it is never counted in silence. A requeued job's logs also hold how
its earlier attempts ended (:func:`split_attempts`): those are its restart reasons, not a
failure of the attempt that finished."""

from __future__ import annotations

import os
from collections.abc import Sequence

from analysis.read.failures.cause import diagnose
from analysis.read.failures.classify import Evidence
from analysis.read.files import Problem
from analysis.read.manifest import PlannedJob

RESTART_KINDS = frozenset({"preemption", "requeue", "node_failure", "time_limit"})
"""What ends an attempt that is then requeued: never the end of an attempt that finished."""

KILL_ECHOES = frozenset({"exit_code", "cancelled"})
"""What srun and slurmstepd print right after a step was killed (its tasks' exits, the step
cancelled): the same attempt's end."""

NOTES = frozenset({"memory_limit"})
"""Kinds that are no failure of a finished job: Slurm's note that a step reached its memory
limit at some point (its end, whether or not anything was killed). An info, not a warning."""


def of_earlier_attempts(evidence: Sequence[Evidence], attempt: int) -> list[Evidence]:
    """The lines of attempts before ``attempt`` (each follows its attempt's start event in its
    file: :attr:`Evidence.attempt`)."""
    return [e for e in evidence if e.attempt is not None and e.attempt < attempt]


def of_attempt(evidence: Sequence[Evidence], attempt: int) -> list[Evidence]:
    """What says how ``attempt`` ended: its own lines and those tied to no attempt (a log
    without start events); every line where there are none."""
    return [e for e in evidence if e.attempt is None or e.attempt == attempt] or list(evidence)


def split_attempts(
    evidence: Sequence[Evidence], restart_count: int
) -> tuple[list[Evidence], list[Evidence]]:
    """(how earlier attempts ended, the rest) among the ends of a finished job's other logs.

    A requeued job's logs hold every attempt (submitit and ``--open-mode=append`` append to
    them). A line of an attempt before ``restart_count`` is an earlier attempt's, and so, in a
    log whose lines are not tied to attempts, is every line up to its last line of a kind that
    requeues a job (:data:`RESTART_KINDS`) with the tasks' exits and step cancellations printed
    right after it (:data:`KILL_ECHOES`): the attempt that finished was not ended by one. A job
    that ran once (``restart_count`` 0) has no earlier attempt."""
    if restart_count == 0:
        return [], list(evidence)
    earlier = of_earlier_attempts(evidence, restart_count)
    by_file: dict[str, list[Evidence]] = {}
    for ev in evidence:
        if ev.attempt is None:
            by_file.setdefault(ev.file, []).append(ev)
    for events in by_file.values():
        events.sort(key=lambda e: (e.line_no, e.offset))
        ends = [i for i, e in enumerate(events) if e.code in RESTART_KINDS]
        if not ends:
            continue
        last = ends[-1] + 1
        while last < len(events) and events[last].code in KILL_ECHOES:
            last += 1
        earlier += events[:last]
    ids = {id(e) for e in earlier}
    return earlier, [e for e in evidence if id(e) not in ids]


def finished_with_errors(
    job_id: str, evidence: Sequence[Evidence], planned: PlannedJob | None
) -> Problem | None:
    """The warning for a finished job whose other logs (``evidence``: their ends, an earlier
    attempt's taken out by :func:`split_attempts`) or manifest entry (``planned``) say it
    failed; an info for a note only (:data:`NOTES`); None when nothing is said."""
    notes = [e for e in evidence if e.code in NOTES]
    evidence = [e for e in evidence if e.code not in NOTES]
    found = diagnose(evidence) if evidence else None
    cause = found.evidence if found is not None else None
    said = None
    if planned is not None and planned.failed:
        why = f" ({planned.detail})" if planned.detail else ""
        said = f"{os.path.basename(planned.manifest)} says {planned.state}{why}"
    if cause is None and said is None:
        if not notes:
            return None
        note = notes[0]
        message = f"job {job_id} finished and its record is kept; {note.where} says {note.detail}"
        return Problem(note.file, message, severity="info")
    parts = [f"{cause.where} says {cause.label}: {cause.detail}"] if cause is not None else []
    parts += [said] if said is not None else []
    where = cause.file if cause is not None else planned.manifest if planned else ""
    return Problem(where, f"job {job_id} finished and its record is kept, but " + "; ".join(parts))
