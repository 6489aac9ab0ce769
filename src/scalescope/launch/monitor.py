"""The job-handle side of a sweep: where each job stands, what it returned, how to stop it.

State comes from the scheduler (``squeue``, then ``scontrol show job`` once a job left the
queue, then submitit's ``sacct`` watcher where accounting exists) or from the local
process; the *outcome* of a finished job comes from submitit's per-task result pickles. A
job that the scheduler calls COMPLETED but that left no result record is reported FAILED:
failures stay visible, never dropped. Nothing here prints.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ..record import ResultRecord
from .executor import JobHandle, Launcher
from .slurm_info import pending_note
from .sweep_config import SweepPlan

WAITING = "WAITING"
"""Local runs not started yet (they run one at a time)."""
PENDING, RUNNING, COMPLETED, FAILED, CANCELLED = (
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
)
# Slurm states in which a job may still run (squeue's long names).
ACTIVE = {
    WAITING,
    PENDING,
    RUNNING,
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SUSPENDED",
    "STOPPED",
    "SIGNALING",
    "STAGE_OUT",
    "PREEMPTED",
}


@dataclass
class JobStatus:
    state: str = WAITING
    elapsed_s: float | None = None
    detail: str | None = None
    """Why a job failed (the exception line, the scheduler's reason), or None."""
    record: ResultRecord | None = None
    started_at: float | None = None
    ended_at: float | None = None
    task: int | None = None
    """The task whose error ``detail`` gives (its log says more), or None."""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def ok(self) -> bool:
        return self.state == COMPLETED


# --- outcome from submitit's result pickles ----------------------------------------------------


def _last_line(trace: str) -> str:
    lines = [ln.strip() for ln in str(trace).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "failed without a message"


_TRACE_RULE = re.compile(r"^-{10,}$", re.MULTILINE)


def _trace_of(error: BaseException) -> str:
    """The job's own traceback inside submitit's FailedJobError text (between its rules)."""
    parts = _TRACE_RULE.split(str(error))
    return parts[1] if len(parts) >= 3 else str(error)


_PEER_LOST = re.compile(
    r"Connection (?:closed|reset) by (?:remote )?peer"  # gloo: a peer process died
    r"|DistBackendError|NCCL error|\bnccl(?:Remote|System|Internal)Error\b"  # NCCL: the same
    r"|collective operation timeout|before timing out"  # NCCL's watchdog: a peer hangs
    r"|Timed out waiting \d+ ?ms for (?:recv|send)"  # gloo: the same
)
"""What a task raises when another task died or hung: the other's side effect, never its
own cause. The rule of the FAILED line: a task's own error is named before any task's lost
peer, in task order within each kind. The summary orders every cause in full from the logs
(analysis/read/failures/cause.py, CAUSAL_ORDER, whose collective errors these lines are)."""


def read_outcome(
    handle: JobHandle,
) -> tuple[str | None, str | None, ResultRecord | None, int | None]:
    """(COMPLETED/FAILED or None when no task left a result, detail, rank 0's record, the
    task the detail is about). A failed job's detail is its cause (:data:`_PEER_LOST`).

    Through submitit's public Job API: a task whose result file exists is done, so
    ``exception()`` and ``result()`` answer at once without polling the scheduler.
    """
    job = handle.job
    assert job is not None
    record: ResultRecord | None = None
    found = 0
    errors: list[tuple[int, str]] = []
    for task in range(job.num_tasks):
        sub = job.task(task)
        if not Path(sub.paths.result_pickle).exists():
            continue
        found += 1
        try:
            error = sub.exception()
            value = None if error is not None else sub.result()
        except Exception as exc:  # a truncated or unreadable pickle is a failure, not a crash
            errors.append((task, f"unreadable result ({type(exc).__name__})"))
            continue
        if error is not None:
            errors.append((task, _last_line(_trace_of(error))))
        elif task == 0:
            record = value if isinstance(value, ResultRecord) else None
    if errors:
        own = [e for e in errors if not _PEER_LOST.search(e[1])]
        task, line = (own or errors)[0]
        return FAILED, f"task {task}: {line}", None, task
    if found == 0:
        return None, None, None, None
    if found < job.num_tasks:
        return FAILED, f"only {found} of {job.num_tasks} tasks finished", record, None
    if record is None:
        return FAILED, "rank 0 returned no result record", None, 0
    return COMPLETED, None, record, None


# --- Slurm state ------------------------------------------------------------------------------


def _parse_elapsed(text: str) -> float | None:
    """squeue's %M: ``[days-][hours:]minutes:seconds``."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text.strip())
    if not m:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


CLIENT_TIMEOUT_S = 30.0


def _ask_slurm(
    argv: list[str], timeout_s: float = CLIENT_TIMEOUT_S
) -> subprocess.CompletedProcess[str] | None:
    """A Slurm client's output (``timeout_s`` at most); None when it could not run or timed
    out."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def squeue_states(
    job_ids: Iterable[str], timeout_s: float = CLIENT_TIMEOUT_S
) -> dict[str, tuple[str, float | None, str | None]] | None:
    """{job id: (state, elapsed_s, reason)} for jobs still known to squeue (the reason a job
    pends, or None); None when squeue failed."""
    wanted = sorted({j.split("_")[0] for j in job_ids})
    if not wanted:
        return {}
    proc = _ask_slurm(
        ["squeue", "--noheader", "--array", "--format=%i|%T|%M|%r", "--jobs", ",".join(wanted)],
        timeout_s,
    )
    if proc is None:
        return None
    if proc.returncode != 0:
        # squeue refuses a list of only finished (purged) ids: "Invalid job id specified".
        return {} if "Invalid job id" in proc.stderr else None
    return parse_squeue(proc.stdout)


def parse_squeue(text: str) -> dict[str, tuple[str, float | None, str | None]]:
    """squeue's ``%i|%T|%M|%r`` lines (the reason last: it may hold commas)."""
    out: dict[str, tuple[str, float | None, str | None]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4:
            reason = parts[3].strip()
            out[parts[0]] = (
                parts[1].upper(),
                _parse_elapsed(parts[2]),
                reason if reason and reason != "None" else None,
            )
    return out


def scontrol_state(
    job_id: str, timeout_s: float = CLIENT_TIMEOUT_S
) -> tuple[str, str | None] | None:
    """(JobState, Reason) of a job that left the queue, while slurmctld still remembers it."""
    proc = _ask_slurm(["scontrol", "--oneliner", "show", "job", job_id], timeout_s)
    if proc is None:
        return None
    state = re.search(r"\bJobState=(\S+)", proc.stdout)
    if proc.returncode != 0 or not state:
        return None
    reason = re.search(r"\bReason=(\S+)", proc.stdout)
    why = reason.group(1) if reason and reason.group(1) != "None" else None
    return state.group(1).upper(), why


def _finish(status: JobStatus, handle: JobHandle, scheduler_state: str | None) -> None:
    """Settle a job that is no longer running: outcome from the pickles, else the scheduler."""
    outcome, detail, record, task = read_outcome(handle)
    status.ended_at = status.ended_at or time.time()
    if outcome == COMPLETED:
        status.state, status.detail, status.record = COMPLETED, None, record
        return
    if outcome == FAILED:
        status.state, status.detail, status.record, status.task = FAILED, detail, record, task
        return
    # No result pickle: the job died outside Python (time limit, OOM kill, node failure, scancel).
    if scheduler_state and scheduler_state not in (COMPLETED, "UNKNOWN"):
        status.state = scheduler_state
        status.detail = status.detail or "no result; see the log"
    else:
        status.state = FAILED
        status.detail = "ended without a result; see the log"


def _sbatch_said(exc: Exception) -> str:
    """A refused submission in one line: sbatch's error lines (``CPU count per node can not
    be satisfied; Batch job submission failed: ...``), else the error's last line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    errors = [ln.split("error:", 1)[1].strip() for ln in lines if "error:" in ln]
    if errors:
        return "sbatch: " + "; ".join(dict.fromkeys(e for e in errors if e))
    return lines[-1] if lines else type(exc).__name__


# --- the sweep being watched ------------------------------------------------------------------


class SweepWatch:
    """Submits (local: as slots free up), polls and cancels the jobs of one sweep."""

    def __init__(self, plan: SweepPlan, launcher: Launcher, *, max_parallel: int = 1) -> None:
        self.plan = plan
        self.launcher = launcher
        self.max_parallel = max(1, max_parallel)
        self.handles = launcher.handles()
        self.status: dict[int, JobStatus] = {id(h): JobStatus() for h in self.handles}
        self.cancelled: list[JobHandle] = []

    # views
    def status_of(self, handle: JobHandle) -> JobStatus:
        return self.status[id(handle)]

    def rows(self) -> list[tuple[JobHandle, JobStatus]]:
        return [(h, self.status_of(h)) for h in self.handles]

    @property
    def finished(self) -> bool:
        return not any(s.active for s in self.status.values())

    @property
    def failed(self) -> list[tuple[JobHandle, JobStatus]]:
        return [(h, s) for h, s in self.rows() if not s.active and not s.ok]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.status.values():
            out[s.state] = out.get(s.state, 0) + 1
        return out

    # submission
    def submit_slurm(self) -> None:
        """Every run now, in the plan's order. A refused sbatch cancels what went before; each
        job's status then says what became of it (cancelled with its id, or not submitted)."""
        done: list[JobHandle] = []
        cap = self.launcher.max_parallel
        for i, h in enumerate(self.handles):
            after = done[i - cap].job_id if cap and i >= cap else None
            try:
                self.launcher.submit_slurm(h, after=after)
            except Exception as exc:
                first = _sbatch_said(exc)
                raise self._abandon(
                    done, f"submitting shape {h.label} repeat {h.repeat} failed", first
                ) from exc
            self.status_of(h).state = PENDING
            done.append(h)

    def _abandon(self, done: list[JobHandle], what: str, why: str) -> Exception:
        """Cancel the jobs submitted before a refused one, mark every job with what became of
        it, and return the error that says so."""
        from ..errors import ScalescopeError

        stopped, kept = [], []
        for d in done:
            st = self.status_of(d)
            try:
                d.job.cancel(check=True)  # type: ignore[union-attr]
            except Exception:
                st.detail = f"{what}; not cancelled: scancel {d.job_id} stops it"
                kept.append(str(d.job_id))
                continue
            st.state, st.detail, st.ended_at = CANCELLED, f"cancelled: {what}", time.time()
            stopped.append(str(d.job_id))
        for h in self.handles:
            if h.job is None:
                st = self.status_of(h)
                st.state, st.detail = CANCELLED, f"not submitted: {why}"
        said = f"{what}: {why}"
        if stopped:
            jobs = "jobs" if len(stopped) > 1 else "job"
            said += f"; cancelled {jobs} {' '.join(stopped)}, already submitted"
        if kept:
            said += f"; could not cancel {' '.join(kept)} (scancel {' '.join(kept)} stops them)"
        return ScalescopeError(f"{said}; states in {self.plan.sweep_dir / 'sweep.json'}")

    def _start_local(self) -> None:
        running = sum(1 for s in self.status.values() if s.active and s.state != WAITING)
        for h in self.handles:
            if running >= self.max_parallel:
                return
            st = self.status_of(h)
            if st.state == WAITING:
                self.launcher.submit_one(h)
                st.state, st.started_at = RUNNING, time.time()
                running += 1

    # polling
    def poll(self) -> list[JobHandle]:
        """Refresh every active job (and start local runs as slots free up); returns those
        whose state or detail (a pending reason) changed."""

        def seen(h: JobHandle) -> tuple[str, str | None]:
            st = self.status_of(h)
            return st.state, st.detail

        before = {id(h): seen(h) for h in self.handles}
        if self.plan.executor == "local":
            self._poll_local()
            self._start_local()
        else:
            self._poll_slurm()
        return [h for h in self.handles if seen(h) != before[id(h)]]

    def _poll_local(self) -> None:
        now = time.time()
        for h in self.handles:
            st = self.status_of(h)
            if h.job is None or not st.active:
                continue
            if st.started_at is not None:
                st.elapsed_s = now - st.started_at
            if h.job.state == RUNNING:
                continue
            _finish(st, h, None)
            st.elapsed_s = (st.ended_at or now) - (st.started_at or now)

    def refresh(self, timeout_s: float) -> str | None:
        """Slurm: one look at every active job's state that takes ``timeout_s`` at most (an
        interrupted sweep's last word on its jobs). Returns None when Slurm said where every
        job stands, else why some states are the last seen ones."""
        if self.plan.executor == "local":
            return None
        return self._poll_slurm(deadline=time.monotonic() + timeout_s)

    def _poll_slurm(self, deadline: float | None = None) -> str | None:
        """Refresh the active jobs from squeue, then scontrol (then sacct, unless bounded by
        ``deadline``); returns why some states were kept as last seen, or None."""

        def left() -> float:
            if deadline is None:
                return CLIENT_TIMEOUT_S
            return min(CLIENT_TIMEOUT_S, deadline - time.monotonic())

        active = [h for h in self.handles if h.job is not None and self.status_of(h).active]
        if not active:
            return None
        queue = squeue_states((h.job_id or "" for h in active), left()) if left() > 0 else None
        if queue is None:
            return "squeue did not answer"  # keep the last known states
        now = time.time()
        unknown: list[str] = []
        for h in active:
            st = self.status_of(h)
            assert h.job_id is not None
            if h.job_id in queue:
                st.state, elapsed, reason = queue[h.job_id]
                st.detail = pending_note(h.job_id, st.state, reason)
                if st.state == RUNNING and st.started_at is None:
                    st.started_at = now
                st.elapsed_s = elapsed if elapsed is not None else st.elapsed_s
                continue
            found = scontrol_state(h.job_id, left()) if left() > 0 else None
            if found is None and deadline is not None:
                unknown.append(h.job_id)  # sacct may take its time: not when bounded
                continue
            scheduler_state = found[0] if found else _sacct_state(h)
            if scheduler_state in ACTIVE:
                st.state = scheduler_state
                continue
            if found and found[1]:
                st.detail = f"{scheduler_state} ({found[1]})"
            _finish(st, h, scheduler_state)
        return f"no answer about job(s) {' '.join(unknown)}" if unknown else None

    # stopping
    def cancel(self, *, grace_s: float = 10.0) -> tuple[list[JobHandle], list[JobHandle]]:
        """Cancel running jobs, drop the ones not started; returns (cancelled, never started)."""
        running = [h for h in self.handles if h.job is not None and self.status_of(h).active]
        never = [h for h in self.handles if h.job is None and self.status_of(h).active]
        if self.plan.executor == "local":
            stop_local(running, grace_s)
        else:
            for h in running:
                with contextlib.suppress(Exception):
                    h.job.cancel(check=False)  # type: ignore[union-attr]
        cancelled = []
        for h in running:
            st = self.status_of(h)
            outcome, _, record, _ = read_outcome(h)
            if outcome == COMPLETED:  # it finished in the moment before the cancel
                st.state, st.record = COMPLETED, record
            else:
                st.state, st.detail = CANCELLED, "cancelled (interrupted)"
                cancelled.append(h)
            st.ended_at = time.time()
        for h in never:
            self.status_of(h).state = CANCELLED
            self.status_of(h).detail = "not started (interrupted)"
        self.cancelled = cancelled
        return cancelled, never


def _sacct_state(handle: JobHandle) -> str | None:
    """submitit's sacct-based state; None without accounting (submitit then warns)."""
    try:
        state = str(handle.job.state).upper()  # type: ignore[union-attr]
    except Exception:
        return None
    state = state.split()[0] if state else "UNKNOWN"  # "CANCELLED by 0" -> CANCELLED
    return None if state == "UNKNOWN" else state


# --- local process clean-up -------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, float]]:
    """{pid: (ppid, create time)} of every process psutil can see."""
    table: dict[int, tuple[int, float]] = {}
    for proc in psutil.process_iter(["ppid", "create_time"]):
        ppid, created = proc.info["ppid"], proc.info["create_time"]
        if ppid is not None and created is not None:
            table[proc.pid] = (ppid, created)
    return table


def _descendants(pid: int) -> dict[int, float]:
    """{pid: create time} of every descendant of ``pid``."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(child)
    out: dict[int, float] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out[child] = table[child][1]
            todo.append(child)
    return out


CONTROLLER_STOP_S = 2.0
"""A controller that got the terminal's Ctrl-C itself stops its tasks within about a second."""


def stop_local(handles: Sequence[JobHandle], grace_s: float) -> None:
    """Stop local jobs and every process they started.

    submitit's cancel sends SIGINT to a job's controller, which stops its tasks (SIGINT, then
    SIGKILL after a second). A Ctrl-C typed in the terminal reached the controllers too (same
    process group) and a second SIGINT would interrupt that clean-up half-way: give them a
    moment first, cancel the ones still running, and kill whatever is left after ``grace_s``.
    """
    procs: list[tuple[JobHandle, Any]] = [
        (h, p) for h in handles if (p := getattr(h.job, "_process", None)) is not None
    ]
    tree: dict[int, float] = {}
    for _, p in procs:
        tree.update(_descendants(p.pid))
    deadline = time.monotonic() + CONTROLLER_STOP_S
    while any(p.poll() is None for _, p in procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    for h, p in procs:
        if p.poll() is None:
            with contextlib.suppress(Exception):
                h.job.cancel(check=False)  # type: ignore[union-attr]
    deadline = time.monotonic() + grace_s
    for _, p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    # Tasks orphaned by a controller that died first; the start time guards against pid reuse.
    alive = _proc_table()
    for pid, started in tree.items():
        if pid in alive and alive[pid][1] == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
