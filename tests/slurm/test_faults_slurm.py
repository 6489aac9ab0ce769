"""Jobs that end badly on the local two-node Slurm cluster: a time limit hit while steps are
slow (the job must stop within KillWait and say why), and one rank killed mid-training (the
job must fail in bounded time and the summary must show it as a failed row)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from slurm_helpers import (
    REPO,
    EarlyJobs,
    job_env,
    make_submit_dir,
    sweep_argv,
    wait_for_job,
    wait_until_started,
)

from scalescope.record import ResultRecord, StartEvent, decode_line

BASE = "workload.num_samples=2000 trainer.batch_size=64 tracking.mode=off"


def _events(log: Path) -> list[StartEvent | ResultRecord]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        event = decode_line(line)
        if event is not None:
            out.append(event)
    return out


def _summary(outputs: Path) -> dict[str, object]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "analysis.summarize",
            str(outputs),
            "--no-write",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _task_pid(job_id: str, rank: int, timeout_s: float = 180.0) -> int:
    """The pid of the training process of one rank: it carries the job's variables. The
    deadline counts from the job's start, not its submission (it may wait in the queue)."""
    wait_until_started(job_id)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if "scalescope.train" not in cmd:
                continue
            try:
                env = proc.environ()
            except psutil.Error:
                continue
            if env.get("SLURM_JOB_ID") == job_id and env.get("SLURM_PROCID") == str(rank):
                return proc.pid
        time.sleep(0.5)
    raise AssertionError(f"no training process of rank {rank} in job {job_id}")


@pytest.mark.timeout(600)
def test_time_limit_with_one_second_steps_stops_within_killwait(early_jobs: EarlyJobs) -> None:
    """--time=1 with 1 s steps (8 per Lightning call): Slurm's SIGTERM comes after about a
    minute, SIGKILL KillWait (10 s) later. The record must be written before that. The job was
    submitted when the session started (slurm_helpers.TimeLimitJob)."""
    repo, job_id = early_jobs.time_limit.repo, early_jobs.time_limit.job_id
    job = wait_for_job(job_id, timeout_s=400)
    log = repo / "outputs" / f"slurm-{job_id}.out"
    text = log.read_text(errors="replace")
    assert job.state == "TIMEOUT", f"{job.state}\n{text[-3000:]}"
    results = [e for e in _events(log) if isinstance(e, ResultRecord)]
    assert len(results) == 1, text[-3000:]
    (result,) = results
    assert result.stop_reason == "sigterm"
    assert result.identity.world_size == 2 and result.identity.nodes == 2
    assert result.config["faults"]["step_sleep_s"] == 1.0
    assert "STOPPED EARLY (sigterm)" in text
    assert "DUE TO TIME LIMIT" in text
    assert (repo / result.identity.run_dir / "result.json").exists()  # relative to the repo

    summary = _summary(repo / "outputs")
    assert not summary["runs"], "a stopped run is not a measurement"
    (row,) = summary["failures"]
    assert str(row["job_id"]) == job_id
    assert "stopped early" in str(row["detail"])
    assert row["reason"] == "time_limit", row  # Slurm's word, read from the same log


@pytest.mark.timeout(900)  # up to 420 s in the queue behind the session's slow jobs
def test_a_killed_rank_fails_the_two_node_job_fast(sbatch, tmp_path: Path) -> None:
    repo = make_submit_dir(tmp_path / "repo")
    job_id = sbatch(
        "--nodes=2",
        "--ntasks-per-node=1",
        "--time=10",
        "slurm_jobs/multi_node_multi_gpu.sh",
        cwd=repo,
        env={
            **job_env(),
            "SCALESCOPE_OVERRIDES": (
                f"{BASE} trainer.max_epochs=1000 faults.step_sleep_s=0.2 "
                "trainer.collective_timeout_s=30"
            ),
        },
    )
    log = repo / "outputs" / f"slurm-{job_id}.out"
    victim = _task_pid(job_id, rank=1)
    deadline = time.monotonic() + 180
    while not any(isinstance(e, StartEvent) for e in _events(log)):  # rank 0 is under way
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.5)
    time.sleep(10)  # into training
    psutil.Process(victim).kill()  # kill -9
    # Bounded: the collective timeout (30 s) plus Slurm's clean-up, far below the time limit.
    job = wait_for_job(job_id, timeout_s=180)
    text = log.read_text(errors="replace")
    assert job.state == "FAILED", f"{job.state}\n{text[-3000:]}"
    assert job.exit_code != "0:0"
    assert not any(isinstance(e, ResultRecord) for e in _events(log))

    summary = _summary(repo / "outputs")
    assert not summary["runs"]
    (row,) = summary["failures"]
    assert str(row["job_id"]) == job_id
    # Rank 0 learns of the death in its next collective and says so; srun reports task 1's
    # exit and aborts the step. Whichever line reaches the log first, the root cause names the
    # dead peer: rank 0's collective error, or (when srun stopped rank 0 before its error was
    # flushed) task 1's own exit. The step's cancellation is never the cause.
    if row["reason"] == "collective_error":
        assert "by a peer" in str(row["detail"]), row
    else:
        assert row["reason"] == "exit_code", row
        assert "task 1 on node2: killed" in str(row["detail"]).lower(), row


CANCEL_SWEEP = """\
name: slurm-cancel
train_config: {train_config}
overrides:
  trainer.accelerator: cpu
  workload.num_samples: 1000
  trainer.max_epochs: 1000
  faults.step_sleep_s: 0.25
  tracking.mode: "off"
shapes:
  - {{nodes: 2, devices_per_node: 1}}
repeats: 1
timeout_min: 10
"""


@pytest.mark.timeout(900)  # up to 420 s in the queue behind the session's slow jobs
def test_a_cancelled_two_node_sweep_job_is_shown_as_cancelled(
    slurm_cluster: object, tmp_path: Path
) -> None:
    """scancel signals both tasks of a submitit job, each with its own log: whatever the rank
    that outlived the other printed of its lost peer, the job's row says it was cancelled."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(CANCEL_SWEEP.format(train_config=REPO / "configs" / "spiral.yaml"))
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "scalescope.cli", *sweep_argv(sweep, "cancel")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    job_id = None
    for line in proc.stdout:
        if line.strip().startswith("submitted "):
            job_id = line.split()[1]
            break
    assert job_id is not None, "the sweep never said 'submitted'"
    sweep_dir = tmp_path / "outputs" / "sweeps" / "cancel"
    try:
        deadline = time.monotonic() + 420
        while not any(isinstance(e, StartEvent) for e in _events_in(sweep_dir / job_id)):
            assert time.monotonic() < deadline, "the job never printed its start event"
            time.sleep(1)
        time.sleep(5)  # into training, both ranks in their collectives
        subprocess.run(["scancel", job_id], check=True, timeout=30)
        out = proc.communicate(timeout=300)[0]
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
        if proc.poll() is None:
            proc.kill()
    assert wait_for_job(job_id, timeout_s=120).state == "CANCELLED", out
    summary = _summary(sweep_dir)
    assert not summary["runs"]
    (row,) = summary["failures"]  # type: ignore[misc]
    assert row["reason"] == "cancelled", row
    print(f"cancelled: {row['detail']}; also seen: {row['also_seen']}")


def _events_in(folder: Path) -> list[StartEvent | ResultRecord]:
    return [e for log in sorted(folder.glob("*_log.out")) for e in _events(log)]
