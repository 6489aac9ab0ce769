"""Why did a job stop without a result? Classify what Slurm, PyTorch and submitit printed.

Each rule matches the stable core of one message, not its decoration: host names, job ids,
time formats, srun's ``0: `` labels and PyTorch's ``[rank0]:`` prefixes vary between
versions and clusters. A job usually prints several symptoms (a CUDA OOM on one rank is
followed by a collective timeout on the others and by srun's exit codes), so every match is
kept as :class:`Evidence`, with its file and line; :mod:`.collect` reads what needs the
lines around it (tracebacks, torchrun's summaries), and :mod:`.cause` picks the root cause
among them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from analysis.read.failures.collective_lines import (
    collective_error_detail,
    collective_mismatch,
    collective_timeout,
)
from analysis.read.failures.cuda_lines import cuda_error, cuda_oom

REASONS: dict[str, str] = {
    "time_limit": "time limit",
    "preemption": "preempted",
    "node_failure": "node failure",
    "requeue": "requeued, no later attempt found",
    "cancelled": "cancelled",
    "host_oom": "host out of memory (OOM kill)",
    "cuda_oom": "CUDA out of memory",
    "cuda_error": (
        "CUDA error (a GPU kernel faulted, the torch build or the driver does not fit the "
        "node's GPU, or another process holds it)"
    ),
    "config_error": "configuration error",
    "rendezvous_error": "rendezvous host not resolvable or reachable",
    "rendezvous_timeout": "rendezvous timeout",
    "port_in_use": (
        "rendezvous port already in use on rank 0's node (another job or a stale process "
        "holds it: give the job a port of its own, MASTER_PORT)"
    ),
    "gpu_fault": "GPU hardware fault (the node's, not the job's: leave the node out, --exclude)",
    "shared_memory": (
        "DataLoader workers out of shared memory (/dev/shm too small: fewer workers, or a "
        "larger /dev/shm)"
    ),
    "disk_full": "disk full or over quota",
    "worker_died": "DataLoader worker died (crashed or exited: its own error is lost with it)",
    "collective_mismatch": (
        "collective mismatch across ranks (ranks ran different collectives, e.g. different "
        "numbers of steps or batches)"
    ),
    "collective_timeout": "NCCL/collective timeout",
    "collective_error": "NCCL/collective error (peer exited or network)",
    "exception": "Python exception",
    "interrupted": "interrupted",
    "exit_code": "task exit code",
    "memory_limit": "memory limit reached at some point (not an OOM kill)",
    "never_started": "never started",
    "log_missing": "log missing",
    "no_measurement": "finished without a measurement (no training step)",
    "unknown": "unknown or still running",
}
"""Reason code -> label."""

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
# "Exceeded job memory limit" (older cgroup plugin); jobacct_gather's OverMemoryKill:
# "StepId=123.0 exceeded memory limit (8589934592 > 4294967296), being killed" (older:
# "Job 123 exceeded memory limit (...)")
# Slurm's note at a step's end that its cgroup reached the memory limit at some point (page
# cache counts; the kernel reclaimed memory): printed whether or not anything was killed, so
# not a kill ("Exceeded step memory limit at some point.", older "Exceeded job memory limit at
# some point.", newer "StepId=123.0 exceeded memory+swap limit at some point.")
_MEM_NOTE = re.compile(r"exceeded (?:job |step )?memory(?:\+swap)? limit at some point", re.I)
_MEM_LIMIT = re.compile(
    r"Exceeded (?:job|step) memory limit"
    r"|exceeded memory limit(?: \((?P<used>\d+) > (?P<limit>\d+)\))?",
    re.IGNORECASE,
)
# slurmstepd's end of a step whose task exited non-zero, and of a job whose node reported an
# uncorrectable memory error (hardware: from outside the job)
_STEP_FAILED = re.compile(
    r"\*\*\*\s*STEP\s+(?P<id>\S+)\s+ON\s+(?P<host>\S+)\s+FAILED\s*\((?P<why>[^)]*)\)"
)
_MEMORY_ERROR = re.compile(
    r"\*\*\*\s*(?P<what>JOB|STEP)\s+(?P<id>\S+)\s+ON\s+(?P<host>\S+)\s+"
    r"UNCORRECTABLE MEMORY ERROR(?:\s+AT\s+(?P<when>\S+))?"
)
_SRUN_TASK = re.compile(
    r"srun: error: (?P<host>\S+): (?P<tasks>tasks? [\d,\-]+): (?P<what>[^\r\n]+?)\s*$"
)
_EXIT_CODE = re.compile(r"Exited with exit code (?P<code>\d+)", re.IGNORECASE)
# the batch script's shell, when a program it ran in the foreground (not through srun) died of
# a signal: "/var/spool/slurmd/job123/slurm_script: line 12: 34567 Killed    python train.py"
_SHELL_SIGNAL = re.compile(
    r": line \d+: +(?P<pid>\d+) (?P<sig>Killed|Terminated|Segmentation fault|Aborted|Bus error)"
    r"(?: +\(core dumped\))? +(?P<cmd>\S[^\r\n]*?)\s*$"
)
SIGTERM_SENDERS = "Slurm's cancel, time limit or preemption, most often"
"""What usually sends a job's processes SIGTERM."""
SIGKILL_SENDERS = "the kernel's OOM killer or the scheduler, most often"
"""What usually sends a job's processes SIGKILL."""
_SHELL_SIGNALS = {
    "Killed": f"SIGKILL: {SIGKILL_SENDERS}",
    "Terminated": f"SIGTERM: {SIGTERM_SENDERS}",
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
}
_RENDEZVOUS = re.compile(
    r"DistStoreError"
    r"|Timed out after \d+ seconds waiting for clients"
    r"|Timed out initializing process group in store based barrier"
    r"|client socket has timed out after"
    r"|TCP client failed to connect/validate to host .* timed out"
    r"|RendezvousTimeoutError"
)
_JOB_ERROR = re.compile(r"scalescope train: error: (?P<msg>.*)$")
_UNKNOWN_KEY = re.compile(r"unknown key (?P<key>[\w.]+)")
_STOPPED_EARLY = "stopped early ("
"""How a run stopped by a signal says so (``fitting.TrainingStopped``): not the cause."""
_RENDEZVOUS_HOST = re.compile(
    r"rendezvous host '(?P<host>[^']*)'.*?: "
    r"(?P<what>does not resolve|rank 0 cannot bind|not reachable)"
)
_CLIENTS = re.compile(r"(?P<joined>\d+)/(?P<total>\d+) clients joined")
# rank 0's store could not listen on the rendezvous port: torch 2.2+ "The server socket has
# failed to listen on any local network address. port: 29500, useIpv6: 0, code: -98, name:
# EADDRINUSE, message: address already in use"; older "... failed to bind to [::]:29500
# (errno: 98 - Address already in use)", printed as a warning for each address tried too
_PORT_IN_USE = re.compile(r"\bEADDRINUSE\b|errno: 98 - Address already in use", re.IGNORECASE)
_PORT = re.compile(r"\bport: (?P<port>\d+)|:(?P<at>\d+) \(errno: 98\b")
# a GPU that failed under the job: CUDA's cudaErrorECCUncorrectable ("CUDA error:
# uncorrectable ECC error encountered", also in NCCL's "Cuda failure '...'"), NVML's "GPU is
# lost. Reboot the system to recover this GPU", the driver's "GPU has fallen off the bus"
_GPU_FAULT = re.compile(
    r"uncorrectable ECC error encountered|\bGPU is lost\b|fallen off the bus", re.IGNORECASE
)
# a DataLoader worker short of shared memory: its own "ERROR: Unexpected bus error encountered
# in worker. This might be caused by insufficient shared memory (shm).", the main process's
# "DataLoader worker (pid 3527) is killed by signal: Bus error. It is possible that
# dataloader's workers are out of shared memory. ...", and a batch's failed write into
# /dev/shm: "RuntimeError: unable to write to file </torch_3531_3962650647>" (newer: ":
# No space left on device (28)")
_SHARED_MEMORY = re.compile(
    r"insufficient shared memory|out of shared memory|killed by signal: Bus error"
    r"|unable to write to file </torch_",
    re.IGNORECASE,
)
# a DataLoader worker that died of a signal (torch names it as strsignal does: SIGKILL's
# "Killed", the kernel's OOM killer most often), or exited, taking its error with it: the
# main process's "DataLoader worker (pid 14300) is killed by signal: Aborted.", "... exited
# unexpectedly with exit code 3. Details are lost due to multiprocessing.", and the worker's own
# "ERROR: Unexpected segmentation fault encountered in worker." (torch 2.13); then, the
# exception the job ends with, "DataLoader worker (pid(s) 14300) exited unexpectedly"
_WORKER_DIED = re.compile(
    r"DataLoader worker \(pid (?P<pid>\d+)\) (?:is killed by signal: (?P<sig>[^.]+)"
    r"|exited unexpectedly with exit code (?P<code>-?\d+))"
    r"|Unexpected (?P<fault>segmentation fault|floating-point exception) encountered in worker"
    r"|DataLoader worker \(pid\(s\) (?P<pids>[\d, ]+)\) exited unexpectedly"
)
# the program a step or the batch script starts is not on the node: slurmstepd's "error:
# execve(): python: No such file or directory", the shell's "line 5: python: command not
# found" (for the programs a job starts; another missing tool, nvidia-smi say, need not end it)
_NOT_ON_NODE = re.compile(
    r"execve\(\): (?P<exec>[^:\s]+): No such file or directory"
    r"|: (?P<cmd>(?:\S*/)?(?:python[\d.]*|torchrun|scalescope|srun)): command not found"
)
_DISK_FULL = re.compile(r"No space left on device|Disk quota exceeded|\[Errno 122\]", re.IGNORECASE)
_INTERRUPTED = re.compile(r"^scalescope [\w-]+: interrupted$")
"""What ``scalescope train`` prints on a KeyboardInterrupt (Ctrl-C, SIGINT) instead of a
traceback."""
_INTERRUPT_DETAIL = "KeyboardInterrupt: Ctrl-C or SIGINT"
KEYWORDS = re.compile(
    rb"CANCELLED|Cancelled|Traceback|rror|xception|Interrupt|interrupted|Exit|Failure|Timeout"
    rb"|Out Of Memory|out of memory|oom|Watchdog|timed out|Timed out|timing out|this job is"
    rb"|Requeued|memory limit|srun: error|by peer|by remote peer|completion from peer"
    rb"|collective mismatch|mismatch between collectives|exhausted inputs|MEMORY ERROR|FAILED \("
    rb"|exitcode|\(local_rank: "
    rb"|EADDRINUSE|Address already in use|ECC error|GPU is lost|fallen off the bus"
    rb"|shared memory|</torch_|No space left on device|Disk quota exceeded|Errno 122"
    rb"|kernel image|driver version is insufficient|driver on your system is too old"
    rb"|device-side assert|illegal memory access|illegal instruction|misaligned address"
    rb"|launch failure|Assertion `|monitoredBarrier|DataLoader worker|encountered in worker"
    rb"|busy or unavailable|Duplicate GPU| Killed | Terminated |Segmentation fault|Aborted"
    rb"|execve|command not found"
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


_MEM_NOTE_DETAIL = (
    "the step reached its memory limit at some point (Slurm's note at the step's end; no "
    "process reported killed)"
)


def _slurm_step_end(line: str) -> list[tuple[str, str]]:
    """What Slurm prints when a step or its tasks end: memory kills, srun's task exits, a
    failed step, a node's memory error."""
    found: list[tuple[str, str]] = []
    m = _OOM_KILL.search(line)
    if m:
        found.append(("host_oom", f"{m.group('count')} oom-kill event(s) in the job's cgroup"))
    elif _MEM_NOTE.search(line):
        found.append(("memory_limit", _MEM_NOTE_DETAIL))
    else:
        m = _MEM_LIMIT.search(line)
        if m:
            sizes = f" ({m.group('used')} > {m.group('limit')})" if m.group("used") else ""
            found.append(("host_oom", f"exceeded the Slurm memory limit{sizes}"))
    m = _STEP_FAILED.search(line)
    if m:
        why = m.group("why").strip()
        found.append(("exit_code", f"step {m.group('id')} on {m.group('host')} failed ({why})"))
    m = _MEMORY_ERROR.search(line)
    if m:
        when = f" at {m.group('when')}" if m.group("when") else ""
        found.append(
            (
                "node_failure",
                f"uncorrectable memory error on {m.group('host')}{when} "
                f"({m.group('what').lower()} {m.group('id')})",
            )
        )
    m = _SHELL_SIGNAL.search(line)
    if m:
        sig = m.group("sig")
        found.append(
            (
                "exit_code",
                f"{_trim(m.group('cmd'))} (pid {m.group('pid')}, run by the batch script) "
                f"{sig.lower()} ({_SHELL_SIGNALS[sig]})",
            )
        )
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
    return found


_SENT_FROM_OUTSIDE = {
    "Terminated": f"SIGTERM: {SIGTERM_SENDERS}",
    "Interrupt": "SIGINT: Ctrl-C, most often",
    "Hangup": "SIGHUP: a closed session or a user's kill",
}
"""Signals a DataLoader worker dies of without a fault of its own: sent from outside, to every
process of the step at once (a cancel, a time limit, a user), so its death is a task's end,
a consequence of what sent it (read as ``exit_code``, as srun's report of a task's end is)."""


def dead_workers(line: str) -> tuple[frozenset[str], bool]:
    """The pids of the DataLoader workers the line says died, and whether it is the main
    process's closing line ("DataLoader worker (pid(s) ...) exited unexpectedly"), which
    torch prints after the line that says how (where it knows)."""
    m = _WORKER_DIED.search(line)
    if m is None or m.group("fault"):
        return frozenset(), False
    if m.group("pids"):
        return frozenset(p.strip() for p in m.group("pids").split(",") if p.strip()), True
    return frozenset({m.group("pid")}), False


def _worker_died(line: str) -> list[tuple[str, str]]:
    """A DataLoader worker that died: killed by SIGKILL (read as a host OOM kill, the kernel's
    OOM killer most often sending it), by a signal sent from outside (a task's end:
    :data:`_SENT_FROM_OUTSIDE`), or crashed or exited: how, where the line says. SIGBUS is
    shared memory's (:func:`_shared_memory_detail`)."""
    m = _WORKER_DIED.search(line)
    sig = (m.group("sig") or "") if m else ""
    if m and sig.startswith("Killed"):
        return [
            (
                "host_oom",
                f"DataLoader worker (pid {m.group('pid')}) killed by SIGKILL: the kernel's OOM "
                "killer, most often",
            )
        ]
    if not m or sig == "Bus error":
        return []
    if sig in _SENT_FROM_OUTSIDE:
        return [
            (
                "exit_code",
                f"DataLoader worker (pid {m.group('pid')}) killed by signal: {sig} "
                f"({_SENT_FROM_OUTSIDE[sig]})",
            )
        ]
    if m.group("fault"):
        how = f"a {m.group('fault')} in a DataLoader worker"
    elif m.group("pids"):
        how = f"DataLoader worker (pid(s) {m.group('pids')}) exited unexpectedly"
    else:
        end = f"killed by signal: {sig}" if sig else None
        end = end or f"exited with exit code {m.group('code')}"
        how = f"DataLoader worker (pid {m.group('pid')}) {end}"
    return [("worker_died", f"{how}: num_workers=0 shows its error")]


def _shared_memory_detail(said: str, line: str) -> str:
    """Which of a DataLoader's wordings of shared memory running out the line is."""
    if said.startswith("insufficient"):
        return "a DataLoader worker's bus error (SIGBUS)"
    if said.startswith("killed"):
        m = re.search(r"pid (\d+)", line)
        return f"DataLoader worker{f' (pid {m.group(1)})' if m else ''} killed by SIGBUS"
    if said.startswith("unable"):
        return "a batch's write into /dev/shm failed"
    return "out of shared memory"


def _environment(line: str) -> list[tuple[str, str]]:
    """What the node or the job's resources failed it with: a GPU's hardware fault, the
    rendezvous port taken, a DataLoader worker short of shared memory or killed, a disk full."""
    found: list[tuple[str, str]] = []
    m = _GPU_FAULT.search(line)
    if m:
        found.append(("gpu_fault", m.group(0)))
    if _PORT_IN_USE.search(line):
        m = _PORT.search(line)
        port = f"port {m.group('port') or m.group('at')}" if m else "the port"
        found.append(("port_in_use", f"{port} (EADDRINUSE)"))
    m = _SHARED_MEMORY.search(line)
    if m:
        found.append(("shared_memory", _shared_memory_detail(m.group(0).lower(), line)))
    elif _DISK_FULL.search(line):  # a full /dev/shm says "No space left on device" too
        quota = "quota" in line.lower() or "Errno 122" in line
        found.append(("disk_full", "disk quota exceeded" if quota else "no space left on device"))
    found += _worker_died(line)
    m = _NOT_ON_NODE.search(line)
    if m:
        program = m.group("exec") or m.group("cmd")
        found.append(
            (
                "config_error",
                f"{program} not found on the node: the job's environment is not active "
                "there (load it in the batch script: its modules, its virtual environment), "
                "or give the program's full path",
            )
        )
    return found


def classify_line(line: str) -> list[tuple[str, str]]:
    """Every (reason code, detail) the line shows, exceptions excepted (they need context)."""
    found: list[tuple[str, str]] = []
    if _INTERRUPTED.match(line.strip()):
        found.append(("interrupted", _INTERRUPT_DETAIL))
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
    found += _slurm_step_end(line)
    found += _environment(line)
    found += cuda_oom(line)
    found += cuda_error(line)
    found += collective_timeout(line)
    if _RENDEZVOUS.search(line):
        m2 = _CLIENTS.search(line)
        detail = (
            f"{m2.group('joined')}/{m2.group('total')} processes joined the rendezvous"
            if m2
            else "processes did not all meet at start-up"
        )
        found.append(("rendezvous_timeout", detail))
    m = _JOB_ERROR.search(line)
    if m:
        msg = m.group("msg")
        r = _RENDEZVOUS_HOST.search(msg)
        k = _UNKNOWN_KEY.search(msg)
        if r:
            found.append(("rendezvous_error", _trim(msg)))
        elif k or not msg.startswith(_STOPPED_EARLY):
            # every other line of the job's own refusing to start (a config file missing or
            # unreadable, a value out of range, the launch's variables, a rejected tracking
            # key) is the configuration's; a run stopped early says why elsewhere
            found.append(("config_error", _trim(msg)))
    found += collective_mismatch(line)
    # a watchdog timeout is re-raised as DistBackendError: that line is the timeout; gloo
    # adds its mismatch hint to the closed connection: that line is the mismatch
    said = ("collective_timeout", "rendezvous_timeout", "collective_mismatch")
    failed = None if any(c in said for c, _ in found) else collective_error_detail(line)
    if failed:
        found.append(("collective_error", failed))
    return found
