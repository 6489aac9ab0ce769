"""The lines of a failed job that say a collective failed it: timed out (NCCL's watchdog,
gloo's send and receive, gloo's monitored barrier), ranks that ran different collectives, and
a collective that failed outright (a peer gone, the network). :mod:`.classify` reads every
line through them, and :mod:`.cause` orders what they find."""

from __future__ import annotations

import re

_COLLECTIVE = re.compile(
    r"Watchdog caught collective operation timeout"
    r"|ran for \d+ milliseconds before timing out"
    r"|Timed out waiting \d+ ?ms for (?:recv|send) operation to complete"
)
# gloo's monitored_barrier, which names the ranks that did not arrive: "[Rank 0]: Rank 1
# failed to pass monitoredBarrier in 1000 ms" (with wait_all_ranks: "Ranks 1, 3 failed ...")
_MONITORED = re.compile(
    r"Ranks? (?P<ranks>\d+(?:, ?\d+)*) failed to pass monitoredBarrier in (?P<ms>\d+) ms"
)
LATE_FOR_BARRIER = "did not reach the monitored barrier"
"""How a monitored barrier's timeout names the ranks that were late (:func:`names_late_ranks`)."""
_COLLECTIVE_OP = re.compile(r"OpType=(?P<op>\w+).*?Timeout\(ms\)=(?P<ms>\d+)")
# A collective that failed rather than timed out: a peer process died (its sockets closed)
# or the network failed. gloo (CPU): "[.../gloo/transport/tcp/pair.cc:534] Connection closed
# by peer [10.0.0.2]:4321", "Read error [...]: Connection reset by peer"; NCCL through
# torch: "DistBackendError: NCCL error in: ...ProcessGroupNCCL.cpp:1970, remote process
# exited or there was a network error, NCCL version 2.19.3", then "ncclRemoteError: A call
# failed possibly due to a network error or a remote process exiting prematurely.";
# "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or
# device error."; "ncclInternalError: Internal check failed."; NCCL's own warnings
# "NET/IB : Got completion from peer ... with error 12", "Net : Connection closed by remote
# peer host<1234>"; older torch "RuntimeError: NCCL error: unhandled system error".
_COLLECTIVE_ERROR = re.compile(
    r"Connection (?:closed|reset) by (?:remote )?peer"
    r"|\bnccl(?:Remote|System|Internal)Error\b"
    r"|NCCL error"
    r"|DistBackendError"
    r"|NET/\w+ : Got completion from peer"
    # printed after a watchdog timeout and before an NCCL error alike: the line that says
    # which comes next to it
    r"|Some NCCL operations have failed or timed out"
)
# Ranks that called different collectives, or different numbers of them (a rank with more
# batches than another, uneven data): gloo's size check "[enforce fail at .../pair.cc:446]
# op.preamble.length <= op.nbytes. 8 vs 4. Is there a distributed collective mismatch in your
# code?"; TORCH_DISTRIBUTED_DEBUG=DETAIL's "Detected mismatch between collectives on ranks.
# Rank 0 is running collective: CollectiveFingerPrint(..., OpType=ALLREDUCE, ...), but Rank 1
# is running collective: ..."; DDP's join (throw_on_early_termination) "Detected at least one
# rank that exhausted inputs. Throwing across all ranks."
_MISMATCH = re.compile(
    r"distributed collective mismatch"
    r"|mismatch between collectives"
    r"|rank that exhausted inputs"
)
_MISMATCH_RANK = re.compile(
    r"Rank (?P<rank>\d+) is running (?:\w+ )?collective: CollectiveFingerPrint\([^)]*?"
    r"OpType=(?P<op>\w+)"
)
_NCCL_CODE = re.compile(r"\b(?P<code>nccl(?:Remote|System|Internal)Error)\b")
_NCCL_WHAT = re.compile(r"NCCL error(?: in: [^,]*)?[,:]\s*(?P<what>[^,]+?)(?:,\s*NCCL version|$)")
NCCL_GENERIC = "NCCL operations failed or timed out; the process is taken down"


def collective_mismatch(line: str) -> list[tuple[str, str]]:
    """Ranks that ran different collectives, and what each ran where the line says."""
    return [("collective_mismatch", _mismatch_detail(line))] if _MISMATCH.search(line) else []


def collective_timeout(line: str) -> list[tuple[str, str]]:
    """A collective that timed out: which, after how long; for gloo's monitored barrier,
    which ranks did not arrive."""
    m = _MONITORED.search(line)
    if m:
        ranks, s = m.group("ranks"), int(m.group("ms")) / 1000
        who = f"rank{'s' if ',' in ranks else ''} {ranks}"
        return [("collective_timeout", f"{who} {LATE_FOR_BARRIER} in {s:g} s")]
    if not _COLLECTIVE.search(line):
        return []
    m = _COLLECTIVE_OP.search(line)
    return [
        (
            "collective_timeout",
            f"{m.group('op')} timed out after {int(m.group('ms')) / 1000:g} s"
            if m
            else "a collective operation timed out",
        )
    ]


def _mismatch_detail(line: str) -> str:
    """What each rank ran, where the message says (TORCH_DISTRIBUTED_DEBUG=DETAIL)."""
    ranks = [f"rank {m.group('rank')} runs {m.group('op')}" for m in _MISMATCH_RANK.finditer(line)]
    if len(ranks) >= 2:
        return ", ".join(ranks)
    if "exhausted inputs" in line:
        return "a rank ran out of data before the others (uneven data per rank)"
    return "ranks called different collectives (or different numbers of them)"


def collective_error_detail(line: str) -> str | None:
    """What a failed (not timed-out) collective says, or None if the line is not one."""
    if not _COLLECTIVE_ERROR.search(line):
        return None
    low = line.lower()
    m = _NCCL_CODE.search(line)
    if m:
        code = m.group("code")
        if code == "ncclRemoteError":
            return "a peer process exited or the network failed (ncclRemoteError)"
        if code == "ncclSystemError":
            return "a system call or the network failed (ncclSystemError)"
        return "NCCL internal check failed (ncclInternalError)"
    if "closed by" in low or "reset by" in low:
        how = "closed" if "closed by" in low else "reset"
        return f"connection {how} by a peer: another process exited or the network failed"
    if "completion from peer" in low:
        return "network error: a transfer from a peer failed"
    if "have failed or timed out" in low:
        return NCCL_GENERIC
    m = _NCCL_WHAT.search(line)
    if m:
        return f"NCCL error: {m.group('what').strip()}"
    return "a collective failed (DistBackendError)" if "DistBackendError" in line else "NCCL error"


def names_late_ranks(code: str, detail: str) -> bool:
    """Is this reading a monitored barrier's timeout, which names the ranks that did not
    arrive? The late rank, arriving after the barrier gave up, finds its peer gone and says
    "Connection closed by peer": a consequence of its own lateness (:mod:`.cause`)."""
    return code == "collective_timeout" and LATE_FOR_BARRIER in detail
