"""gloo's monitored barrier names the ranks that did not arrive: that is the timeout's detail,
over the generic recv timeout it re-raises, as torch 2.13 prints it (its lines below are one
run's, two ranks, rank 1 three seconds late for a one-second barrier)."""

from __future__ import annotations

from analysis.read.failures.cause import diagnose
from analysis.read.failures.classify import KEYWORDS, classify_line
from analysis.read.failures.collect import scan_lines

RANK0 = [
    "[rank0]:[E1201 14:13:45.078755191 ProcessGroupGloo.cpp:67] [Rank 0]: Rank 1 failed to pass "
    "monitoredBarrier in 1000 ms",
    "Traceback (most recent call last):",
    '  File "train.py", line 7, in <module>',
    "RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 1000 ms",
    " Original exception: ",
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
    "waiting 999ms for recv operation to complete",
]

# the late rank's own log, the same run: it arrives after rank 0 gave up and left
RANK1 = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "train.py", line 7, in <module>',
    "[rank1]:     dist.monitored_barrier(timeout=datetime.timedelta(seconds=1))",
    "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553]"
    " Connection closed by peer [127.0.0.1]:30611. This is typically caused by a remote worker "
    "crashing. Check the logs of the remote worker before reporting an error. GLHF!",
]


def test_the_ranks_that_did_not_arrive_are_the_timeouts_detail() -> None:
    assert KEYWORDS.search(RANK0[0].encode())
    d = diagnose(scan_lines(enumerate(RANK0, 1), "slurm-31.out"))
    assert d.code == "collective_timeout"
    assert d.detail == "rank 1 did not reach the monitored barrier in 1 s"
    assert d.evidence is not None and d.evidence.line_no == 1


def test_several_late_ranks_are_all_named() -> None:
    line = "RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms"
    assert classify_line(line) == [
        ("collective_timeout", "ranks 1, 3 did not reach the monitored barrier in 30 s")
    ]


def test_the_late_ranks_closed_connection_is_the_barriers_consequence() -> None:
    """Between two logs, whose lines cannot be ordered, a closed connection outranks a
    timeout (a peer that died leaves the others waiting); but the barrier names rank 1 as
    late, and rank 1's closed connection is rank 0 leaving after it gave up."""
    evidence = [
        *scan_lines(enumerate(RANK0, 1), "rank0.out"),
        *scan_lines(enumerate(RANK1, 1), "rank1.out"),
    ]
    d = diagnose(evidence)
    assert (d.code, d.detail) == (
        "collective_timeout",
        "rank 1 did not reach the monitored barrier in 1 s",
    )
    assert d.evidence is not None and d.evidence.file == "rank0.out"
    assert "collective_error" in d.also_seen
    # a timeout that names no rank still yields to the closed connection
    plain = scan_lines(enumerate(RANK0[-1:], 1), "rank0.out")
    assert [e.code for e in plain] == ["collective_timeout"]
    assert diagnose([*plain, *scan_lines(enumerate(RANK1, 1), "rank1.out")]).code == (
        "collective_error"
    )
