"""Which of a job's symptoms is the cause (:func:`diagnose`), from the :class:`Evidence` that
:mod:`.classify` read off its logs: the earliest error of a log, and between logs
(whose lines cannot be ordered against each other) the more causal kind
(:data:`CAUSAL_ORDER`). Two kinds are printed after what they caused, so they win in a log
whatever came before them: outside events (:data:`OUTSIDE_EVENTS`: a node failure, a
preemption, a requeue), which nothing the job printed can have caused, and Slurm's host OOM
kill, reported when the step ends, after the peers' collective errors and timeouts
(:data:`PRINTED_LATE`). Everything else the job printed is listed as a consequence with its
file and line. srun's task exits are always consequences: they only say that a task ended,
after whatever ended it; so is Slurm's note that a step reached its memory limit at some point
(printed at its end whether or not anything was killed). Slurm's kill at a time limit, or at a
cancel, makes the ranks still in a collective see their peers go: their collective errors, in
their own logs, are the kill's consequences unless something shows a rank failed before it
(:func:`_killed_by`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from analysis.read.failures.classify import REASONS, Evidence
from analysis.read.failures.collective_lines import names_late_ranks

CAUSAL_ORDER = (
    # outside events: nothing the job printed can have caused them (they win within a log
    # too: OUTSIDE_EVENTS)
    "node_failure",
    "preemption",
    "requeue",
    # a GPU's hardware failed under the job (OUTSIDE_EVENTS)
    "gpu_fault",
    # a user's Ctrl-C (SIGINT): what other ranks print after it follows from it
    "interrupted",
    # the job's own errors
    "config_error",
    "rendezvous_error",
    "port_in_use",
    # printed when the step ends, after the collective errors it causes (PRINTED_LATE)
    "host_oom",
    "cuda_oom",
    # a GPU kernel's fault, or a torch build or driver that does not fit the GPU: the job's
    # (the peers then see a collective error)
    "cuda_error",
    # the job's resources: what its workers and writes ran out of
    "shared_memory",
    "disk_full",
    # a DataLoader worker that crashed or exited: its error went with it (the main process
    # then raises "exited unexpectedly")
    "worker_died",
    # ranks that called different collectives (uneven data: one ran more steps): a bug of the
    # job, which the other ranks see as a closed connection or a timeout
    "collective_mismatch",
    "exception",
    "rendezvous_timeout",
    # what the other ranks see when one of them died or hangs (or when Slurm's kill at a
    # time limit or a cancel took a peer first: _killed_by)
    "collective_error",
    "collective_timeout",
    # what ends a hung job
    "cancelled",
    "time_limit",
    "exit_code",
    # Slurm's note that a step reached its memory limit (CONSEQUENCE_ONLY: not a kill)
    "memory_limit",
    # a sweep manifest's job that nothing else speaks for (never matched in a log)
    "never_started",
    "log_missing",
    # a record that trained nothing (read from the record, never from a log)
    "no_measurement",
    "unknown",
)
"""Which of two symptoms is the cause when their order is unknown (they are in different
logs) or equal (one line, two readings: the more specific one comes first here). Within one
log the earliest is the cause, but for :data:`OUTSIDE_EVENTS` and :data:`PRINTED_LATE`."""

OUTSIDE_EVENTS = frozenset({"node_failure", "preemption", "requeue", "gpu_fault"})
"""Events from outside the job: nothing it printed can have caused them, so in a log they win
over every earlier line of another kind (the ranks' watchdog timeouts and tracebacks while a
node was failing, a harmless traceback long before a preemption). Of two, the earliest."""

PRINTED_LATE: dict[str, frozenset[str]] = {
    # slurmstepd reports a cgroup OOM kill ("Detected 1 oom_kill event in StepId=...") when
    # the step ends: after the peers of the killed task saw their connections close or timed
    # out, and after srun reported the tasks' exits
    "host_oom": frozenset({"collective_error", "collective_timeout", "exit_code"}),
    # NCCL explains its error below it ("NCCL error in: ..., unhandled cuda error" then "Last
    # error: Cuda failure 'out of memory'", or "invalid usage" then "Duplicate GPU detected");
    # and in a log that all ranks share, the failing rank's traceback may reach the log after
    # its peers' collective errors
    "cuda_oom": frozenset({"collective_error"}),
    "cuda_error": frozenset({"collective_error"}),
}
"""Kinds printed after the symptoms they cause: in a log, each wins over an earlier line of
the kinds it lists."""

CONSEQUENCE_ONLY = frozenset({"exit_code", "memory_limit"})
"""Never a root cause while anything else is known, even when printed first: srun reports a
task's exit as soon as it happens, while the dying task's own traceback may still be in a
buffer on its way to the log; Slurm notes that a step reached its memory limit at some point
when it ends, whether or not anything was killed."""

_RANK = {code: i for i, code in enumerate(CAUSAL_ORDER)}


def _causal_rank(ev: Evidence) -> tuple[int, int]:
    """Where a log's cause stands between logs (:data:`CAUSAL_ORDER`). A monitored barrier's
    timeout names the ranks that did not arrive, so it stands just before the collective
    errors: the late rank's own "Connection closed by peer" is the barrier's peer giving up
    on it (torch 2.13, gloo: a rank three seconds late for a one-second barrier)."""
    if names_late_ranks(ev.code, ev.detail):
        return (_RANK["collective_error"], 0)
    return (_RANK.get(ev.code, len(_RANK)), 1)


CLOCK_SLACK_S = 5.0
"""How much earlier than Slurm's cancel (at a time limit, or a user's) a line's own time must
be to count as before it: the cancel is stamped to the second, and another node's clock may
differ by a little."""

# An ISO date and time: Slurm's "CANCELLED AT 2026-01-01T10:00:00", submitit's and Python
# logging's "2026-01-01 10:00:00,000"; and PyTorch's c10 (glog) prefix "[E0101 10:00:00.000000
# 4242 ProcessGroupNCCL.cpp:1537]", which has no year
_ISO_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)")
_GLOG_TIME = re.compile(r"\[[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)")


@dataclass(frozen=True)
class Diagnosis:
    code: str
    label: str
    detail: str
    evidence: Evidence | None
    also_seen: tuple[str, ...]
    """Reason codes of the consequences, in their order (each once)."""
    consequences: tuple[Evidence, ...] = ()
    """Every other symptom the job printed, root cause's log first, each with its line."""


def _specific(ev: Evidence) -> tuple[bool, int]:
    """Of two readings of one line, the first is kept: an exception's name says less than
    what the message says (``RuntimeError: ... Connection closed by peer``)."""
    return (ev.code == "exception", _RANK.get(ev.code, len(_RANK)))


def _order(ev: Evidence) -> tuple[int, int]:
    return (ev.line_no, ev.offset)


def _aborted_by_srun(ev: Evidence, evidence: Sequence[Evidence]) -> bool:
    """A step cancelled with no reason after one of its tasks exited, in the same log: srun
    (``--kill-on-bad-exit``) cancelled the step because that task ended, so the cancellation
    is a consequence. It can reach the log before the surviving ranks' own errors, which are
    still in their buffers."""
    if ev.code != "cancelled" or not ev.detail.startswith("step ") or " due to " in ev.detail:
        return False
    return any(
        e.code == "exit_code" and e.file == ev.file and _order(e) < _order(ev) for e in evidence
    )


def _clock(line: str, near: datetime | None = None) -> datetime | None:
    """The wall-clock time a line carries, if any: an ISO date and time; given a time
    ``near`` it, also a glog prefix, in the year that puts it within half a year of ``near``
    (a job that ran over New Year)."""
    try:
        m = _ISO_TIME.search(line)
        if m is not None:
            return datetime(*map(int, m.groups()))
        m = _GLOG_TIME.search(line) if near is not None else None
        if m is None or near is None:
            return None
        at = datetime(near.year, *map(int, m.groups()))
        return at.replace(year=at.year - 1) if at - near > timedelta(days=183) else at
    except ValueError:  # no such date (0229 in another year, a month 13)
        return None


KILLS = frozenset({"time_limit", "cancelled"})
"""How Slurm ends a job from outside while its ranks run: at the time limit, and at a cancel
(scancel, or an administrator's). Either way it signals every task at once (:func:`_killed_by`)."""


def _killed_by(ev: Evidence, kill: Evidence, evidence: Sequence[Evidence]) -> bool:
    """Is ``ev``, a log's cause, what Slurm's kill (``kill``, another log's cause, with nothing
    printed before it there: :data:`KILLS`) made a peer print?

    At the limit, or at a cancel, Slurm signals every task; the first to die closes its
    connections, and the ranks still in a collective report a lost peer (gloo's closed
    connection, NCCL's remote error) in their own logs, whose lines cannot be ordered against
    the cancel's. The same error ends a job in which a rank died first and the rest hung until
    the kill; that
    rank then says so: its own error (which outranks both), srun's report of its exit before
    the cancel line (then ``kill`` is not the first line of its log), or a watchdog timeout
    (a hang of minutes). Otherwise the logs say one thing only: the job ran until Slurm ended
    it. So a collective error is the kill's, unless its own line says it came first: a time
    before the cancel's (:data:`CLOCK_SLACK_S`; PyTorch's c10 lines carry one, gloo's do
    not), or the kill after it in its own log."""
    if ev.code != "collective_error" or ev.file == kill.file:
        return False
    if any(e.code in KILLS and e.file == ev.file and _order(e) > _order(ev) for e in evidence):
        return False
    cancel = _clock(kill.line)
    at = _clock(ev.line, cancel) if cancel is not None else None
    return at is None or cancel is None or at > cancel - timedelta(seconds=CLOCK_SLACK_S)


def _kill_alone(causes: Sequence[Evidence], evidence: Sequence[Evidence]) -> Evidence | None:
    """A log's cause that is Slurm's kill (:data:`KILLS`) with no line of any kind before it
    in that log (not even a task's exit): as far as that log says, the job ran until Slurm
    ended it."""
    for cause in causes:
        if cause.code in KILLS and not any(
            e.file == cause.file and _order(e) < _order(cause) for e in evidence
        ):
            return cause
    return None


def _overrides(later: str, earlier: str) -> bool:
    """Is a line of kind ``later`` the cause over an earlier line of kind ``earlier`` in the
    same log?"""
    if later in OUTSIDE_EVENTS:
        return earlier not in OUTSIDE_EVENTS
    return earlier in PRINTED_LATE.get(later, ())


def _cause_in_log(events: Sequence[Evidence]) -> Evidence:
    """A log's cause: its earliest line, unless a later one is of a kind printed after what
    it caused (:data:`OUTSIDE_EVENTS`, :data:`PRINTED_LATE`)."""
    ordered = sorted(events, key=_order)
    cause = ordered[0]
    for ev in ordered[1:]:
        if _overrides(ev.code, cause.code):
            cause = ev
    return cause


def diagnose(evidence: Sequence[Evidence]) -> Diagnosis:
    """The root cause and its consequences.

    Within one log the earliest line wins (of two readings of one line, the more specific),
    but an outside event wins over any earlier line and a host OOM kill over earlier
    collective errors, timeouts and exits (:func:`_cause_in_log`); between logs, the more
    causal kind of each log's cause (:data:`CAUSAL_ORDER`; a monitored barrier's timeout
    before the collective errors, :func:`_causal_rank`), less the collective errors that
    Slurm's kill at a time limit or a cancel made the peers print (:func:`_killed_by`).
    :data:`CONSEQUENCE_ONLY` kinds, and a step srun aborted after a task exited, win only
    when nothing else is known. One line that reads
    two ways (``torch.OutOfMemoryError`` is also a Python exception) is listed once.
    """
    if not evidence:
        return Diagnosis(
            "unknown",
            REASONS["unknown"],
            "no result and no failure message: still running, or killed without a word",
            None,
            (),
        )
    by_line: dict[tuple[str, int], Evidence] = {}
    for ev in evidence:
        key = (ev.file, ev.line_no)
        if key not in by_line or _specific(ev) < _specific(by_line[key]):
            by_line[key] = ev
    unique = list(by_line.values())
    candidates = [
        e for e in unique if e.code not in CONSEQUENCE_ONLY and not _aborted_by_srun(e, unique)
    ] or unique
    per_log: dict[str, list[Evidence]] = {}
    for ev in candidates:
        per_log.setdefault(ev.file, []).append(ev)
    causes = [_cause_in_log(events) for events in per_log.values()]
    kill = _kill_alone(causes, unique)
    if kill is not None:
        causes = [c for c in causes if not _killed_by(c, kill, unique)]
    top = min(causes, key=lambda e: (_causal_rank(e), e.file, _order(e)))
    rest = sorted(
        (e for e in unique if e is not top),
        key=lambda e: (e.file != top.file, e.file, _order(e)),
    )
    codes = tuple(dict.fromkeys(e.code for e in rest))
    return Diagnosis(top.code, top.label, top.detail, top, codes, tuple(rest))
