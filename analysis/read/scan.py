"""Reading one file, in two phases (both per file, so across processes when there are many):

1. every file is scanned in binary for the record marker (``bytes.find``, no decoding of
   the noise lines); marker lines are decoded through :mod:`scalescope.record`. A file whose
   start event has no result in the same file is also scanned for failure evidence. A
   sweep's ``sweep.json`` gives the jobs it planned; a ``result.json`` its record.
2. logs that carry no event but whose name gives a job id (submitit's ``*_log.err``, a
   rank's own log) are scanned for evidence when that job has no result, and only at
   their end when it has one (:func:`tail_evidence_scan`: another rank may have failed
   after rank 0 wrote the record).

What a file yields is a :class:`FileScan`; :mod:`analysis.read.parse` turns them into jobs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from typing import BinaryIO

from analysis.read.damage import Damage
from analysis.read.failures.classify import KEYWORDS, Evidence
from analysis.read.failures.collect import EvidenceCollector, with_attempt
from analysis.read.files import RESULT_JSON, SWEEP_JSON, Problem
from analysis.read.manifest import PlannedJob, read_manifest
from scalescope.record import (
    MARKER,
    RecordError,
    ResultRecord,
    StartEvent,
    decode_line,
    read_result_json,
)

MARKER_BYTES = MARKER.encode()
CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 8 << 20
"""A line longer than this cannot be an event line (those are a few kB); it is skipped."""

_SUBMITIT_NAME = re.compile(r"^(?P<job>\d+(?:_\d+)?)_(?P<task>\d+)_log\.(?:out|err)$")
_SLURM_NAME = re.compile(r"^slurm-(?P<job>\d+(?:_\d+)?)\.out$")
# sbatch's %j, %x_%j, %x-%j, %x.%j (and %A_%a, %x_%A_%a): the id is the whole name or follows
# a separator, so a name that only ends in digits (slurmd-node1.log) is not taken for a job id.
# Which of two numbers is the id: :func:`_array_or_job`.
_GENERIC_NAME = re.compile(r"^(?:(?P<name>.*?)[-_.])??(?P<job>\d+(?:_\d+)?)\.(?:out|err)$")
# .log, a name many programs use: <name>_<id>, <name>-<id> or <id> only, with at least three
# digits (job ids are rarely under 100: rank_1.log is a rank's) and no dot in the name
# (NCCL_DEBUG_FILE's %h.%p, nccl.node1.12345.log, is a host and a pid, which no name tells
# from a job id)
_LOG_NAME = re.compile(r"^(?:(?P<name>[^.]*?)[-_])??(?P<job>\d{3,}(?:_\d+)?)\.log$")
# %x%j and job%j glue the id to letters: taken for .out and .err (sbatch's defaults), never for
# .log (slurmd-node1.log is a daemon's log), and only with at least four digits and no leading
# zero: a model's or a host's number is glued to letters too (resnet50, resnet152, node01,
# node0001), and a cluster's job ids pass 999 in its first days
_GLUED_NAME = re.compile(r"[A-Za-z](?P<job>[1-9]\d{3,})\.(?:out|err)$")
_START_BYTES = b'"event":"start"'
_RUN_ID_KEY = b'"run_id":"'  # record.encode writes compact JSON


@dataclass(frozen=True)
class FileScan:
    path: str
    display: str
    events: tuple[tuple[int, StartEvent | ResultRecord], ...] = ()
    """(byte offset of the event line, event); 0 for a result.json."""
    evidence: tuple[Evidence, ...] = ()
    problems: tuple[Problem, ...] = ()
    hint: str | None = None
    """Job id read from the file name (``1234`` or array ``1234_5``), if any."""
    other_hint: str | None = None
    """The name's other reading, where it has two (:func:`job_hints`)."""
    evidence_scanned: bool = False
    planned: tuple[PlannedJob, ...] = ()
    """The jobs a sweep.json lists."""
    shape: tuple[int, int] | None = None
    """(nodes, tasks per node) from an sbatch job's first line (slurm_jobs/common.sh), read
    with the evidence: what a job that failed before its start event was."""
    after_record: tuple[Evidence, ...] = ()
    """Evidence after the last result line of a log whose jobs all finished: the other ranks'
    ends (srun prints every rank into one log), where one may have failed after rank 0."""


# --- phase 1: events ------------------------------------------------------------------------


DEFAULT_MAX_TASK_INDEX = 1000
"""The highest array task index under Slurm's default ``MaxArraySize`` (1001)."""


def job_hints(name: str) -> tuple[str, ...]:
    """The job ids a log's file name can carry, the likelier first: Slurm's
    ``slurm-<id>.out``, submitit's ``<id>_<task>_log.out`` (checked first: its task number is
    not the id), sbatch's ``<id>``, ``<name>_<id>``, ``<name>-<id>`` and ``<name>.<id>`` with
    ``.out`` or ``.err``, ``<name><id>`` (``job1234.out``, four digits or more) with ``.out``
    or ``.err``, and ``<id>``, ``<name>_<id>`` and ``<name>-<id>`` with ``.log`` (three digits
    or more, no dot in the name). An array task is ``<array id>_<task>``; ``<name>_<a>_<b>``
    reads two ways (:func:`_array_or_job`)."""
    for pattern in (_SUBMITIT_NAME, _SLURM_NAME, _GENERIC_NAME, _LOG_NAME, _GLUED_NAME):
        m = pattern.search(name)
        if m:
            groups = m.groupdict()
            return _array_or_job(groups.get("name"), m.group("job"))
    return ()


def _array_or_job(name: str | None, job: str) -> tuple[str, ...]:
    """``<a>_<b>`` of a file name: an array task (``%A_%a``) when it is the whole name or
    follows ``slurm-`` (sbatch's default for arrays). After another name it reads two ways:
    the array task ``a_b`` (``%x_%A_%a``: ``train_7307_2.out``), or job ``b`` after a job name
    ending in ``a`` (``%x_%j``: ``bert_1024_7310.out``, ``exp_20240101_7310.out``). The array
    task comes first when ``b`` can be a task index next to ``a`` as a job id: fewer digits
    (tasks count from 0, job ids only grow) and no more than Slurm's default array allows
    (:data:`DEFAULT_MAX_TASK_INDEX`); else job ``b``. Which one a job's record or a sweep's
    manifest names wins over this guess (:mod:`analysis.read.parse`)."""
    a, _, b = job.partition("_")
    if not b or name is None or name == "slurm":
        return (job,)
    if len(b) < len(a) and int(b) <= DEFAULT_MAX_TASK_INDEX:
        return (job, b)
    return (b, job)


def _constant(n: int) -> Callable[[], int]:
    return lambda: n


MarkerLine = tuple[int, Callable[[], int], bytes | None]
"""(byte offset, line number thunk, line) of a line holding the marker (:func:`_marker_lines`)."""


def _marker_lines(fh: BinaryIO, first: bytes, damage: Damage | None = None) -> Iterator[MarkerLine]:
    """(byte offset, line number thunk, line) of every line holding the marker; the line is
    None for a line too long to be an event. Reads in chunks, so memory stays bounded
    whatever the file size; newlines are only counted when a line number is asked for (a
    problem to report) or the file spans several chunks. ``damage``, if given, sees every
    complete line (NUL blocks, binary garbage) and every over-long line.

    An event printed right after a long run of bytes without a newline (a NUL hole a crash
    left, a progress bar) starts inside an over-long line: it is read from its marker on."""
    return _MarkerReader(fh, damage).lines(first)


class _MarkerReader:
    """One pass of :func:`_marker_lines` over a file: where it stands, and the over-long line
    it may be skipping."""

    def __init__(self, fh: BinaryIO, damage: Damage | None) -> None:
        self.fh = fh
        self.damage = damage
        self.carry = b""
        self.base_offset = 0  # file offset of ``buf[0]``
        self.line_base = 1  # line number of the first line in ``buf``
        self.skipping = False  # inside an over-long line, dropping bytes up to its end
        self.long_start = self.long_nul = 0  # where the over-long line began; NUL bytes in it
        self.lost = False  # an event line in it was too long to be read (reported as such)

    def lines(self, first: bytes) -> Iterator[MarkerLine]:
        chunk = first
        while True:
            eof = not chunk
            buf = self.carry + chunk if self.carry else chunk
            if not buf:
                if self.skipping:
                    self._end_long(self.base_offset)
                return
            end = len(buf) if eof else buf.rfind(b"\n") + 1
            if end == 0:  # no line end in this chunk
                yield from self._without_line_end(buf)
                chunk = self.fh.read(CHUNK_BYTES)
                continue
            start = 0
            if self.skipping:
                start = yield from self._long_line_end(buf)
            if self.damage is not None:
                self.damage.feed(buf, start, end, self.base_offset, self.line_base)
            yield from _markers_in(buf, start, end, self.base_offset, self.line_base)
            self.carry = buf[end:]
            if eof:
                return
            chunk = self.fh.read(CHUNK_BYTES)
            if chunk or self.carry:  # more to read: keep the line count going
                self.line_base += buf.count(b"\n", start, end)
            self.base_offset += end

    def _without_line_end(self, buf: bytes) -> Iterator[MarkerLine]:
        """A chunk without a newline: kept whole for the next read, or, once longer than a
        line can be, skipped as an over-long line (up to a marker near its end)."""
        if len(buf) <= MAX_LINE_BYTES:
            self.carry = buf
            return
        if not self.skipping:
            self.skipping, self.long_start, self.long_nul, self.lost = (
                True,
                self.base_offset,
                0,
                False,
            )
            if self.damage is not None:
                self.damage.close()
        p = buf.rfind(MARKER_BYTES)
        if p >= 0 and len(buf) - p <= MAX_LINE_BYTES:
            self.long_nul += buf.count(b"\0", 0, p)
            self._end_long(self.base_offset + p)
            self.skipping, self.carry = False, buf[p:]
            self.base_offset += p
            return
        if p >= 0 and not self.lost:
            self.lost = True
            yield self.base_offset + p, _constant(self.line_base), None
        # keep what could be the start of a marker cut by this read
        drop = len(buf) - (len(MARKER_BYTES) - 1)
        self.long_nul += buf.count(b"\0", 0, drop)
        self.carry = buf[drop:]
        self.base_offset += drop

    def _long_line_end(self, buf: bytes) -> Generator[MarkerLine, None, int]:
        """The over-long line ends at the first newline of this chunk, or with the file (an
        event at its end is read from its marker); returns where the next line starts."""
        nl = buf.find(b"\n")
        nl = len(buf) if nl < 0 else nl
        p = buf.rfind(MARKER_BYTES, 0, nl)
        if p >= 0 and nl - p <= MAX_LINE_BYTES:
            yield self.base_offset + p, _constant(self.line_base), buf[p:nl]
        else:
            p = nl
        self.long_nul += buf.count(b"\0", 0, p)
        self._end_long(self.base_offset + p)
        start = min(nl + 1, len(buf))
        self.line_base += 1
        self.skipping = False
        return start

    def _end_long(self, at: int) -> None:
        if self.damage is not None:
            self.damage.long_lines.append(
                (self.line_base, self.long_start, at - self.long_start, self.long_nul, self.lost)
            )


def _markers_in(
    buf: bytes, start: int, end: int, base_offset: int, line_base: int
) -> Iterator[MarkerLine]:
    """The lines holding the marker among the whole lines ``buf[start:end]``."""
    pos = buf.find(MARKER_BYTES, start, end)
    while pos >= 0:
        ls = buf.rfind(b"\n", 0, pos) + 1
        le = buf.find(b"\n", pos, end)
        le = end if le < 0 else le

        def line_no(
            buf: bytes = buf, start: int = start, ls: int = ls, base: int = line_base
        ) -> int:
            return base + buf.count(b"\n", start, ls)

        yield base_offset + ls, line_no, buf[ls:le]
        pos = buf.find(MARKER_BYTES, le, end)


Entries = dict[int, tuple[StartEvent | ResultRecord | None, str | None]]


def _decoded(lines: list[MarkerLine], ends_in_newline: bool) -> tuple[Entries, bool]:
    """The events of a file's marker lines, or the problem each has, by byte offset; and
    whether the file ends inside an event line (its last, cut mid-write: a job whose log stops
    there)."""
    # Results first: a start event whose run finished in this same log adds nothing, so it
    # is not decoded at all (a third of the JSON work on a big sweep).
    entries: Entries = {}
    cut = False  # the file ends inside an event line: a job whose log stops mid-write
    finished_here: set[str] = set()
    for want_start in (False, True):
        for offset, line_no, raw in lines:
            if raw is None:
                if not want_start:
                    limit = MAX_LINE_BYTES >> 20
                    entries[offset] = (
                        None,
                        f"line {line_no()}: event line longer than {limit} MiB, skipped",
                    )
                continue
            if (_START_BYTES in raw) != want_start:
                continue
            if want_start and finished_here:
                at = raw.find(_RUN_ID_KEY) + len(_RUN_ID_KEY)
                run_id = raw[at : raw.find(b'"', at)].decode("utf-8", "replace")
                if at >= len(_RUN_ID_KEY) and run_id in finished_here:
                    continue
            try:
                event = decode_line(raw.decode("utf-8", errors="replace"))
            except RecordError as exc:
                entries[offset] = (None, f"line {line_no()}: {exc}")
                if offset == lines[-1][0] and not ends_in_newline:
                    cut = cut or not raw.rstrip().endswith(b"}")
                continue
            if event is not None:
                entries[offset] = (event, None)
                if isinstance(event, ResultRecord):
                    finished_here.add(event.identity.run_id)
    return entries, cut


def scan_file(item: tuple[str, str]) -> FileScan:
    """Phase 1 for one file: its events, problems and (if it needs them) failure evidence."""
    path, display = item
    name = os.path.basename(path)
    if name == RESULT_JSON:
        try:
            return FileScan(path, display, events=((0, read_result_json(path)),))
        except RecordError as exc:
            return FileScan(path, display, problems=(Problem(display, str(exc)),))
    if name == SWEEP_JSON:
        try:
            planned = read_manifest(path, display)
        except ValueError as exc:
            message = f"not a readable sweep manifest: {exc}; the logs are still summarised"
            return FileScan(path, display, problems=(Problem(display, message),))
        return FileScan(path, display, planned=tuple(planned))
    events: list[tuple[int, StartEvent | ResultRecord]] = []
    problems: list[Problem] = []
    damage = Damage()
    try:
        with open(path, "rb") as fh:
            first = fh.read(CHUNK_BYTES)
            lines = list(_marker_lines(fh, first, damage))
            size = fh.tell()
            fh.seek(max(size - 1, 0))
            ends_in_newline = fh.read(1) == b"\n"
    except OSError as exc:
        return FileScan(path, display, problems=(Problem(display, f"cannot read: {exc}"),))
    entries, cut = _decoded(lines, ends_in_newline)
    for offset in sorted(entries):  # back in file order
        event, problem = entries[offset]
        if problem is not None:
            problems.append(Problem(display, problem))
        elif event is not None:
            events.append((offset, event))
    problems += damage.problems(display, bool(lines), size)
    # Only logs without events need their name (a rank's log, to be read for evidence; one
    # that ends inside its start event, a job left incomplete); not a binary file, nor one
    # whose event lines are whole but unreadable (the problems say so already).
    unusable = damage.is_binary(bool(lines), size) or (bool(lines) and not cut)
    hints = () if events or unusable else job_hints(name)
    scan = FileScan(
        path,
        display,
        tuple(events),
        problems=tuple(problems),
        hint=hints[0] if hints else None,
        other_hint=hints[1] if len(hints) > 1 else None,
    )
    results = [e for _, e in events if isinstance(e, ResultRecord)]
    finished = {e.identity.run_id for e in results}
    if any(isinstance(e, StartEvent) and e.identity.run_id not in finished for _, e in events):
        return _with_evidence(scan)
    if any(e.stop_reason for e in results):
        # Stopped early: what stopped it (Slurm's time limit, a preemption) is in this log.
        return _with_evidence(scan)
    return _after_last_result(scan, lines) if results else scan


# --- phase 2: evidence ----------------------------------------------------------------------


def _keyword_lines(
    fh: BinaryIO, base_offset: int = 0, line_base: int = 1
) -> Iterator[tuple[int, int, bytes]]:
    """(byte offset, line number, line) of each line with a failure keyword, in order, each
    line once; from where ``fh`` stands, at ``base_offset`` and line ``line_base``."""
    carry = b""
    while True:
        chunk = fh.read(CHUNK_BYTES)
        eof = not chunk
        buf = carry + chunk if carry else chunk
        if not buf:
            return
        end = len(buf) if eof else buf.rfind(b"\n") + 1
        if end == 0:
            dropped = max(0, len(buf) - MAX_LINE_BYTES)
            carry, base_offset = buf[dropped:], base_offset + dropped
            continue
        last_le = -1
        counted_at, counted = 0, line_base  # newlines counted incrementally, once each
        for m in KEYWORDS.finditer(buf, 0, end):
            if m.start() < last_le:
                continue
            ls = buf.rfind(b"\n", 0, m.start()) + 1
            le = buf.find(b"\n", m.start(), end)
            le = end if le < 0 else le
            last_le = le
            counted += buf.count(b"\n", counted_at, ls)
            counted_at = ls
            yield base_offset + ls, counted, buf[ls:le]
        line_base += buf.count(b"\n", 0, end)
        base_offset += end
        carry = buf[end:]
        if eof:
            return


TAIL_BYTES = CHUNK_BYTES
"""How much of the end of a finished job's other logs is searched: a rank that failed
printed its error last, as it died."""


def _skip_to_tail(fh: BinaryIO, tail: int) -> tuple[int, int]:
    """Moves ``fh`` to the first whole line of its last ``tail`` bytes; returns that line's
    (byte offset, line number). Lines before it are counted, not searched."""
    size = fh.seek(0, os.SEEK_END)
    start = max(0, size - tail)
    fh.seek(0)
    newlines = 0
    while fh.tell() < start:
        chunk = fh.read(min(CHUNK_BYTES, start - fh.tell()))
        if not chunk:
            break
        newlines += chunk.count(b"\n")
    if start == 0:
        return 0, 1
    fh.seek(start - 1)
    if fh.read(1) == b"\n":  # the tail starts a line
        return start, newlines + 1
    rest = fh.readline()
    return start + len(rest), newlines + 1 + rest.count(b"\n")


def scan_evidence(
    path: str, display: str, tail: int | None = None, start: tuple[int, int] = (0, 1)
) -> tuple[list[Evidence], list[Problem]]:
    """The failure evidence of a file: from ``start`` (byte offset of a line, its number), or
    in its last ``tail`` bytes."""
    collector = EvidenceCollector(display)
    try:
        with open(path, "rb") as fh:
            offset, line = _skip_to_tail(fh, tail) if tail is not None else start
            fh.seek(offset)
            for at, line_no, raw in _keyword_lines(fh, offset, line):
                collector.feed(raw.decode("utf-8", errors="replace"), line_no, at)
    except OSError as exc:
        return [], [Problem(display, f"cannot read: {exc}")]
    return collector.evidence(), []


_SBATCH_FIRST_LINE = re.compile(
    rb"^scalescope job \S+: (?P<nodes>\d+) node\(s\) .*?, (?P<tasks>\d+) task\(s\) per node"
)
"""``scalescope job 12: 2 node(s) (n[1-2]), 1 task(s) per node, world size 2, ...``: the
first line an sbatch script of slurm_jobs/ prints."""


def sbatch_shape(path: str) -> tuple[int, int] | None:
    """(nodes, tasks per node) from the sbatch job's first line; None for any other log."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(4096)
    except OSError:
        return None
    m = _SBATCH_FIRST_LINE.match(first)
    return (int(m.group("nodes")), int(m.group("tasks"))) if m else None


def _with_evidence(scan: FileScan) -> FileScan:
    evidence, problems = scan_evidence(scan.path, scan.display)
    # Attribute each line to the attempt whose start event precedes it in this file.
    starts = sorted(
        (at, e.identity.restart_count) for at, e in scan.events if isinstance(e, StartEvent)
    )
    attributed = []
    for ev in evidence:
        attempt = None
        for at, restart in starts:
            if at < ev.offset:
                attempt = restart
        attributed.append(with_attempt(ev, attempt))
    return FileScan(
        scan.path,
        scan.display,
        scan.events,
        tuple(attributed),
        scan.problems + tuple(problems),
        scan.hint,
        evidence_scanned=True,
        shape=sbatch_shape(scan.path),
        other_hint=scan.other_hint,
    )


def evidence_scan(scan: FileScan) -> FileScan:
    """Phase 2 for one file (a picklable entry point for the process pool)."""
    return scan if scan.evidence_scanned else _with_evidence(scan)


def _after_last_result(scan: FileScan, lines: list[MarkerLine]) -> FileScan:
    """``scan`` with the evidence after its last result line (:attr:`FileScan.after_record`):
    a few lines of the ranks' ends, not the log."""
    last = max(at for at, e in scan.events if isinstance(e, ResultRecord))
    found = [(line_no, raw) for at, line_no, raw in lines if at == last and raw is not None]
    if not found:
        return scan
    line_no, raw = found[0]
    after = (last + len(raw) + 1, line_no() + 1)
    evidence, problems = scan_evidence(scan.path, scan.display, start=after)
    return replace(scan, after_record=tuple(evidence), problems=scan.problems + tuple(problems))


_ATTEMPT_START = re.compile(
    rb"Starting with JobEnvironment\(|^scalescope job \S+: \d+ node\(s\)", re.MULTILINE
)
"""A line an attempt prints first in a log without events: submitit's "Starting with
JobEnvironment(...)" in each task's ``.out``, the first line of an sbatch script of
slurm_jobs/. A requeued job's log holds one per attempt."""


def _since_last_attempt(path: str, evidence: list[Evidence]) -> list[Evidence]:
    """``evidence`` less the lines before the last attempt's start in the file: a requeued
    job's earlier attempts, not the one that finished. Only a log with evidence is read again,
    from its first evidence line on (in the tail)."""
    if not evidence:
        return evidence
    first = min(e.offset for e in evidence)
    try:
        with open(path, "rb") as fh:
            fh.seek(first)
            starts = [m.start() for m in _ATTEMPT_START.finditer(fh.read(TAIL_BYTES))]
    except OSError:
        return evidence
    if not starts:
        return evidence
    last = first + starts[-1]
    return [e for e in evidence if e.offset > last]


def tail_evidence_scan(scan: FileScan) -> FileScan:
    """Phase 2 for another log of a finished job (a rank's, known by its name): the end of
    the file only (:data:`TAIL_BYTES`), where a rank that failed printed its error; from the
    last attempt's start on, where the log shows one (:func:`_since_last_attempt`)."""
    evidence, problems = scan_evidence(scan.path, scan.display, TAIL_BYTES)
    evidence = _since_last_attempt(scan.path, evidence)
    return replace(
        scan,
        evidence=tuple(evidence),
        problems=scan.problems + tuple(problems),
        evidence_scanned=True,
    )
