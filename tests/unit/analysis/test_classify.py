"""The failure classifier on each real wording, with older and newer variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.read.failures import classify
from analysis.read.failures.cause import CAUSAL_ORDER, CONSEQUENCE_ONLY, diagnose
from analysis.read.failures.classify import (
    KEYWORDS,
    REASONS,
    Evidence,
    classify_line,
)
from analysis.read.failures.collect import scan_lines
from analysis.read.scan import scan_evidence

CASES = [
    # time limit: Slurm 20+, older Slurm ("on <host>" after the reason), step line, srun label
    (
        "time_limit",
        "slurmstepd: error: *** JOB 867816 ON c0700a-s1 CANCELLED AT "
        "2021-05-11T12:06:17 DUE TO TIME LIMIT ***",
    ),
    (
        "time_limit",
        "slurmstepd: *** JOB 1234 CANCELLED AT 2015-04-09T14:22:09 DUE TO TIME LIMIT "
        "on nid00042 ***",
    ),
    (
        "time_limit",
        "srun: error: *** STEP 494583.0 ON host CANCELLED AT 2023-01-01T00:00:00 "
        "DUE TO TIME LIMIT ***",
    ),
    (
        "time_limit",
        "0: slurmstepd: error: *** JOB 12 ON n1 CANCELLED AT 2024-02-02T02:02:02 DUE "
        "TO TIME LIMIT ***",
    ),
    (
        "time_limit",
        "submitit WARNING (2025-03-01 12:50:00,000) - Caught signal SIGUSR2 on "
        "gpu-a01: this job is timed-out.",
    ),
    # preemption
    (
        "preemption",
        "slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT "
        "2021-06-18T13:05:36 DUE TO PREEMPTION ***",
    ),
    (
        "preemption",
        "submitit WARNING (2024-01-01 10:00:00,000) - Caught signal SIGUSR2 on "
        "node7: this job is preempted.",
    ),
    # node failure
    (
        "node_failure",
        "slurmstepd: error: *** JOB 5003 ON gpu-a01 CANCELLED AT "
        "2025-03-01T09:30:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    ),
    ("node_failure", "srun: error: Node failure on gpu-a02"),
    # requeue
    (
        "requeue",
        "slurmstepd: error: *** JOB 5004 ON gpu-a01 CANCELLED AT 2025-03-01T09:20:00 "
        "DUE TO JOB REQUEUE ***",
    ),
    ("requeue", "Requeued SLURM job: 5004"),
    # cancelled (scancel): job and step
    (
        "cancelled",
        "slurmstepd: error: *** JOB 5005 ON gpu-a01 CANCELLED AT 2025-03-01T09:05:00 ***",
    ),
    (
        "cancelled",
        "slurmstepd: error: *** STEP 494583.0 ON host CANCELLED AT 2023-06-01T10:00:00 ***",
    ),
    # host OOM: cgroup message old and new step formats, srun task line, old memory limit
    (
        "host_oom",
        "slurmstepd: error: Detected 1 oom-kill event(s) in step 3495064.0 cgroup. Some "
        "of your processes may have been killed by the cgroup out-of-memory handler.",
    ),
    (
        "host_oom",
        "slurmstepd: error: Detected 2 oom_kill events in StepId=3495064.batch. Some of "
        "your processes may have been killed by the cgroup out-of-memory handler.",
    ),
    ("host_oom", "srun: error: host: task 4: Out Of Memory"),
    ("host_oom", "slurmstepd: error: Exceeded job memory limit"),
    # CUDA OOM: torch >= 2.5, 1.13-2.4, older RuntimeError, CUDA runtime error, rank prefix
    (
        "cuda_oom",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 6 "
        "has a total capacity of 94.97 GiB of which 1.21 GiB is free.",
    ),
    (
        "cuda_oom",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB "
        "(GPU 0; 15.78 GiB total capacity)",
    ),
    (
        "cuda_oom",
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB "
        "total capacity; 14.5 GiB already allocated)",
    ),
    ("cuda_oom", "RuntimeError: CUDA error: out of memory"),
    ("cuda_oom", "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.5 GiB"),
    # collective timeouts: NCCL 1.x and 2.x formats, gloo on CPU
    (
        "collective_timeout",
        "[Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=20585, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
        "for 600000 milliseconds before timing out.",
    ),
    (
        "collective_timeout",
        "[E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=5, OpType=BROADCAST, Timeout(ms)=1800000) ran for "
        "1800513 milliseconds before timing out.",
    ),
    (
        "collective_timeout",
        "[rank0]:[E1121 10:00:00.000000 123 ProcessGroupNCCL.cpp:632] [PG ID 0 "
        "PG GUID 0(default_pg) Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600026 milliseconds before timing out.",
    ),
    (
        "collective_timeout",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/"
        "unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
    ),
    # rendezvous: DistStoreError (2.2+), the store-based barrier (older), client socket
    (
        "rendezvous_timeout",
        "torch.distributed.DistStoreError: Timed out after 16 seconds waiting "
        "for clients. 1/2 clients joined.",
    ),
    (
        "rendezvous_timeout",
        "RuntimeError: Timed out initializing process group in store based "
        "barrier on rank: 0, for key: store_based_barrier_key:1 (world_size=2, worker_count=1, "
        "timeout=0:30:00)",
    ),
    (
        "rendezvous_timeout",
        "torch.distributed.DistNetworkError: The client socket has timed out "
        "after 1800000ms while trying to connect to (node1, 15123).",
    ),
    # task exit codes
    ("exit_code", "srun: error: host: task 3: Exited with exit code 1"),
    ("exit_code", "srun: error: host: tasks 2,4-5,7: Terminated"),
    ("exit_code", "srun: error: gpu-a02: tasks 4-7: Killed"),
    # collectives that failed, not timed out: a peer died or the network broke
    (
        "collective_error",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
        "by peer [127.0.0.1]:10895",
    ),
    (
        "collective_error",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error "
        "[192.168.70.92]:25266: Connection reset by peer",
    ),
    (
        "collective_error",
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/"
        "csrc/distributed/c10d/ProcessGroupNCCL.cpp:3763, remote process exited or there was a "
        "network error, NCCL version 2.28.8",
    ),
    (
        "collective_error",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely.",
    ),
    (
        "collective_error",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
        "device error.",
    ),
    ("collective_error", "ncclInternalError: Internal check failed."),
    (
        "collective_error",
        "gpu-a01:183006:183181 [1] misc/socket.cc:538 NCCL WARN Net : Connection closed by "
        "remote peer gpu-a02<47861>",
    ),
    (
        "collective_error",
        "NET/IB : Got completion from peer 11.214.147.122<39138> with error 12, opcode 0, len 0, "
        "vendor err 129",
    ),
    ("collective_error", "RuntimeError: NCCL error: unhandled system error, NCCL version 2.7.8"),
    # one-line errors of scalescope train itself (srun's label and a rank prefix stripped)
    (
        "config_error",
        "0: scalescope train: error: SCALESCOPE_OVERRIDES: unknown key trainer.max_epoch; did "
        "you mean trainer.max_epochs? (valid keys in trainer: scaling, batch_size, max_epochs)",
    ),
    (
        "rendezvous_error",
        "1: scalescope train: error: rendezvous host 'node2' (the first node of the Slurm node "
        "list (MASTER_ADDR unset)), port 25050: does not resolve on node2 (rank 1: [Errno -2] "
        "Name or service not known); set MASTER_ADDR to an address every compute node resolves",
    ),
    # Slurm's memory enforcement (OverMemoryKill, jobacct_gather): step and older job wording
    (
        "host_oom",
        "slurmstepd: error: StepId=7003.0 exceeded memory limit (8589934592 > 4294967296), "
        "being killed",
    ),
    (
        "host_oom",
        "slurmstepd: error: Job 7004 exceeded memory limit (8589934592 > 4294967296), being killed",
    ),
    # a step that ended with a task's non-zero exit: a consequence, as srun's exits
    (
        "exit_code",
        "slurmstepd: error: *** STEP 7006.0 ON node1 FAILED (non-zero exit code or other "
        "failure mode) ***",
    ),
    # the node's hardware failed under the job
    (
        "node_failure",
        "slurmstepd: error: *** JOB 7008 ON node1 UNCORRECTABLE MEMORY ERROR AT "
        "2026-01-01T00:00:00 ***",
    ),
]


@pytest.mark.parametrize(
    ("code", "line"), CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)]
)
def test_each_wording_is_classified(code: str, line: str) -> None:
    codes = [c for c, _ in classify_line(line)]
    assert code in codes, f"{line!r} gave {codes}"
    # and the diagnosis of that line alone names it
    assert diagnose(scan_lines([(1, line)], "f.out")).code == code


@pytest.mark.parametrize(
    ("code", "line"), CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)]
)
def test_each_wording_passes_the_byte_prefilter(code: str, line: str) -> None:
    """A log is searched for KEYWORDS before any rule runs: a line without one is never
    classified."""
    assert KEYWORDS.search(line.encode()), line


def test_slurm_details_name_the_step_and_the_node() -> None:
    details = dict(classify_line(CASES[-2][1]))
    assert details["exit_code"] == (
        "step 7006.0 on node1 failed (non-zero exit code or other failure mode)"
    )
    details = dict(classify_line(CASES[-1][1]))
    assert details["node_failure"] == (
        "uncorrectable memory error on node1 at 2026-01-01T00:00:00 (job 7008)"
    )
    assert dict(classify_line(CASES[-4][1]))["host_oom"] == (
        "exceeded the Slurm memory limit (8589934592 > 4294967296)"
    )


@pytest.mark.parametrize(
    "line",
    [
        "Epoch 3: 100%|██████████| 20/20 [00:01<00:00, 12.9it/s, v_num=0]",
        "node1:1:1 [0] NCCL INFO Channel 00/02 : 0 1",
        "The 'train_dataloader' does not have many workers which may be a bottleneck.",
        "submitit INFO (2025-01-01) - Job has not timed out. Ran 3 minutes out of requested 10.",
        "scalescope: trained 3 epoch(s), 93 steps in 1.992 s",
        "warnings.warn(  # UserWarning: error handling is deprecated",
    ],
)
def test_noise_is_not_a_failure(line: str) -> None:
    assert classify_line(line) == []


def test_details_carry_the_useful_numbers() -> None:
    details = dict(classify_line(CASES[0][1]))
    assert "2021-05-11T12:06:17" in details["time_limit"]
    (detail,) = [d for c, d in classify_line(CASES[22][1]) if c == "collective_timeout"]
    assert detail == "ALLREDUCE timed out after 600 s"
    (detail,) = [d for c, d in classify_line(CASES[26][1]) if c == "rendezvous_timeout"]
    assert "1/2" in detail
    assert (
        dict(classify_line("srun: error: n2: task 3: Exited with exit code 137"))["exit_code"]
        == "task 3 on n2: exit code 137"
    )


def test_last_exception_after_a_traceback_is_reported() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in <module>',
        "KeyError: 'x'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "a.py", line 3, in <module>',
        "    raise ValueError('batch does not divide')",
        "ValueError: batch does not divide",
        "srun: error: n1: task 0: Exited with exit code 1",
    ]
    d = diagnose(scan_lines(enumerate(lines, 1), "job.out"))
    assert d.code == "exception"
    assert d.detail == "ValueError: batch does not divide"
    assert d.evidence is not None and d.evidence.line_no == 10
    assert d.also_seen == ("exit_code",)


def test_exception_needs_a_traceback_and_rank_prefixes_are_stripped() -> None:
    assert diagnose(scan_lines([(1, "ValueError: printed, not raised")], "f")).code == "unknown"
    lines = ["[rank1]: Traceback (most recent call last):", "[rank1]: SystemExit: 3"]
    d = diagnose(scan_lines(enumerate(lines, 1), "f"))
    assert (d.code, d.detail) == ("exception", "SystemExit: 3")


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # a CUDA OOM on one rank makes the others time out and srun report exits: root cause
        ([CASES[17][1], CASES[22][1], CASES[29][1]], "cuda_oom"),
        # a job hung in a collective until the time limit: the timeout came first
        ([CASES[22][1], CASES[0][1]], "collective_timeout"),
        # a job that ran out of time, then its ranks complained while being killed
        ([CASES[0][1], CASES[22][1], CASES[29][1]], "time_limit"),
        # srun's task exit is printed before the traceback reaches the log: still a symptom
        (["srun: error: n1: task 0: Exited with exit code 1", CASES[17][1]], "cuda_oom"),
        # a peer's socket closed after it died of CUDA OOM
        ([CASES[17][1], CASES[33][1], CASES[29][1]], "cuda_oom"),
        ([CASES[26][1], CASES[29][1]], "rendezvous_timeout"),
        ([CASES[13][1], CASES[29][1]], "host_oom"),
    ],
)
def test_root_cause_wins_over_its_symptoms(lines: list[str], expected: str) -> None:
    assert diagnose(scan_lines(enumerate(lines, 1), "f")).code == expected


def test_no_evidence_is_unknown_or_still_running() -> None:
    d = diagnose([])
    assert d.code == "unknown" and d.evidence is None
    assert list(REASONS)[-1] == "unknown"


def _ev(lines: list[str], file: str) -> list[Evidence]:
    return scan_lines(enumerate(lines, 1), file)


OOM_RANK0 = [
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "scalescope/train.py", line 210, in fit',
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
    "a total capacity of 79.10 GiB of which 1.21 GiB is free.",
]
WATCHDOG = (
    "[rank{r}]:[E1121 10:11:02.000000 4242 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=20585, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out."
)
TIME_LIMIT = (
    "slurmstepd: error: *** JOB 7001 ON gpu-a01 CANCELLED AT 2025-03-01T12:00:17 DUE TO TIME "
    "LIMIT ***"
)


def test_oom_then_watchdog_then_time_limit_in_one_log() -> None:
    lines = [*OOM_RANK0, WATCHDOG.format(r=1), WATCHDOG.format(r=2), TIME_LIMIT]
    d = diagnose(_ev(lines, "slurm-7001.out"))
    assert (d.code, d.label) == ("cuda_oom", "CUDA out of memory")
    assert d.evidence is not None and d.evidence.where == "slurm-7001.out:3"
    # one entry per symptom, with its line; the OOM line is not repeated as an exception
    assert [(c.code, c.where) for c in d.consequences] == [
        ("collective_timeout", "slurm-7001.out:4"),
        ("time_limit", "slurm-7001.out:6"),
    ]
    assert d.consequences[1].line == TIME_LIMIT
    assert d.also_seen == ("collective_timeout", "time_limit")


def test_oom_then_watchdog_then_time_limit_across_rank_logs() -> None:
    """submitit: one log per task; lines of two logs cannot be ordered, the cause wins."""
    evidence = [
        *_ev([WATCHDOG.format(r=1), TIME_LIMIT], "7001_1_log.err"),
        *_ev(["starting", *OOM_RANK0], "7001_0_log.err"),
    ]
    d = diagnose(evidence)
    assert d.code == "cuda_oom" and d.evidence is not None
    assert d.evidence.where == "7001_0_log.err:4"
    assert [(c.code, c.where) for c in d.consequences] == [
        ("collective_timeout", "7001_1_log.err:1"),
        ("time_limit", "7001_1_log.err:2"),
    ]


STEP_LIMIT = (
    "slurmstepd: error: *** STEP 7003.0 ON node1 CANCELLED AT 2026-01-01T10:00:00 DUE TO TIME "
    "LIMIT ***"
)
JOB_LIMIT = (
    "slurmstepd: error: *** JOB 7003 ON node1 CANCELLED AT 2026-01-01T10:00:00 DUE TO TIME "
    "LIMIT ***"
)
GLOO_CLOSED = [
    "Traceback (most recent call last):",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
    "peer [10.0.0.1]:29500",
]
NCCL_ASYNC = (
    "[rank1]:[E0101 {at} 4242 ProcessGroupNCCL.cpp:1537] [PG 0 Rank 1] Process group watchdog "
    "thread terminated with exception: NCCL error: remote process exited or there was a network "
    "error, NCCL version 2.21.5"
)


JOB_CANCEL = "slurmstepd: error: *** JOB 7003 ON node1 CANCELLED AT 2026-01-01T10:00:00 ***"
"""scancel's (a user's or an administrator's): Slurm signals every task, as at the limit."""


@pytest.mark.parametrize(
    ("limit", "kill"),
    [(STEP_LIMIT, "time_limit"), (JOB_LIMIT, "time_limit"), (JOB_CANCEL, "cancelled")],
    ids=["step", "job", "scancel"],
)
@pytest.mark.parametrize(
    "peer",
    [
        GLOO_CLOSED,
        [NCCL_ASYNC.format(at="10:00:04.000000")],
        ["RuntimeError: Connection reset by peer"],
        [
            "[rank1]: ncclRemoteError: A call failed possibly due to a network error or a remote "
            "process exiting prematurely."
        ],
    ],
    ids=["gloo-closed", "nccl-stamped-after", "reset", "nccl-remote"],
)
def test_a_peer_lost_to_the_time_limits_kill_is_a_consequence_of_the_limit(
    limit: str, kill: str, peer: list[str]
) -> None:
    """Slurm kills every task at the time limit, or at a cancel; the first to die closes its
    connections and the peers still in a collective say so, in their own logs. Nothing says
    a rank died before the cancel (no error of its own, no task exit before it, no time on
    the peer's line before the cancel's): the limit, or the cancel, is the cause."""
    evidence = [
        *_ev(["Epoch 3: 40%", limit], "7003_0_log.err"),
        *_ev(peer, "7003_1_log.err"),
    ]
    d = diagnose(evidence)
    assert d.code == kill, d
    assert d.evidence is not None and d.evidence.where == "7003_0_log.err:2"
    assert d.also_seen == ("collective_error",)


@pytest.mark.parametrize(
    ("rank0", "others", "expected"),
    [
        # srun reported a task's exit before the cancel: a rank died first and the job hung
        # until the limit
        (
            ["srun: error: node2: task 1: Exited with exit code 1", STEP_LIMIT],
            {"7003_1_log.err": GLOO_CLOSED},
            "collective_error",
        ),
        # the peer's error is stamped 48 minutes before the cancel
        (
            [STEP_LIMIT],
            {"7003_1_log.err": [NCCL_ASYNC.format(at="09:12:00.000000")]},
            "collective_error",
        ),
        # stamped before a cancel just after New Year, on 31 December
        (
            [JOB_LIMIT.replace("2026-01-01T10:00:00", "2026-01-01T00:00:30")],
            {"7003_1_log.err": [NCCL_ASYNC.replace("E0101", "E1231").format(at="23:50:00.0")]},
            "collective_error",
        ),
        # the peer's own log has the cancel after its error
        (
            [STEP_LIMIT],
            {"7003_1_log.err": [*GLOO_CLOSED, JOB_LIMIT]},
            "collective_error",
        ),
        # a user's cancel the same: a task's exit before it, or the peer stamped long before
        (
            ["srun: error: node2: task 1: Exited with exit code 1", JOB_CANCEL],
            {"7003_1_log.err": GLOO_CLOSED},
            "collective_error",
        ),
        (
            [JOB_CANCEL],
            {"7003_1_log.err": [NCCL_ASYNC.format(at="09:12:00.000000")]},
            "collective_error",
        ),
        # a rank's own error wins over what its peers saw and over the limit
        (
            [STEP_LIMIT],
            {
                "7003_1_log.err": GLOO_CLOSED,
                "7003_2_log.err": [
                    "Traceback (most recent call last):",
                    "ValueError: shard 7 is empty",
                ],
            },
            "exception",
        ),
        # a rank hung in a collective before the limit: the hang is what the limit ended
        (
            [STEP_LIMIT],
            {"7003_1_log.err": GLOO_CLOSED, "7003_2_log.err": [WATCHDOG.format(r=2)]},
            "collective_timeout",
        ),
    ],
    ids=[
        "task-exit-first",
        "stamped-before",
        "new-year",
        "limit-after-it",
        "cancel-after-a-task-exit",
        "stamped-before-a-cancel",
        "own-error",
        "hang",
    ],
)
def test_what_a_rank_showed_before_the_time_limit_stays_the_cause(
    rank0: list[str], others: dict[str, list[str]], expected: str
) -> None:
    """A rank that failed before the cancel says so: srun's report of its exit before the
    cancel line, a time on its peer's line before the cancel's, its own error, a watchdog
    timeout (a hang of minutes). Then the peer-lost error is not the kill's."""
    evidence = _ev(rank0, "7003_0_log.err")
    for file, lines in others.items():
        evidence += _ev(lines, file)
    assert diagnose(evidence).code == expected


def test_a_peer_that_died_is_a_collective_error_not_a_timeout() -> None:
    lines = [
        "[rank1]: Traceback (most recent call last):",
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
        "c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, "
        "NCCL version 2.19.3",
        "[rank1]: ncclRemoteError: A call failed possibly due to a network error or a remote "
        "process exiting prematurely.",
        "srun: error: gpu-a02: task 1: Exited with exit code 1",
    ]
    d = diagnose(_ev(lines, "slurm-7002.out"))
    assert d.code == "collective_error"
    assert d.label == "NCCL/collective error (peer exited or network)"
    assert d.detail == "NCCL error: remote process exited or there was a network error"
    assert "exit_code" in d.also_seen


def test_watchdog_timeout_rethrown_as_dist_backend_error_stays_a_timeout() -> None:
    line = (
        "terminate called after throwing an instance of 'c10::DistBackendError' what(): [PG ID 0 "
        "PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: "
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
        "OpType=BROADCAST, Timeout(ms)=600000) ran for 600090 milliseconds before timing out."
    )
    assert [c for c, _ in classify_line(line)] == ["collective_timeout"]


def test_nccl_error_after_the_generic_warning_is_a_collective_error() -> None:
    """NCCL 2.14 / torch 2.0 print the generic line first, then what happened."""
    lines = [
        "[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        "terminate called after throwing an instance of 'std::runtime_error' what(): NCCL "
        "error: remote process exited or there was a network error, NCCL version 2.14.3",
        "srun: error: gpu-a01: task 0: Aborted",
    ]
    d = diagnose(_ev(lines, "f"))
    assert d.code == "collective_error" and d.evidence is not None
    assert (d.detail, d.evidence.line_no) == (
        "NCCL error: remote process exited or there was a network error",
        2,
    )
    assert [c.code for c in d.consequences] == ["exit_code"]


def test_gloo_peer_closed_on_cpu() -> None:
    lines = [
        "Traceback (most recent call last):",
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by "
        "peer [127.0.0.1]:10895",
    ]
    d = diagnose(_ev(lines, "f"))
    assert d.code == "collective_error" and d.consequences == ()
    assert d.detail.startswith("connection closed by a peer")


def test_earliest_traceback_wins_over_a_later_one() -> None:
    lines = [
        "Traceback (most recent call last):",
        "ValueError: global batch 4096 does not divide by world size 6",
        "Traceback (most recent call last):",
        "KeyboardInterrupt",
    ]
    d = diagnose(_ev(lines, "f"))
    assert d.detail == "ValueError: global batch 4096 does not divide by world size 6"


def test_consequence_only_codes_are_root_only_when_alone() -> None:
    assert "exit_code" in CONSEQUENCE_ONLY
    d = diagnose(_ev(["srun: error: n1: task 0: Exited with exit code 3"], "f"))
    assert d.code == "exit_code" and d.consequences == ()


def test_every_reason_has_a_causal_rank() -> None:
    assert set(CAUSAL_ORDER) == set(REASONS)


KILLED_RANK = [
    "srun: error: node2: task 1: Killed",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "slurmstepd: error: *** STEP 49.0 ON node1 CANCELLED AT 2026-11-24T10:00:00 ***",
    "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
    "closed by peer [127.0.0.1]:10895",
]


def test_a_step_srun_aborted_after_a_task_died_is_a_consequence() -> None:
    """kill -9 of one rank: srun cancels the step, and its line can reach the log before
    rank 0's collective error. The collective error is the cause; without it, the task's
    exit is, never the cancellation."""
    d = diagnose(_ev(KILLED_RANK, "slurm-49.out"))
    assert (d.code, d.evidence.line_no if d.evidence else None) == ("collective_error", 4)
    assert d.also_seen == ("exit_code", "cancelled")
    d = diagnose(_ev(KILLED_RANK[:3], "slurm-49.out"))
    assert (d.code, d.detail) == ("exit_code", "task 1 on node2: killed")
    assert d.also_seen == ("cancelled",)


def test_a_step_cancelled_before_any_task_exit_is_the_cause() -> None:
    """scancel of a running step: its tasks' exits come after and are consequences."""
    d = diagnose(_ev([KILLED_RANK[2], KILLED_RANK[0]], "f"))
    assert d.code == "cancelled" and d.also_seen == ("exit_code",)
    # a cancellation with a reason is never srun's doing
    d = diagnose(_ev([KILLED_RANK[0], TIME_LIMIT], "f"))
    assert d.code == "time_limit"


def test_a_config_error_is_the_cause_over_the_exit_it_causes() -> None:
    """A typo through sbatch: the job's one line names the key, srun then reports the exit;
    the failure row's cause is the configuration error with the key, not the exit code."""
    lines = [
        "scalescope train: error: SCALESCOPE_OVERRIDES: unknown key trainer.max_epoch; did you "
        "mean trainer.max_epochs? (valid keys in trainer: max_epochs)",
        "srun: error: node1: task 0: Exited with exit code 2",
    ]
    d = diagnose(scan_lines(list(enumerate(lines, 1)), "slurm-7.out"))
    assert d.code == "config_error"
    assert "unknown key trainer.max_epoch" in d.detail and "SCALESCOPE_OVERRIDES" in d.detail


NODE_FAILURE = (
    "slurmstepd: error: *** JOB 7103 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO NODE "
    "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"
)
PREEMPTION = (
    "slurmstepd: error: *** JOB 7204 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO "
    "PREEMPTION ***"
)
OOM_KILL = (
    "slurmstepd: error: Detected 1 oom_kill event in StepId=7101.0. Some of the step tasks "
    "have been OOM Killed."
)
PEER_CLOSED = (
    "1: [rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
    "closed by peer [10.0.0.1]:4321"
)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        # a node died: the other ranks' watchdogs fire before Slurm says why
        (
            [WATCHDOG.format(r=0), "srun: error: Node failure on node2", NODE_FAILURE],
            "node_failure",
        ),
        ([WATCHDOG.format(r=0), NODE_FAILURE], "node_failure"),
        # a harmless DataLoader traceback long before the job was preempted
        (
            [
                "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>",
                "Traceback (most recent call last):",
                '  File "torch/utils/data/dataloader.py", line 1477, in __del__',
                "AssertionError: can only test a child process",
                "Epoch 40: 100%|##########| 20/20",
                PREEMPTION,
            ],
            "preemption",
        ),
        # host OOM kill: the peers' errors first, Slurm's cgroup line when the step ends
        (
            [
                PEER_CLOSED,
                "srun: error: node1: task 0: Out Of Memory",
                "srun: error: node1: task 1: Exited with exit code 1",
                OOM_KILL,
            ],
            "host_oom",
        ),
        (
            [
                "1: [rank1]: Traceback (most recent call last):",
                "1: [rank1]: torch.distributed.DistBackendError: NCCL error in: "
                "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, "
                "NCCL version 2.19.3",
                "1: [rank1]: ncclRemoteError: A call failed possibly due to a network error or a "
                "remote process exiting prematurely.",
                "srun: error: node1: task 0: Killed",
                "srun: error: node1: task 1: Exited with exit code 1",
                OOM_KILL,
            ],
            "host_oom",
        ),
        ([WATCHDOG.format(r=1), OOM_KILL], "host_oom"),
    ],
)
def test_events_printed_late_still_win_within_one_log(lines: list[str], expected: str) -> None:
    """Outside events (node failure, preemption, requeue) cannot be caused by what the job
    printed before them, and Slurm prints a host OOM kill when the step ends, after the
    peers' collective errors: in one log they win over the earlier lines."""
    d = diagnose(_ev(lines, "slurm-7.out"))
    assert d.code == expected, d


def test_late_printed_causes_leave_the_rest_of_the_order_alone() -> None:
    # a CUDA OOM before the host OOM kill line stays the cause; so does a time limit that
    # ended a hung job before the kill line of its step
    assert diagnose(_ev([*OOM_RANK0, OOM_KILL], "f")).code == "cuda_oom"
    assert diagnose(_ev([TIME_LIMIT, OOM_KILL], "f")).code == "time_limit"
    # two outside events: the earliest
    d = diagnose(_ev([PREEMPTION, NODE_FAILURE], "f"))
    assert d.code == "preemption" and d.also_seen == ("node_failure",)


GLOO_MISMATCH = (
    "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
    "closed by peer [10.0.0.1]:4321. Is there a distributed collective mismatch in your code?"
)
DEBUG_MISMATCH = (
    "[rank0]: RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running "
    "collective: CollectiveFingerPrint(SequenceNumber=41, OpType=ALLREDUCE, TensorShape=[1], "
    "TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu)), "
    "but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=41, "
    "OpType=BROADCAST, TensorShape=[1], TensorDtypes=Float, "
    "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cpu))."
)
GLOO_SIZE_MISMATCH = (
    "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:446] "
    "op.preamble.length <= op.nbytes. 8 vs 4. Is there a distributed collective mismatch in "
    "your code?"
)
UNEVEN = (
    "RuntimeError: Detected at least one rank that exhausted inputs. Throwing across all ranks."
)


@pytest.mark.parametrize("line", [GLOO_MISMATCH, GLOO_SIZE_MISMATCH, DEBUG_MISMATCH, UNEVEN])
def test_a_collective_mismatch_is_its_own_reason(line: str) -> None:
    """Ranks that call different collectives (a rank running more steps than another, on
    uneven data) are a bug of the job, not a peer that died or a network error."""
    assert [c for c, _ in classify_line(line)] == ["collective_mismatch"]
    d = diagnose(_ev(["[rank1]: Traceback (most recent call last):", line], "f"))
    assert d.code == "collective_mismatch" and d.consequences == ()
    assert "mismatch" in d.label and "steps" in d.label
    assert classify.KEYWORDS.search(line.encode())


def test_a_collective_mismatch_names_what_each_rank_ran() -> None:
    (detail,) = [d for c, d in classify_line(DEBUG_MISMATCH) if c == "collective_mismatch"]
    assert detail == "rank 0 runs ALLREDUCE, rank 1 runs BROADCAST"


def test_a_collective_mismatch_is_the_cause_over_the_peers_errors() -> None:
    """The mismatch is the job's own error: the other rank's closed connection in its own log
    and srun's exits follow from it."""
    evidence = [
        *_ev(["RuntimeError: Connection reset by peer"], "7_0_log.err"),
        *_ev([GLOO_MISMATCH, "srun: error: n1: task 1: Exited with exit code 1"], "7_1_log.err"),
    ]
    d = diagnose(evidence)
    assert d.code == "collective_mismatch" and d.also_seen == ("exit_code", "collective_error")
    assert CAUSAL_ORDER.index("collective_mismatch") < CAUSAL_ORDER.index("collective_error")


def test_an_exception_python_ignored_is_not_an_error() -> None:
    """ "Exception ignored in" (a DataLoader worker's clean-up in ``__del__``): printed by
    jobs that go on and finish; it does not hide the real traceback that follows."""
    ignored = [
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>",
        "Traceback (most recent call last):",
        "AssertionError: can only test a child process",
    ]
    assert _ev(ignored, "f") == []
    real = ["Traceback (most recent call last):", "ValueError: batch does not divide"]
    d = diagnose(_ev([*ignored, *real], "f"))
    assert (d.code, d.detail) == ("exception", "ValueError: batch does not divide")


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: Exceeded step memory limit at some point.",
        "slurmstepd: Exceeded job memory limit at some point. Job may have been partially "
        "swapped out to disk.",
        "slurmstepd: error: StepId=7021.0 exceeded memory limit at some point.",
    ],
)
def test_a_memory_limit_reached_at_some_point_is_a_note_not_an_oom_kill(line: str) -> None:
    """The cgroup reached its limit at some point (page cache counts) and the kernel reclaimed
    memory: printed at a step's end whether or not anything was killed."""
    assert [code for code, _ in classify_line(line)] == ["memory_limit"]
    assert KEYWORDS.search(line.encode())
    d = diagnose(_ev(["Traceback (most recent call last):", "ValueError: x", line], "f"))
    assert d.code == "exception" and d.also_seen == ("memory_limit",)


IGNORED_STOP = [
    "Exception ignored in: <generator object _Loader.__iter__ at 0x7f>",
    "Traceback (most recent call last):",
    '  File "loader.py", line 12, in __iter__',
    "    raise StopIteration",  # its last line below says no Error or Exception
    "StopIteration",
]
REAL = [
    "Traceback (most recent call last):",
    '  File "scalescope/train.py", line 9, in <module>',
    "ValueError: the real error",
]


def _file_evidence(tmp_path: Path, lines: list[str]) -> list[Evidence]:
    """As a log is read: only the lines with a keyword reach the collector."""
    path = tmp_path / "slurm-9100.out"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    evidence, problems = scan_evidence(str(path), path.name)
    assert problems == []
    return evidence


@pytest.mark.parametrize("read", ["lines", "file"])
def test_an_ignored_exception_ends_with_its_traceback(tmp_path: Path, read: str) -> None:
    """The ignored traceback's last line (StopIteration) says neither Error nor Exception:
    the real traceback after it is still the job's error."""
    lines = [*IGNORED_STOP, *REAL]
    evidence = _ev(lines, "f") if read == "lines" else _file_evidence(tmp_path, lines)
    d = diagnose(evidence)
    assert (d.code, d.detail) == ("exception", "ValueError: the real error")
    assert d.evidence is not None and d.evidence.line_no == 8


@pytest.mark.parametrize("read", ["lines", "file"])
def test_one_ranks_ignored_exception_does_not_hide_anothers_error(
    tmp_path: Path, read: str
) -> None:
    """srun --label: rank 1's ignored report interleaved with rank 0's real traceback."""
    lines = [
        f"1: {IGNORED_STOP[0]}",
        f"0: {REAL[0]}",
        f"1: {IGNORED_STOP[1]}",
        f"0: {REAL[1]}",
        f"1: {IGNORED_STOP[2]}",
        f"1: {IGNORED_STOP[4]}",
        f"0: {REAL[2]}",
    ]
    evidence = _ev(lines, "f") if read == "lines" else _file_evidence(tmp_path, lines)
    d = diagnose(evidence)
    assert (d.code, d.detail) == ("exception", "ValueError: the real error")


@pytest.mark.parametrize("read", ["lines", "file"])
def test_an_ignored_exceptions_chain_is_ignored_too(tmp_path: Path, read: str) -> None:
    chained = [
        "Exception ignored in: <function Pool.__del__ at 0x7f>",
        "Traceback (most recent call last):",
        '  File "pool.py", line 3, in __del__',
        "KeyError: 'worker'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "pool.py", line 5, in __del__',
        "RuntimeError: pool already closed",
    ]
    read_lines = _ev if read == "lines" else lambda ls, _: _file_evidence(tmp_path, ls)
    assert read_lines(chained, "f") == []
    d = diagnose(read_lines([*chained, *REAL], "f"))
    assert (d.code, d.detail) == ("exception", "ValueError: the real error")


def test_an_ignored_report_without_a_traceback_ends_at_its_message(tmp_path: Path) -> None:
    """Python prints no traceback for some ignored exceptions: a traceback lines later is
    another one."""
    lines = ["Exception ignored in: <_io.TextIOWrapper name='<stdout>'>", "StopIteration"]
    d = diagnose(_file_evidence(tmp_path, [*lines, "step 3", *REAL]))
    assert (d.code, d.detail) == ("exception", "ValueError: the real error")


def test_a_log_whose_ignored_exception_comes_first_is_a_failure(tmp_path: Path) -> None:
    from analysis.read.parse import parse

    (tmp_path / "slurm-9100.out").write_text("\n".join([*IGNORED_STOP, *REAL]) + "\n")
    (failure,) = parse([tmp_path], jobs=1).failures
    assert (failure.job_id, failure.diagnosis.code) == ("9100", "exception")
    assert failure.diagnosis.detail == "ValueError: the real error"


@pytest.mark.parametrize(
    "message",
    [
        "config file not found: configs/nope.yaml",
        "configs/bad.yaml: not valid YAML: mapping values are not allowed here (line 3)",
        "trainer.max_epochs=-1: must be a positive integer",
        "environment variable SLURM_NTASKS='x' is not an integer",
    ],
)
def test_every_line_the_job_refuses_to_start_with_is_the_cause(message: str) -> None:
    """scalescope train's own one-line error, whatever it names, is the configuration error
    over the exit it causes (it was the exit code unless it named an unknown key); a run
    stopped early by a signal says so in a line that is not the cause."""
    lines = [
        f"scalescope train: error: {message}",
        "srun: error: node1: task 0: Exited with exit code 2",
    ]
    d = diagnose(scan_lines(list(enumerate(lines, 1)), "slurm-8.out"))
    assert d.code == "config_error" and message[:30] in d.detail
    stopped = "scalescope train: error: stopped early (SIGTERM) at step 40; the record covers 1"
    assert "config_error" not in {code for code, _ in classify_line(stopped)}


def _torchrun_failed(exitcode: int, traceback: str, prefix: str = "") -> list[str]:
    """What torchrun prints when a worker fails: its own traceback, then ChildFailedError's
    summary of the failed workers, the root cause (the first to fail) last."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        '  File "/usr/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 263, '
        "in launch_agent",
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "scalescope/train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "[1]:",
        "  time      : 2026-01-01_10:00:03",
        "  host      : node1",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 1233)",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-01-01_10:00:00",
        "  host      : node1",
        "  rank      : 1 (local_rank: 1)",
        f"  exitcode  : {exitcode} (pid: 1234)",
        "  error_file: <N/A>",
        f"  traceback : {traceback}",
        "============================================================",
    ]
    return [prefix + line for line in lines]


SIGKILLED = _torchrun_failed(-9, "Signal 9 (SIGKILL) received by PID 1234")
EXITED = _torchrun_failed(1, "To enable traceback see: https://pytorch.org/docs/stable/elastic/")
RANK_ERROR = [
    "[default1]:Traceback (most recent call last):",
    '[default1]:  File "scalescope/train.py", line 9, in <module>',
    "[default1]:ValueError: shard 7 is empty",
]


@pytest.mark.parametrize("prefix", ["", "0: "], ids=["plain", "srun-label"])
def test_torchruns_summary_of_a_killed_worker_says_which_signal(
    tmp_path: Path, prefix: str
) -> None:
    """A worker killed by a signal leaves no traceback; torchrun's summary names the rank and
    the signal (a negative exit code). It is a task's end, as srun's "Killed" is: the cause
    only when nothing says why (the kernel's OOM killer and the scheduler send SIGKILL)."""
    d = diagnose(_file_evidence(tmp_path, ["Epoch 3: 40%", *_torchrun_failed(-9, "x", prefix)]))
    assert (d.code, d.label) == ("exit_code", "task exit code")
    assert d.detail == (
        "torchrun: rank 1 killed by signal 9 (SIGKILL: the kernel's OOM killer or the "
        "scheduler, most often)"
    )
    assert d.evidence is not None and d.evidence.line_no == 25
    assert d.consequences == ()
    # another signal, without the advice; newer torch names it on the exit code's line
    segv = _torchrun_failed(-11, "Signal 11 (SIGSEGV) received by PID 1234")
    for lines in (segv, [line.replace("(pid: 1234)", "(pid: 1234)  (SIGSEGV)") for line in segv]):
        d = diagnose(_file_evidence(tmp_path, lines))
        assert d.detail == "torchrun: rank 1 killed by signal 11 (SIGSEGV)"


def test_torchruns_summary_of_a_worker_that_exited_is_its_exit_code(tmp_path: Path) -> None:
    d = diagnose(_file_evidence(tmp_path, EXITED))
    assert (d.code, d.detail) == ("exit_code", "torchrun: rank 1 exited with exit code 1")


@pytest.mark.parametrize("order", ["before", "after"])
def test_a_workers_own_traceback_wins_over_torchruns_summary(tmp_path: Path, order: str) -> None:
    """A non-zero exit code is the worker's own exception: its traceback (before torchrun's
    or after it, as the pipes flushed) is the cause, torchrun's report of it a consequence."""
    lines = [*RANK_ERROR, *EXITED] if order == "before" else [*EXITED, *RANK_ERROR]
    d = diagnose(_file_evidence(tmp_path, lines))
    assert (d.code, d.detail) == ("exception", "ValueError: shard 7 is empty")
    assert d.also_seen == ("exit_code",)


def test_torchruns_summary_says_more_than_sruns_exit_of_torchrun(tmp_path: Path) -> None:
    """srun reports torchrun's own exit (1), whatever its worker died of: torchrun's summary
    is the task exit the log explains the job by, wherever srun's line landed."""
    srun = "srun: error: node2: task 1: Exited with exit code 1"
    for lines in ([srun, *SIGKILLED], [*SIGKILLED, srun]):
        d = diagnose(_file_evidence(tmp_path, lines))
        assert d.code == "exit_code" and d.detail.startswith("torchrun: rank 1 killed by"), d
    # a host OOM kill says why the worker got its SIGKILL
    oom = "slurmstepd: error: Detected 1 oom_kill event in StepId=7101.0."
    assert diagnose(_file_evidence(tmp_path, [*SIGKILLED, oom])).code == "host_oom"


TORCHRUN_SIGTERM = [
    "W1201 10:00:00.000000 4242 torch/distributed/elastic/agent/server/api.py:704] Received "
    "Signals.SIGTERM death signal, shutting down workers",
    "Traceback (most recent call last):",
    '  File "/usr/local/bin/torchrun", line 8, in <module>',
    "    sys.exit(main())",
    '  File "/usr/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", '
    "line 84, in _terminate_process_handler",
    '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15",
]


def test_torchruns_signal_exception_is_the_signal_it_got_not_an_error_of_the_job(
    tmp_path: Path,
) -> None:
    """torchrun turns a SIGTERM (Slurm's time limit, a cancel, a preemption) into a
    SignalException: a task's end sent from outside, a consequence of whatever sent it. With
    the time limit's cancel in the log, before it or after, the limit is the cause; alone, the
    signal it got is all the log says."""
    cancel = (
        "slurmstepd: error: *** STEP 9100.0 ON node1 CANCELLED AT 2026-12-01T10:00:00 DUE TO "
        "TIME LIMIT ***"
    )
    for lines in ([*TORCHRUN_SIGTERM, cancel], [cancel, *TORCHRUN_SIGTERM]):
        d = diagnose(_file_evidence(tmp_path, lines))
        assert d.code == "time_limit", d
        assert d.also_seen == ("exit_code",)
    d = diagnose(_file_evidence(tmp_path, TORCHRUN_SIGTERM))
    assert d.code == "exit_code"
    assert d.detail == (
        "torchrun got signal 15 (SIGTERM: Slurm's cancel, time limit or preemption, most often)"
    )
    # a worker's own error before it is still the job's
    d = diagnose(_file_evidence(tmp_path, [*RANK_ERROR, *TORCHRUN_SIGTERM]))
    assert (d.code, d.detail) == ("exception", "ValueError: shard 7 is empty")


RECORDED = [
    # a worker's entry point wrapped in torch's @record: torchrun's summary carries its
    # traceback, read back from its error file, each line indented two more
    *EXITED[:-3],
    "  error_file: /tmp/torchelastic_x1/none_y2/attempt_0/1/error.json",
    "  traceback : Traceback (most recent call last):",
    '    File "/usr/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/'
    'errors/__init__.py", line 355, in wrapper',
    "      return f(*args, **kwargs)",
    '    File "scalescope/train.py", line 9, in main',
    '      raise ValueError("shard 7 is empty")',
    "  ValueError: shard 7 is empty",
    "  ",
    "============================================================",
]


@pytest.mark.parametrize("prefix", ["", "0: "], ids=["plain", "srun-label"])
def test_the_traceback_torchruns_summary_carries_is_the_workers_error(
    tmp_path: Path, prefix: str
) -> None:
    """Where the worker's own output is not in the log (torchrun's --redirects, or a log of
    torchrun's alone), the traceback its summary carries is the worker's exception."""
    lines = [prefix + line for line in RECORDED]
    d = diagnose(_file_evidence(tmp_path, lines))
    assert (d.code, d.detail) == ("exception", "ValueError: shard 7 is empty")
    assert d.evidence is not None and d.evidence.line_no == len(lines) - 2
    assert d.also_seen == ("exit_code",)
    # the worker's traceback printed itself is the one said; a frame's line is not the error
    d = diagnose(_file_evidence(tmp_path, [*RANK_ERROR[:2], "[default1]:KeyError: 'x'", *RECORDED]))
    assert d.detail == "KeyError: 'x'"


def test_a_traceback_carried_for_another_worker_than_the_root_cause_is_not_its_error(
    tmp_path: Path,
) -> None:
    """The summary lists the other failures first, the root cause last: a traceback carried
    for another worker does not speak for the root cause, which exited without one."""
    lines = [
        *EXITED[:15],
        "  error_file: /tmp/torchelastic_x1/none_y2/attempt_0/0/error.json",
        "  traceback : Traceback (most recent call last):",
        '    File "scalescope/train.py", line 9, in main',
        "  RuntimeError: peer went away",
        *EXITED[17:],
    ]
    d = diagnose(_file_evidence(tmp_path, lines))
    assert (d.code, d.detail) == ("exit_code", "torchrun: rank 1 exited with exit code 1")


AGENT_KILLED = (
    "E1201 10:00:00.123000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed "
    "(exitcode: -9) local_rank: 0 (pid: 1234) of binary: /usr/bin/python3"
)


def test_torchruns_agent_line_says_how_a_worker_ended_where_no_summary_follows(
    tmp_path: Path,
) -> None:
    """torchrun stopped before its summary (killed itself, or the log cut off) leaves only
    its agent's line: the worker's end, named by its rank on the node."""
    d = diagnose(_file_evidence(tmp_path, ["Epoch 1: 20%", AGENT_KILLED]))
    assert (d.code, d.detail) == (
        "exit_code",
        "torchrun: local rank 0 killed by signal 9 (SIGKILL: the kernel's OOM killer or the "
        "scheduler, most often)",
    )
    older = "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 3"
    d = diagnose(_file_evidence(tmp_path, [older + " (pid: 99) of binary: /usr/bin/python"]))
    assert d.detail == "torchrun: local rank 3 exited with exit code 1"
    # the summary after it says which rank of the job, and is the task's end said
    d = diagnose(_file_evidence(tmp_path, [AGENT_KILLED, *SIGKILLED]))
    assert d.detail.startswith("torchrun: rank 1 killed by signal 9")
    assert d.consequences == ()


SHELL_KILLED = (
    "/var/spool/slurmd/job123456/slurm_script: line 12: 34567 Killed                  "
    "python train.py --config big.yaml"
)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (SHELL_KILLED, "killed (SIGKILL: the kernel's OOM killer or the scheduler"),
        (
            "/var/spool/slurmd/job7/slurm_script: line 3: 812 Terminated              python t.py",
            "terminated (SIGTERM: Slurm's cancel, time limit or preemption",
        ),
        (
            "slurm_script: line 9:  4242 Segmentation fault      (core dumped) python t.py",
            "segmentation fault (SIGSEGV)",
        ),
    ],
)
def test_a_program_the_batch_script_ran_that_died_of_a_signal_is_a_tasks_end(
    line: str, words: str
) -> None:
    """Run in the batch script's foreground (not through srun), a program that dies of a
    signal is reported by the script's shell alone: before, the job read as killed without
    a word. It is a task's end (a consequence wherever anything else is known), with the
    program, its pid and who sends that signal, most often."""
    assert KEYWORDS.search(line.encode()), "the byte prefilter would skip the line"
    detail = dict(classify_line(line))["exit_code"]
    assert words in detail and "(pid " in detail, detail
    assert detail.startswith("python t") or detail.startswith("python train.py")
    # alone it is the cause; after Slurm's OOM kill report it is that kill's consequence
    alone = diagnose(scan_lines(enumerate([SHELL_KILLED], 1), "slurm-5.out"))
    assert alone.code == "exit_code"
    oom = "slurmstepd: error: Detected 1 oom_kill event in StepId=123456.batch."
    both = diagnose(scan_lines(enumerate([SHELL_KILLED, oom], 1), "slurm-5.out"))
    assert both.code == "host_oom" and both.also_seen == ("exit_code",)


@pytest.mark.parametrize(
    "line",
    [
        "Epoch 2: loss 0.31 Killed the process pool early",
        "INFO: line 12: 400 items Terminated early by the sampler",
        "Aborted by the user? no: resuming from checkpoint",
    ],
)
def test_text_like_a_shells_report_is_not_one(line: str) -> None:
    assert [c for c, _ in classify_line(line) if c == "exit_code"] == []


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: execve(): python: No such file or directory",
        "/var/spool/slurmd/job9/slurm_script: line 5: python3: command not found",
        "bash: /opt/venv/bin/torchrun: command not found",
    ],
)
def test_a_program_not_on_the_node_is_the_jobs_environment(line: str) -> None:
    """The program a step starts is missing on the node: before, srun's exit code 2 alone
    (or nothing) said so. It is the configuration's, over the task's exit."""
    assert KEYWORDS.search(line.encode())
    exit_line = "srun: error: gpu017: task 0: Exited with exit code 2"
    d = diagnose(scan_lines(enumerate([line, exit_line], 1), "slurm-6.out"))
    assert d.code == "config_error" and "not found on the node" in d.detail, d
    assert "virtual environment" in d.detail


def test_another_missing_tool_is_not_the_cause() -> None:
    """A job script's diagnostics may call a tool a node lacks (nvidia-smi on a CPU node)
    and go on: only the programs a job starts are read."""
    assert classify_line("slurm_script: line 7: nvidia-smi: command not found") == []
