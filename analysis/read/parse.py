"""Find result records and failed jobs in Slurm logs and run directories.

The files (:mod:`analysis.read.files`) are read one by one, across processes when there are
many (:mod:`analysis.read.scan`: the events of every file, then failure evidence where a job
needs it). Then :func:`parse` turns events into jobs: duplicates of one run (its log and its
``result.json``) collapse into one, a requeued job that finished counts once with its
restart count, and a job with a start event (or a job log with a failure message) but no
result becomes a failure with the evidence line that explains it. Nothing here raises on
a bad file: every problem is returned, with its file name, next to the records.
"""

from __future__ import annotations

import gc
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import TypeVar

from analysis.read.failures.cause import Diagnosis, diagnose
from analysis.read.failures.classify import REASONS, Evidence
from analysis.read.failures.finished import (
    finished_with_errors,
    of_attempt,
    of_earlier_attempts,
    split_attempts,
)
from analysis.read.files import RESULT_JSON, Problem, discover
from analysis.read.jobs import Failure, JobKey, ParseResult, Run, job_key, run_key
from analysis.read.manifest import PlannedJob
from analysis.read.scan import (
    FileScan,
    evidence_scan,
    scan_file,
    tail_evidence_scan,
)
from scalescope.record import Identity, ResultRecord, StartEvent

_TRAILING_NUMBER = re.compile(r"(?:^|\D)(\d+)$")

T = TypeVar("T")
R = TypeVar("R")


# --- assembling jobs ------------------------------------------------------------------------


def _comparable(record: ResultRecord) -> dict[str, object]:
    data = record.to_dict()
    data.pop("tracking", None)
    return data


def _array_alias(identity: Identity) -> str | None:
    if identity.array_job_id and identity.array_task_id is not None:
        return f"{identity.array_job_id}_{identity.array_task_id}"
    return None


class _Assembler:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.results: dict[str, tuple[ResultRecord, list[str]]] = {}
        self.starts: dict[JobKey, dict[int, StartEvent]] = defaultdict(dict)
        self.evidence: dict[JobKey, list[Evidence]] = defaultdict(list)
        self.job_files: dict[JobKey, set[str]] = defaultdict(set)
        self.names: dict[str, set[JobKey]] = defaultdict(set)
        """The jobs a name in a file name or a manifest can mean: a job id, an array task."""
        self.weak_names: dict[str, set[JobKey]] = defaultdict(set)
        """The same for the number a job id ends in (``local-301``: submitit's pid), used
        when no job has that name itself."""
        self.hinted: list[FileScan] = []
        self.after_record: dict[JobKey, list[Evidence]] = defaultdict(list)
        """What the ends of a finished job's other logs (other ranks') say."""
        self.broken_files: set[str] = set()
        self.broken_jobs: set[JobKey] = set()
        """Jobs known only by a log whose event line is broken (cut inside its start event)."""
        self.planned: list[PlannedJob] = []
        self.planned_ids: set[str] = set()
        """The job ids the manifests name."""
        self.shapes: dict[JobKey, PlannedJob] = {}
        """What an sbatch job's first line says it was, by job."""
        self.unplanned: list[Failure] = []
        """Jobs a sweep manifest lists that left no record and no failure message."""

    def _key(self, identity: Identity) -> JobKey:
        key = job_key(identity)
        self.names[key.job_id].add(key)
        alias = _array_alias(identity)
        if alias:
            self.names[alias].add(key)
        # submitit's local jobs are named by pid in file names and "local-<pid>" in records
        m = _TRAILING_NUMBER.search(key.job_id)
        if m and m.group(1) != key.job_id:
            self.weak_names[m.group(1)].add(key)
        return key

    def named(self, name: str) -> set[JobKey]:
        """The jobs ``name`` (a job id, an array task, a pid) can mean."""
        return self.names.get(name) or self.weak_names.get(name) or set()

    def _reading(self, scan: FileScan) -> str:
        """The job id a log's name carries: of a name's two readings (an array task, or a job
        after a name ending in a number: :func:`analysis.read.scan.job_hints`), the one that a
        job's events or a sweep's manifest names, where only that one is named; else the
        likelier."""
        hint, other = scan.hint or "", scan.other_hint
        if other is not None and not self._known_name(hint) and self._known_name(other):
            return other
        return hint

    def _known_name(self, name: str) -> bool:
        return bool(self.named(name)) or name in self.planned_ids

    def _hint_key(self, scan: FileScan) -> JobKey | None:
        """The job a log known by its name only belongs to (:meth:`_reading`): the one job
        of that id, else the one whose files are nearest (in its folder, else the longest
        shared path); its id alone when no job has it; None when jobs of that id are equally
        near (a problem)."""
        hint = self._reading(scan)
        keys = sorted(self.named(hint))
        if len(keys) <= 1:
            return keys[0] if keys else JobKey(hint)
        folder = os.path.dirname(scan.display)

        def nearness(key: JobKey) -> int:
            return max(
                (_shared_depth(folder, os.path.dirname(f)) for f in self.job_files.get(key, ())),
                default=-1,
            )

        best = max(nearness(k) for k in keys)
        near = [k for k in keys if nearness(k) == best]
        if len(near) == 1:
            return near[0]
        problem = Problem(
            scan.display,
            f"job id {hint} names {len(near)} jobs ("
            + ", ".join(_where(k) for k in near)
            + ") and this log is as near to each: not read for failure messages",
        )
        if problem not in self.problems:
            self.problems.append(problem)
        return None

    def add(self, scan: FileScan) -> None:
        self.problems.extend(scan.problems)
        self.planned.extend(scan.planned)
        self.planned_ids.update(job.job_id for job in scan.planned if job.job_id)
        # result.json first: it is written atomically, a log line may have been interleaved
        for _, event in scan.events:
            key = self._key(event.identity)
            self.job_files[key].add(scan.display)
            if isinstance(event, StartEvent):
                self.starts[key].setdefault(event.identity.restart_count, event)
                continue
            run_id = run_key(event.identity)
            if run_id not in self.results:
                self.results[run_id] = (event, [scan.display])
                continue
            kept, sources = self.results[run_id]
            sources.append(scan.display)
            if _comparable(kept) != _comparable(event):
                a, b = _comparable(kept), _comparable(event)
                differing = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
                # the headline quantities first: they are what a reader compares
                differing.sort(key=lambda k: (k != "train_time_s", k != "job_time_s"))
                shown = ", ".join(differing[:6]) + (", ..." if len(differing) > 6 else "")
                self.problems.append(
                    Problem(
                        scan.display,
                        f"run {event.identity.run_id} also in {sources[0]} with {len(differing)} "
                        "different "
                        f"value(s) ({shown}); kept the one from {sources[0]}",
                    )
                )
        if scan.after_record:  # what follows the log's last record: that job's other ranks
            last = [e for _, e in scan.events if isinstance(e, ResultRecord)][-1]
            self.after_record[self._key(last.identity)].extend(scan.after_record)
        if scan.evidence_scanned:
            keys = {self._key(e.identity) for _, e in scan.events}
            for key in keys:
                self.evidence[key].extend(scan.evidence)
        if scan.problems:
            self.broken_files.add(scan.display)
        if not scan.events and scan.hint is not None:
            self.hinted.append(scan)

    def finished_keys(self) -> set[JobKey]:
        """Jobs that ran to the end; a stopped job's log is still searched for the reason."""
        return {job_key(r.identity) for r, _ in self.results.values() if r.stop_reason is None}

    def pending(self) -> list[FileScan]:
        """Hinted logs without events whose job has no result: they need an evidence scan."""
        done = self.finished_keys()
        out = []
        for scan in self.hinted:
            key = self._hint_key(scan)
            if key is not None and key not in done:
                out.append(scan)
        return out

    def finished_logs(self) -> list[FileScan]:
        """Hinted logs without events whose job finished: the ends of other ranks' logs,
        searched for an error a rank printed while rank 0 wrote its record."""
        done = self.finished_keys()
        return [s for s in self.hinted if self._hint_key(s) in done]

    def add_after_record(self, scan: FileScan) -> None:
        self.problems.extend(p for p in scan.problems if p not in self.problems)
        key = self._hint_key(scan)
        if key is not None:
            self.job_files[key].add(scan.display)
            self.after_record[key].extend(scan.evidence)

    def add_evidence(self, scan: FileScan) -> None:
        self.problems.extend(p for p in scan.problems if p not in self.problems)
        key = self._hint_key(scan)
        if key is None:
            return
        if scan.shape is not None:
            nodes, tasks = scan.shape
            self.shapes[key] = PlannedJob(
                scan.display,
                key.job_id,
                f"{nodes}x{tasks}",
                None,
                None,
                (scan.display,),
                None,
                nodes,
                tasks,
                nodes * tasks,
            )
        self.job_files[key].add(scan.display)
        self.evidence[key].extend(scan.evidence)
        if scan.display in self.broken_files:  # an event line cut: a job, left incomplete
            self.broken_jobs.add(key)
        elif not scan.evidence and key not in self.starts:
            self.problems.append(
                Problem(
                    scan.display,
                    "job log without scalescope events: not a scalescope job, or it stopped "
                    "before printing its start event",
                    severity="info",
                )
            )

    def known(self, job: PlannedJob) -> bool:
        """Does any record or failure message speak for this manifest entry's job: its id in
        its sweep, or in a log known by its name only?"""
        job_id = job.job_id or ""
        finished = self.finished_keys()
        return any(
            job.of_sweep(key.sweep)
            and (key in finished or key in self.starts or bool(self.evidence.get(key)))
            for key in (*self.named(job_id), JobKey(job_id))
        )

    def check_planned(self, read_names: set[str]) -> list[tuple[str, str]]:
        """Jobs of the manifests that nothing speaks for become failures ("never started",
        "log missing"). Returns the logs that exist but were not among the inputs: the
        caller reads them and calls this again."""
        to_read: list[tuple[str, str]] = []
        self.unplanned = []
        seen: set[tuple[str | None, ...]] = set()
        for job in self.planned:
            ident = (
                (job.job_id, job.sweep_id)
                if job.job_id
                else (job.manifest, job.shape, str(job.repeat))
            )
            if ident in seen or (job.job_id is not None and self.known(job)):
                continue
            seen.add(ident)
            state = f"sweep.json says {job.state}" if job.state else ""
            if job.job_id is None:
                code, detail = "never_started", "the sweep ended before its turn"
            else:
                read = [log for log in job.logs if os.path.basename(log) in read_names]
                elsewhere = [log for log in job.logs if log not in read and os.path.isfile(log)]
                if elsewhere and not read:
                    to_read += [(log, log) for log in elsewhere]
                    continue
                if read or elsewhere:
                    code = "never_started"
                    detail = f"no start event in {(read or elsewhere)[0]}"
                elif not job.logs or not job.ran:
                    # queued, or cancelled while queued: the scheduler never made a log
                    code = "never_started"
                    detail = "no log" + (f" at {job.logs[0]}" if job.logs else "")
                else:
                    code, detail = "log_missing", f"expected at {job.logs[0]}"
            # the reason's label, the shape and the repeat are the row's own: said once there
            detail = "; ".join(d for d in (detail, state) if d)
            diagnosis = Diagnosis(code, REASONS[code], detail, None, ())
            job_id = job.job_id or "not submitted"
            self.unplanned.append(Failure(job_id, None, 0, diagnosis, (job.manifest,), job))
        return to_read

    def finish(self) -> ParseResult:
        out = ParseResult(problems=self.problems)
        out.sweep_commands = {
            p.sweep_id: p.command for p in self.planned if p.sweep_id and p.command
        }
        by_job = self._results_by_job()
        finished = set(by_job)
        stopped: dict[JobKey, tuple[ResultRecord, list[str]]] = {}
        for key, results in by_job.items():
            results.sort(key=lambda rs: rs[0].identity.restart_count)
            restarts = [r.identity.restart_count for r, _ in results]
            if len(set(restarts)) < len(restarts):
                out.runs.extend(self._reused_id(key, results))
                continue
            record, sources = results[-1]
            if record.stop_reason is not None:
                # Stopped early (SIGTERM: time limit, preemption, scancel): its figures cover
                # part of the training only, so it is a failed row, never a measurement.
                stopped[key] = (record, sources)
                continue
            empty = _no_measurement(record)
            if empty:
                out.failures.append(self._unmeasured(key, record, sources, empty))
                continue
            after = self.after_record.get(key, [])
            ended, after = split_attempts(after, record.identity.restart_count)
            out.runs.append(self._last_attempt(key, results, ended))
            said = finished_with_errors(key.job_id, after, self._planned_entry(key))
            if said is not None:
                self.problems.append(said)
        for key, (record, sources) in sorted(stopped.items()):
            out.failures.append(self._stopped(key, record, sources))
        out.failures += self._unfinished(finished)
        out.failures += self.unplanned
        out.runs.sort(key=lambda r: (r.record.identity.job_id, r.record.identity.run_id))
        out.problems += [p for run in out.runs for p in _faults_not_applied(run)]
        return out

    def _results_by_job(self) -> dict[JobKey, list[tuple[ResultRecord, list[str]]]]:
        """The results per job (:class:`JobKey`): two clusters' job 1234 are two jobs."""
        by_job: dict[JobKey, list[tuple[ResultRecord, list[str]]]] = defaultdict(list)
        for record, sources in self.results.values():
            by_job[self._key(record.identity)].append((record, sources))
        return by_job

    def _reused_id(self, key: JobKey, results: list[tuple[ResultRecord, list[str]]]) -> list[Run]:
        """Distinct runs (different run UUIDs) under one job id and restart count: the id was
        reused (a Slurm controller started afresh counts from 1 again). Each is a run of its
        own; none replaces another."""
        self.problems.append(
            Problem(
                results[0][1][0],
                f"job id {key.job_id} names {len(results)} distinct runs (job ids reused, "
                "e.g. by a reinstalled Slurm controller): each is kept as its own run",
                severity="info",
            )
        )
        return [Run(r, tuple(sorted(set(src)))) for r, src in results]

    def _last_attempt(
        self, key: JobKey, results: list[tuple[ResultRecord, list[str]]], ended: list[Evidence]
    ) -> Run:
        """A finished job's run: its last attempt's result, with why earlier attempts
        stopped (their logs' lines, and ``ended``: the other logs')."""
        record, sources = results[-1]
        if len(results) > 1:
            self.problems.append(
                Problem(
                    sources[0],
                    f"job {key.job_id} reported results for restarts "
                    f"{', '.join(str(r.identity.restart_count) for r, _ in results)}; "
                    "kept the last",
                    severity="info",
                )
            )
        final = record.identity.restart_count
        earlier = of_earlier_attempts(self.evidence.get(key, []), final) + ended
        reasons = tuple(
            dict.fromkeys(
                "requeued" if e.code == "requeue" else e.label
                for e in earlier
                if e.code not in ("exit_code", "exception", "memory_limit")
            )
        )
        return Run(record, tuple(sorted(set(sources))), reasons)

    def _stopped(self, key: JobKey, record: ResultRecord, sources: list[str]) -> Failure:
        """A job whose result says it stopped early: a failure, with what stopped it."""
        final = record.identity.restart_count
        found = diagnose(of_attempt(self.evidence.get(key, []), final))
        note = (
            f"stopped early ({record.stop_reason}) after {record.steps} step(s); "
            "its record is kept out of the statistics"
        )
        diagnosis = (
            replace(found, detail=f"{note}; {found.detail}")
            if found.code != "unknown"
            else Diagnosis("cancelled", REASONS["cancelled"], note, None, ())
        )
        files = tuple(sorted(set(sources) | self.job_files.get(key, set())))
        return Failure(key.job_id, record.identity, final, diagnosis, files)

    def _unmeasured(
        self, key: JobKey, record: ResultRecord, sources: list[str], what: str
    ) -> Failure:
        """A job whose record trained nothing: a failure, and a warning naming its file."""
        note = f"its record has {what}: not a measurement, kept out of the statistics"
        self.problems.append(Problem(sources[0], f"job {key.job_id}: {note}"))
        diagnosis = Diagnosis("no_measurement", REASONS["no_measurement"], note, None, ())
        files = tuple(sorted(set(sources) | self.job_files.get(key, set())))
        return Failure(key.job_id, record.identity, record.identity.restart_count, diagnosis, files)

    def _unfinished(self, finished: set[JobKey]) -> list[Failure]:
        """Jobs with a start event, failure evidence or a broken event line, and no result."""
        out = []
        for key in sorted(set(self.starts) | set(self.evidence) | self.broken_jobs):
            if key in finished:
                continue
            starts = self.starts.get(key, {})
            evidence = self.evidence.get(key, [])
            if not starts and not evidence and key not in self.broken_jobs:
                continue
            final = max(starts) if starts else 0
            identity = starts[final].identity if starts else None
            files = tuple(sorted(self.job_files.get(key, ())))
            planned = None if identity is not None else self.planned_for(key)
            diagnosis = diagnose(of_attempt(evidence, final))
            broken = [f for f in files if f in self.broken_files]
            if diagnosis.code == "unknown" and broken:
                diagnosis = replace(
                    diagnosis,
                    detail=f"no valid result; {broken[0]} has a broken event line (see problems)",
                )
            out.append(Failure(key.job_id, identity, final, diagnosis, files, planned))
        return out

    def _planned_entry(self, key: JobKey) -> PlannedJob | None:
        """The job's sweep.json entry: its own sweep's; another sweep's only for a log known
        by its name only (:meth:`PlannedJob.of_sweep`)."""
        entries = [
            job
            for job in self.planned
            if job.job_id is not None
            and (key in self.named(job.job_id) or key == JobKey(job.job_id))
            and job.of_sweep(key.sweep)
        ]
        own = [job for job in entries if job.sweep_id == key.sweep]
        return (own or entries)[0] if entries else None

    def planned_for(self, key: JobKey) -> PlannedJob | None:
        """What a job without a start event was: its sweep.json entry, else its sbatch log's
        first line."""
        return self._planned_entry(key) or self.shapes.get(key)


def _no_measurement(record: ResultRecord) -> str | None:
    """What says a finished record measured nothing (no training step, no time, no
    throughput), or None: averaged in, such a record would drag its scale's mean to 0. A
    value missing or not finite is another problem (:func:`analysis.read.frame.unmeasured_runs`)."""
    empty = [
        f"{value:g} {name}"
        for value, name in (
            (record.steps, "steps"),
            (record.train_time_s, "s of training"),
            (record.samples_per_s, "samples/s"),
        )
        if isinstance(value, (int, float)) and value <= 0
    ]
    return " and ".join(empty) if empty else None


def _shared_depth(a: str, b: str) -> int:
    """How many leading folders two paths share."""
    depth = 0
    for x, y in zip(a.split(os.sep), b.split(os.sep), strict=False):
        if x != y:
            break
        depth += 1
    return depth


def _where(key: JobKey) -> str:
    """Which of several jobs of one id: its cluster and sweep."""
    where = f"on {key.cluster}" if key.cluster else "on an unnamed cluster"
    return where + (f" in sweep {key.sweep}" if key.sweep else "")


def _map(func: Callable[[T], R], items: Sequence[T], jobs: int | None) -> Iterator[R]:
    """func over items, in order, yielded as they come (the caller's work overlaps the
    workers'); across processes when there are enough items to pay for them."""
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if workers <= 1 or len(items) < 64:
        yield from map(func, items)
        return
    workers = min(workers, max(1, len(items) // 32))
    chunksize = max(1, min(128, len(items) // (workers * 8)))
    with ProcessPoolExecutor(max_workers=workers, initializer=gc.disable) as pool:
        yield from pool.map(func, items, chunksize=chunksize)


def parse(
    paths: Sequence[str | os.PathLike[str]],
    *,
    exclude: Iterable[str | os.PathLike[str]] = (),
    jobs: int | None = None,
) -> ParseResult:
    """Read every record and failed job under ``paths`` (folders, walked, or files).

    ``jobs`` bounds the worker processes (default: one per CPU; 1 reads in this process).
    """
    # Reading allocates many small objects that all stay alive: the cyclic collector would
    # scan them again and again for nothing (a fifth of the time on 10,000 logs).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        files, problems = discover(paths, exclude)
        # result.json files go first so that a run's atomic record wins over its log line.
        files.sort(key=lambda f: (os.path.basename(f[0]) != RESULT_JSON, f[1]))
        assembler = _Assembler()
        assembler.problems.extend(problems)
        for scan in _map(scan_file, files, jobs):
            assembler.add(scan)
        for scan in _map(evidence_scan, assembler.pending(), jobs):
            assembler.add_evidence(scan)
        names = {os.path.basename(path) for path, _ in files}
        outside = assembler.check_planned(names)
        if outside:  # a manifest names logs that are not under the inputs: read them too
            for scan in map(scan_file, outside):
                assembler.add(scan)
            for scan in map(evidence_scan, assembler.pending()):
                assembler.add_evidence(scan)
            assembler.check_planned(names | {os.path.basename(p) for p, _ in outside})
        for scan in _map(tail_evidence_scan, assembler.finished_logs(), jobs):
            assembler.add_after_record(scan)
        result = assembler.finish()
    finally:
        if gc_was_enabled:
            gc.enable()
    result.files_read = len(files)
    return result


def _faults_not_applied(run: Run) -> list[Problem]:
    """A warning per requested fault the run's strategy gave nothing to act on: its figures
    are a run without that fault, whatever its config says."""
    missed = run.record.faults_not_applied or {}
    ident = run.record.identity
    return [
        Problem(
            run.sources[0] if run.sources else ident.run_dir,
            f"job {ident.job_id}: faults.{fault} was not applied ({why}): the run is one "
            "without it",
        )
        for fault, why in sorted(missed.items())
    ]
