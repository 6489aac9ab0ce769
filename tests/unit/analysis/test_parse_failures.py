"""Failed jobs end to end: real log files in, the root cause and its consequences out."""

from __future__ import annotations

from pathlib import Path

from analysis_helpers import make_result, start_of, summarize_main, write_log

from analysis import load_all

OOM = [
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "scalescope/train.py", line 210, in fit',
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
    "a total capacity of 79.10 GiB of which 1.21 GiB is free.",
]
WATCHDOG = (
    "[rank1]:[E1121 10:11:02.000000 4242 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=20585, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out."
)
TIME_LIMIT = (
    "slurmstepd: error: *** JOB 7100 ON gpu-a01 CANCELLED AT 2025-03-01T12:00:17 DUE TO TIME "
    "LIMIT ***"
)


def test_oom_then_watchdog_then_time_limit_is_reported_as_oom(tmp_path: Path) -> None:
    job = make_result("7100", world=(1, 2))
    write_log(
        tmp_path / "slurm-7100.out",
        start_of(job),
        "0: Epoch 0: 12%",
        *OOM,
        WATCHDOG,
        TIME_LIMIT,
        "srun: error: gpu-a01: tasks 0-1: Terminated",
    )
    _, failures, _ = load_all(tmp_path, jobs=1)
    (row,) = failures.to_dict("records")
    assert (row["reason"], row["evidence_line"]) == ("cuda_oom", 5)
    assert row["also_seen"] == "collective_timeout,time_limit,exit_code"
    log = f"{tmp_path.name}/slurm-7100.out"
    consequences = row["consequences"].split("\n")
    assert consequences[0].startswith(f"NCCL/collective timeout at {log}:6: {WATCHDOG[:200]}")
    assert consequences[1] == f"time limit at {log}:7: {TIME_LIMIT}"
    assert consequences[2].startswith(f"task exit code at {log}:8: srun: error:")

    proc = summarize_main(tmp_path, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("| 7100 |")]
    assert f"| CUDA out of memory | Tried to allocate 2.00 GiB | {log}:5 |" in line
    assert (
        f"| NCCL/collective timeout at {log}:6; time limit at {log}:7; task exit code at {log}:8 |"
    ) in line


def test_a_time_limit_is_the_cause_over_the_peer_lost_errors_its_kill_made(
    tmp_path: Path,
) -> None:
    """submitit: a log per task. Rank 0's log says Slurm cancelled the step at its time
    limit, rank 1's that its peer closed the connection as the kill took rank 0 down: the
    job ran out of time, and the closed connection is a consequence."""
    job = make_result("7102", world=(1, 2))
    folder = tmp_path / "7102"
    write_log(folder / "7102_0_log.out", start_of(job), "Epoch 3: 40%")
    limit = (
        "slurmstepd: error: *** STEP 7102.0 ON node1 CANCELLED AT 2026-01-01T10:00:00 DUE TO "
        "TIME LIMIT ***"
    )
    write_log(folder / "7102_0_log.err", limit)
    closed = (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
        "by peer [10.0.0.1]:29500"
    )
    write_log(folder / "7102_1_log.err", "Traceback (most recent call last):", closed)
    _, failures, _ = load_all(tmp_path, jobs=1)
    (row,) = failures.to_dict("records")
    assert (row["reason"], row["also_seen"]) == ("time_limit", "collective_error")
    assert row["evidence_file"] == f"{tmp_path.name}/7102/7102_0_log.err"
    log = f"{tmp_path.name}/7102/7102_1_log.err"
    assert row["consequences"].startswith(
        f"NCCL/collective error (peer exited or network) at {log}:2"
    )
