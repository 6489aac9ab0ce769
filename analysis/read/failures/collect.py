"""One log file's evidence in context: the lines :mod:`.classify` reads one at a time, and
what needs the lines around them (the first traceback's exception, the reports of exceptions
Python ignored, torchrun's summaries of its failed workers and the signals it got).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from analysis.read.failures.classify import (
    _INTERRUPT_DETAIL,
    _PREFIX,
    SIGKILL_SENDERS,
    SIGTERM_SENDERS,
    Evidence,
    _trim,
    classify_line,
    dead_workers,
)
from analysis.read.failures.collective_lines import NCCL_GENERIC

_TRACEBACK = "Traceback (most recent call last):"
_IGNORED = "Exception ignored in"
"""What Python prints before the traceback of an exception it ignored (raised in ``__del__``,
a DataLoader worker's clean-up): it stopped nothing, and successful jobs print it."""
_NEAR = 2
"""How many lines below an "Exception ignored in" line (or a chained-exception line of its
report) its traceback starts: the next line, or the one after a blank line. Lines of a log
without srun's or torch's prefixes are told apart by this only."""
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_EXCEPTION = re.compile(
    r"^(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
    r"(?:Error|Exception|Interrupt|Exit|Failure|Timeout))(?::\s*(?P<msg>.*))?$"
)

_CHILD_FAILED = "ChildFailedError"
"""torchrun's exception when a worker failed: its message is a summary of the failed workers
(:meth:`EvidenceCollector._child_summary`), not an error of torchrun's own."""
_CHILD_RANK = re.compile(r"^\s*rank\s*: (?P<rank>\d+) \(local_rank: \d+\)")
# "  exitcode  : -9 (pid: 1234)"; newer torch adds the signal's name: "... (pid: 1234)  (SIGKILL)"
_CHILD_EXIT = re.compile(
    r"^\s*exitcode\s*: (?P<code>-?\d+) \(pid: \d+\)(?:\s*\((?P<name>SIG\w+)\))?"
)
# "  traceback : Traceback (most recent call last):": the worker's own traceback, which the
# summary carries where the worker's entry point is wrapped in torch's @record (its error file
# read back), each of its lines indented two more
_CHILD_TRACEBACK = re.compile(r"^\s*traceback\s*: Traceback \(most recent call last\):")
_CHILD_INDENT = "  "
_CHILD_FIELD = re.compile(r"^\s*(?:time|host|rank|exitcode|error_file|traceback)\s*: ")
"""A field of a worker's entry in the summary: it ends the traceback before it (a log read
through the keyword filter skips the lines between)."""
# torchrun's agent, when a worker fails, before its summary (or alone, where torchrun was
# stopped before printing one): "E1201 10:00:00.123000 4242 torch/distributed/elastic/
# multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 0 (pid: 1234) of binary: ...";
# older "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) ..."
_AGENT_FAILED = re.compile(
    r"\bfailed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: \d+\) of binary"
)
_SIGNAL_EXCEPTION = "SignalException"
"""torchrun's exception when it is sent a signal (SIGTERM, SIGINT, SIGHUP): it stops its workers
and raises this; the job did not fail of its own."""
_GOT_SIGNAL = re.compile(r"got signal: (?P<code>\d+)")
_KILLERS = {"SIGKILL": SIGKILL_SENDERS}
"""What usually sends the signal that killed a worker (torchrun's summary)."""
_SENDERS = {**_KILLERS, "SIGTERM": SIGTERM_SENDERS}
"""What usually sends the signal torchrun got (its SignalException)."""


def _signal_words(code: int, senders: dict[str, str], name: str | None = None) -> str:
    """'signal 9 (SIGKILL: who sends it, most often)': the signal's number, its name (as
    printed, else this machine's name for the number; none where it has no name) and what
    usually sends it, where ``senders`` says."""
    if name is None:
        try:
            name = signal.Signals(code).name
        except ValueError:
            return f"signal {code}"
    said = f": {senders[name]}" if name in senders else ""
    return f"signal {code} ({name}{said})"


def _child_exit(code: int, name: str | None, rank: str | None, local: bool = False) -> str:
    """How torchrun's summary (or its agent's line, ``local``: the rank on its node) says a
    worker ended: killed by a signal (a negative exit code; :func:`_signal_words`) or exited."""
    who = (
        "torchrun: a worker"
        if rank is None
        else f"torchrun: {'local rank' if local else 'rank'} {rank}"
    )
    if code >= 0:
        return f"{who} exited with exit code {code}"
    return f"{who} killed by {_signal_words(-code, _KILLERS, name)}"


def _signalled(message: str) -> str:
    """What torchrun's SignalException says it got: "torchrun got signal 15 (SIGTERM: ...)"."""
    m = _GOT_SIGNAL.search(message)
    if m is None:
        return "torchrun got a signal"
    return f"torchrun got {_signal_words(int(m.group('code')), _SENDERS)}"


@dataclass
class EvidenceCollector:
    """Feeds on the lines of one file; keeps a bounded set of evidence (first of each kind,
    and the last exception line after a traceback)."""

    file: str
    first: dict[str, Evidence] = field(default_factory=dict)
    last_exception: Evidence | None = None
    """The last exception line of the first traceback (its chained exceptions included)."""
    traceback_seen: bool = False
    chained: bool = False
    """A "During handling..." line since the last exception: the next traceback continues."""
    first_traceback_done: bool = False
    ignored: dict[str, tuple[str, int]] = field(default_factory=dict)
    """The "Exception ignored in" report each rank (its srun or torch prefix; "" for none) is
    in, and the number of its last line read: "header" (its traceback comes next), "body" (in
    its traceback), "ended" (its exception line read; a chained exception may follow). Its
    lines are not an error (:meth:`_in_ignored`)."""
    child_summaries: int = 0
    """torchrun's summaries of failed workers (ChildFailedError) read: one per node."""
    child_rank: str | None = None
    """The rank of the worker the first summary tells of (its last ``rank :`` line)."""
    child_exit: Evidence | None = None
    """How the first summary's root cause (printed last) ended, as a task's exit."""
    child_traceback: bool = False
    """In a worker's traceback that a summary carries (torch's ``@record``)."""
    child_exception: Evidence | None = None
    """The exception line of the traceback the first summary carries for its root cause."""
    dead_workers: frozenset[str] = frozenset()
    """The pids of the DataLoader workers a line said died, and how."""

    def _in_ignored(self, rank: str, line: str, line_no: int) -> bool:
        """Is the line part of an exception report Python ignored? The report ends at its
        exception line, at a line of its rank that is not indented (its last line named no
        Error or Exception: ``StopIteration``), or at a new traceback; a report's traceback
        (or chained one) starts right below its header. One rank's report leaves the lines
        of the others alone."""
        if line.startswith(_IGNORED):
            self.ignored[rank] = ("header", line_no)
            return True
        if rank not in self.ignored or not line.strip():  # a blank line says nothing
            return rank in self.ignored
        where, last = self.ignored.pop(rank)
        near = bool(rank) or line_no - last <= _NEAR  # other ranks' lines may come between
        exception = _EXCEPTION.match(line.rstrip()) is not None
        chained = any(c in line for c in _CHAINED)
        indented = line[:1] in (" ", "\t")
        if where == "header" and near and (_TRACEBACK in line or exception):
            # its traceback; or its message, printed without one
            self.ignored[rank] = ("body" if _TRACEBACK in line else "ended", line_no)
            return True
        if where == "body" and _TRACEBACK not in line:
            if indented or exception or chained:
                after = "body" if indented else "ended" if exception else "header"
                self.ignored[rank] = (after, line_no)
                return True
            self.ignored[rank] = ("ended", line_no)  # its unrecognised last line, or after it
            return False
        if where == "ended" and near and chained:
            self.ignored[rank] = ("header", line_no)
            return True
        return False

    def _child_summary(self, raw: str, line: str, line_no: int, offset: int) -> bool:
        """Is the line part of torchrun's summary of its failed workers? Its exception line
        (ChildFailedError) ends torchrun's traceback without being an error of its own: a
        worker's traceback printed after it is still the first. The first summary's last
        worker is its root cause; how it ended is kept as a task's exit
        (:attr:`child_exit`)."""
        m = _EXCEPTION.match(line.rstrip())
        if m is not None and m.group("name").endswith(_CHILD_FAILED):
            self.child_summaries += 1
            self.child_rank = None
            # torchrun's traceback was not one: the next is the first, unless one was before
            self.traceback_seen = self.last_exception is not None
            return True
        if not self.child_summaries:
            return False
        if self._child_traceback(raw, line, line_no, offset):
            return True
        rank, end = _CHILD_RANK.match(line), _CHILD_EXIT.match(line)
        if self.child_summaries == 1 and rank is not None:
            self.child_rank, self.child_exception = rank.group("rank"), None
        elif self.child_summaries == 1 and end is not None:
            detail = _child_exit(int(end.group("code")), end.group("name"), self.child_rank)
            self.child_exit = Evidence("exit_code", detail, _trim(raw), self.file, line_no, offset)
        return rank is not None or end is not None

    def _child_traceback(self, raw: str, line: str, line_no: int, offset: int) -> bool:
        """Is the line part of a worker's traceback that a summary carries? Its exception
        lines are indented once (a frame's lines more); the first summary's last one, of the
        last worker (the root cause), is kept (:attr:`child_exception`)."""
        if _CHILD_TRACEBACK.match(line):
            self.child_traceback = True
            return True
        if not self.child_traceback:
            return False
        if not line.startswith(_CHILD_INDENT) or _CHILD_FIELD.match(line):
            self.child_traceback = False
            return False
        m = _EXCEPTION.match(line.strip())
        if m is not None and self.child_summaries == 1 and line[len(_CHILD_INDENT)] != " ":
            said = _trim(line.strip())
            self.child_exception = Evidence(
                "exception", said, _trim(raw), self.file, line_no, offset
            )
        return True

    def _agent_failed(self, raw: str, line: str, line_no: int, offset: int) -> bool:
        """Is the line torchrun's agent saying a worker failed? Kept as a task's exit, the
        first summary's (:attr:`child_exit`) said over it."""
        m = _AGENT_FAILED.search(line)
        if m is None:
            return False
        detail = _child_exit(int(m.group("code")), None, m.group("local"), local=True)
        ev = Evidence("exit_code", detail, _trim(raw), self.file, line_no, offset)
        self.first.setdefault("exit_code", ev)
        return True

    def _closes_dead_workers(self, line: str) -> bool:
        """Is the line the main process's "DataLoader worker (pid(s) ...) exited unexpectedly"
        after an earlier line told how one of those workers died? Then it says nothing more:
        that line is the cause's (a signal from outside, a fault, an exit code). It lists
        every worker gone by then, where torch told of the first it found (at a time limit,
        "pid(s) 11551, 11552" after "pid 11552 is killed by signal: Terminated"). The chained
        traceback it closes ends with it."""
        pids, closing = dead_workers(line)
        if closing and pids & self.dead_workers:
            self.chained = False
            return True
        if not closing:
            self.dead_workers |= pids
        return False

    def feed(self, raw: str, line_no: int, offset: int = -1) -> None:
        text = raw.rstrip("\r\n")
        prefix = _PREFIX.match(text)
        rank = "".join(prefix.group(0).split()) if prefix else ""
        line = text[prefix.end() :] if prefix else text
        if self._in_ignored(rank, line, line_no):
            return
        if self._child_summary(raw, line, line_no, offset):
            return
        if self._agent_failed(raw, line, line_no, offset):
            return
        if _TRACEBACK in line:
            if self.last_exception is not None and not self.chained:
                self.first_traceback_done = True  # a new, later error: not the earliest
            self.traceback_seen, self.chained = True, False
            return
        if any(c in line for c in _CHAINED):
            self.chained = True
            return
        if self._closes_dead_workers(line):
            return
        for code, detail in classify_line(line):
            known = self.first.get(code)
            # the first of each kind, unless it only said "failed or timed out" and this says how
            if known is None or (known.detail == NCCL_GENERIC and detail != NCCL_GENERIC):
                self.first[code] = Evidence(code, detail, _trim(raw), self.file, line_no, offset)
        m = _EXCEPTION.match(line.rstrip())
        if m is not None and m.group("name").endswith(_SIGNAL_EXCEPTION):
            # sent from outside: a task's end, as srun's is (a worker's error before it stays
            # the first traceback's)
            detail = _signalled(m.group("msg") or "")
            self.first.setdefault(
                "exit_code", Evidence("exit_code", detail, _trim(raw), self.file, line_no, offset)
            )
            self.traceback_seen = self.last_exception is not None
            return
        if self.traceback_seen and not self.first_traceback_done:
            if m:
                interrupt = m.group("name").rsplit(".", 1)[-1] == "KeyboardInterrupt"
                self.last_exception = Evidence(
                    "interrupted" if interrupt else "exception",
                    _INTERRUPT_DETAIL if interrupt else _trim(line),
                    _trim(raw),
                    self.file,
                    line_no,
                    offset,
                )
                self.chained = False

    def evidence(self) -> list[Evidence]:
        """What the file said, each kind once. torchrun's summary of how its worker ended is
        the task's exit, over srun's or slurmstepd's report that the task (torchrun) did."""
        first = (
            self.first if self.child_exit is None else {**self.first, "exit_code": self.child_exit}
        )
        out = list(first.values())
        # the worker's own traceback, where printed, else the one torchrun's summary carries
        said = self.last_exception or self.child_exception
        if said is not None:
            out.append(said)
        return sorted(out, key=lambda e: e.line_no)


def scan_lines(lines: Iterable[tuple[int, str]], file: str) -> list[Evidence]:
    """Evidence in (line number, text) pairs; a convenience for tests and small inputs."""
    collector = EvidenceCollector(file)
    for no, text in lines:
        collector.feed(text, no)
    return collector.evidence()


def with_attempt(evidence: Evidence, attempt: int | None) -> Evidence:
    return replace(evidence, attempt=attempt)
