"""What the reader makes of the files (:mod:`analysis.read.parse`): a finished job's run
(:class:`Run`), a job with no result and why (:class:`Failure`), all of them with the problems
met on the way (:class:`ParseResult`); and what one job and one run are (:class:`JobKey`,
:func:`run_key`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from analysis.read.failures.cause import Diagnosis
from analysis.read.files import Problem
from analysis.read.manifest import PlannedJob
from scalescope.record import Identity, ResultRecord


@dataclass(frozen=True)
class Run:
    """One finished job: its final result and where it was read from."""

    record: ResultRecord
    sources: tuple[str, ...]
    restart_reasons: tuple[str, ...] = ()
    """Why earlier attempts of a requeued job stopped, where their logs say so."""


@dataclass(frozen=True)
class Failure:
    """A job with no result: what it was (if a start event says) and why it stopped."""

    job_id: str
    identity: Identity | None
    restart_count: int
    diagnosis: Diagnosis
    files: tuple[str, ...]
    planned: PlannedJob | None = None
    """The sweep manifest's entry, for a job known only from it."""


@dataclass
class ParseResult:
    runs: list[Run] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files_read: int = 0
    sweep_commands: dict[str, str] = field(default_factory=dict)
    """Sweep id -> the command line that submitted it (its manifest's), where recorded."""


def run_key(identity: Identity) -> str:
    """What makes a run unique: its UUID; records from before UUIDs existed fall back to the
    run id on its cluster."""
    return identity.run_uuid or f"{identity.cluster or ''}:{identity.run_id}"


class JobKey(NamedTuple):
    """One job: its id on its cluster in its sweep. Two clusters' job 1234 are two jobs, and
    so is an id a cluster handed out again in another sweep; a requeued job's attempts share
    all three. A log known by its name only has the id alone (cluster and sweep empty)."""

    job_id: str
    cluster: str = ""
    sweep: str = ""


def job_key(identity: Identity) -> JobKey:
    return JobKey(identity.job_id, identity.cluster or "", identity.sweep_id or "")
