"""Why did a job stop without a result? Classify what Slurm, PyTorch and submitit printed.

Each rule matches the stable core of one message, not its decoration: host names, job ids,
time formats, srun's ``0: `` labels and PyTorch's ``[rank0]:`` prefixes vary between
versions and clusters. A job usually prints several symptoms (a CUDA OOM on one rank is
followed by a collective timeout on the others and by srun's exit codes), so every match is
kept as :class:`Evidence` and :func:`diagnose` picks the root cause by a fixed priority:
what Slurm did to the job first, then resource exhaustion, then distributed timeouts, then
the last Python exception, then bare exit codes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

REASONS: dict[str, str] = {
    "time_limit": "time limit",
    "preemption": "preempted",
    "node_failure": "node failure",
    "requeue": "requeued, no later attempt found",
    "cancelled": "cancelled",
    "host_oom": "host out of memory (OOM kill)",
    "cuda_oom": "CUDA out of memory",
    "rendezvous_timeout": "rendezvous timeout",
    "collective_timeout": "NCCL/collective timeout",
    "exception": "Python exception",
    "exit_code": "task exit code",
    "unknown": "unknown or still running",
}
"""Reason code -> label, in priority order (the first present in a job's evidence wins)."""

_PRIORITY = {code: i for i, code in enumerate(REASONS)}
_MAX_TEXT = 300

# srun --label prints "0: " (padded to the widest task id); torch.distributed prefixes
# "[rank0]:" and torchrun "[default0]:".
_PREFIX = re.compile(r"^(?:\s*\d+:\s)?(?:\[(?:rank|default)\d+\]:\s?)?")

# Older Slurm appends "on <host>" after the reason; the reason itself is upper case.
_CANCELLED = re.compile(
    r"\*\*\*\s*(?P<what>JOB|STEP)\s+(?P<id>\S+).*?CANCELLED AT\s+(?P<when>\S+)"
    r"(?:\s+DUE TO\s+(?P<why>[A-Z][A-Z _]*[A-Z]))?"
)
_WHY = {
    "TIME LIMIT": "time_limit",
    "PREEMPTION": "preemption",
    "NODE FAILURE": "node_failure",
    "NODE FAIL": "node_failure",
    "JOB REQUEUE": "requeue",
}
_SUBMITIT_SIGNAL = re.compile(
    r"Caught signal (?P<sig>\w+) on \S+: this job is (?P<case>preempted|timed-out)"
)
_LIGHTNING_REQUEUE = re.compile(r"Requeued SLURM job:? (?P<id>\S+)")
_NODE_FAILURE = re.compile(r"srun: error: Node failure on (?P<host>\S+)", re.IGNORECASE)
_OOM_KILL = re.compile(r"Detected (?P<count>\d+) oom[-_]kill event", re.IGNORECASE)
_MEM_LIMIT = re.compile(r"Exceeded (?:job|step) memory limit", re.IGNORECASE)
_SRUN_TASK = re.compile(
    r"srun: error: (?P<host>\S+): (?P<tasks>tasks? [\d,\-]+): (?P<what>[^\r\n]+?)\s*$"
)
_EXIT_CODE = re.compile(r"Exited with exit code (?P<code>\d+)", re.IGNORECASE)
_CUDA_OOM = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|torch(?:\.cuda)?\.OutOfMemoryError",
    re.IGNORECASE,
)
_COLLECTIVE = re.compile(
    r"Watchdog caught collective operation timeout"
    r"|ran for \d+ milliseconds before timing out"
    r"|Timed out waiting \d+ ?ms for (?:recv|send) operation to complete"
    r"|Some NCCL operations have failed or timed out"
)
_COLLECTIVE_OP = re.compile(r"OpType=(?P<op>\w+).*?Timeout\(ms\)=(?P<ms>\d+)")
_RENDEZVOUS = re.compile(
    r"DistStoreError"
    r"|Timed out after \d+ seconds waiting for clients"
    r"|Timed out initializing process group in store based barrier"
    r"|client socket has timed out after"
    r"|TCP client failed to connect/validate to host .* timed out"
    r"|RendezvousTimeoutError"
)
_CLIENTS = re.compile(r"(?P<joined>\d+)/(?P<total>\d+) clients joined")
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(
    r"^(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
    r"(?:Error|Exception|Interrupt|Exit|Failure|Timeout))(?::\s*(?P<msg>.*))?$"
)

KEYWORDS = re.compile(
    rb"CANCELLED|Cancelled|Traceback|rror|xception|Interrupt|Exit|Failure|Timeout"
    rb"|Out Of Memory|out of memory|oom|Watchdog|timed out|Timed out|timing out|this job is"
    rb"|Requeued|memory limit|srun: error"
)
"""A cheap byte-level pre-filter: every line any rule can match contains one of these."""


@dataclass(frozen=True)
class Evidence:
    """One line of a log that says something about why a job stopped."""

    code: str
    detail: str
    """Short human explanation: the exception line, ``task 3 on node7: exit code 1``..."""
    line: str
    """The line as printed (trimmed to 300 characters)."""
    file: str
    line_no: int
    offset: int = -1
    """Byte offset of the line in its file (orders it against the file's start events)."""
    attempt: int | None = None
    """restart_count of the start event this line follows in the same file, if any."""

    @property
    def label(self) -> str:
        return REASONS[self.code]

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line_no}"


def _trim(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def classify_line(line: str) -> list[tuple[str, str]]:
    """Every (reason code, detail) the line shows, exceptions excepted (they need context)."""
    found: list[tuple[str, str]] = []
    m = _CANCELLED.search(line)
    if m:
        why = (m.group("why") or "").upper()
        code = "node_failure" if why.startswith("NODE FAIL") else _WHY.get(why, "cancelled")
        suffix = f" due to {why.lower()}" if why else ""
        found.append(
            (
                code,
                f"{m.group('what').lower()} {m.group('id')} cancelled at {m.group('when')}{suffix}",
            )
        )
    m = _SUBMITIT_SIGNAL.search(line)
    if m:
        code = "preemption" if m.group("case") == "preempted" else "time_limit"
        found.append((code, f"submitit caught {m.group('sig')}: job {m.group('case')}"))
    m = _LIGHTNING_REQUEUE.search(line)
    if m:
        found.append(("requeue", f"Lightning requeued Slurm job {m.group('id')}"))
    m = _NODE_FAILURE.search(line)
    if m:
        found.append(("node_failure", f"node failure on {m.group('host')}"))
    m = _OOM_KILL.search(line)
    if m:
        found.append(("host_oom", f"{m.group('count')} oom-kill event(s) in the job's cgroup"))
    elif _MEM_LIMIT.search(line):
        found.append(("host_oom", "exceeded the Slurm memory limit"))
    m = _SRUN_TASK.search(line)
    if m:
        what = m.group("what")
        where = f"{m.group('tasks')} on {m.group('host')}"
        if "out of memory" in what.lower():
            found.append(("host_oom", f"{where}: out of memory"))
        else:
            code_m = _EXIT_CODE.search(what)
            detail = f"exit code {code_m.group('code')}" if code_m else what.lower()
            found.append(("exit_code", f"{where}: {detail}"))
    if _CUDA_OOM.search(line):
        m2 = re.search(r"Tried to allocate [\d.]+ \w+", line)
        found.append(("cuda_oom", m2.group(0) if m2 else "CUDA out of memory"))
    if _COLLECTIVE.search(line):
        m2 = _COLLECTIVE_OP.search(line)
        detail = (
            f"{m2.group('op')} timed out after {int(m2.group('ms')) / 1000:g} s"
            if m2
            else "a collective operation timed out"
        )
        found.append(("collective_timeout", detail))
    if _RENDEZVOUS.search(line):
        m2 = _CLIENTS.search(line)
        detail = (
            f"{m2.group('joined')}/{m2.group('total')} processes joined the rendezvous"
            if m2
            else "processes did not all meet at start-up"
        )
        found.append(("rendezvous_timeout", detail))
    return found


@dataclass
class EvidenceCollector:
    """Feeds on the lines of one file; keeps a bounded set of evidence (first of each kind,
    and the last exception line after a traceback)."""

    file: str
    first: dict[str, Evidence] = field(default_factory=dict)
    last_exception: Evidence | None = None
    traceback_seen: bool = False

    def feed(self, raw: str, line_no: int, offset: int = -1) -> None:
        line = _PREFIX.sub("", raw.rstrip("\r\n"), count=1)
        if _TRACEBACK in line:
            self.traceback_seen = True
            return
        for code, detail in classify_line(line):
            if code not in self.first:
                self.first[code] = Evidence(code, detail, _trim(raw), self.file, line_no, offset)
        if self.traceback_seen:
            m = _EXCEPTION.match(line.rstrip())
            if m:
                self.last_exception = Evidence(
                    "exception", _trim(line), _trim(raw), self.file, line_no, offset
                )

    def evidence(self) -> list[Evidence]:
        out = list(self.first.values())
        if self.last_exception is not None:
            out.append(self.last_exception)
        return sorted(out, key=lambda e: e.line_no)


def scan_lines(lines: Iterable[tuple[int, str]], file: str) -> list[Evidence]:
    """Evidence in (line number, text) pairs; a convenience for tests and small inputs."""
    collector = EvidenceCollector(file)
    for no, text in lines:
        collector.feed(text, no)
    return collector.evidence()


@dataclass(frozen=True)
class Diagnosis:
    code: str
    label: str
    detail: str
    evidence: Evidence | None
    also_seen: tuple[str, ...]
    """Other reason codes present, in priority order (symptoms of the root cause)."""


def diagnose(evidence: Sequence[Evidence]) -> Diagnosis:
    """Pick the root cause by priority; the last exception wins among exceptions."""
    if not evidence:
        return Diagnosis(
            "unknown",
            REASONS["unknown"],
            "no result and no failure message: still running, or killed without a word",
            None,
            (),
        )
    best: dict[str, Evidence] = {}
    for ev in evidence:
        if ev.code not in best or ev.code == "exception":
            best[ev.code] = ev
    codes = sorted(best, key=_PRIORITY.__getitem__)
    top = best[codes[0]]
    return Diagnosis(top.code, top.label, top.detail, top, tuple(codes[1:]))


def with_attempt(evidence: Evidence, attempt: int | None) -> Evidence:
    return replace(evidence, attempt=attempt)
