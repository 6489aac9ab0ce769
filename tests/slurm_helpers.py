"""Helpers for tests that submit jobs to the local Slurm cluster (see conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from core_helpers import CPU

REPO = Path(__file__).resolve().parents[1]


def sweep_argv(sweep: Path, sweep_id: str, *extra: str) -> list[str]:
    """``scalescope sweep`` arguments that submit ``sweep`` to the local cluster and watch it
    to the end (``extra``: more options, e.g. ``--max-parallel 1``)."""
    return [
        "sweep",
        "--config",
        str(sweep),
        "--cluster",
        str(REPO / "configs" / "clusters" / "local.yaml"),
        "--executor",
        "slurm",
        *extra,
        "--wait",
        "--sweep-id",
        sweep_id,
    ]


TERMINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
}


@dataclass(frozen=True)
class Job:
    job_id: str
    state: str
    exit_code: str
    fields: dict[str, str]
    """Everything `scontrol show job -o` says (NodeList, BatchHost, StdOut...)."""


def _scontrol_job(job_id: str) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30
    )
    if out.returncode != 0:
        raise AssertionError(f"scontrol show job {job_id} failed: {out.stderr.strip()}")
    fields: dict[str, str] = {}
    for token in out.stdout.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def _poll_job(
    job_id: str, done: Callable[[str], bool], timeout_s: float, *, cancel: bool
) -> dict[str, str]:
    """``scontrol``'s fields of the job once ``done`` holds of its state, polled every half
    second; past ``timeout_s`` an AssertionError naming the state (the job cancelled first
    where ``cancel``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        fields = _scontrol_job(job_id)
        state = fields.get("JobState", "?")
        if done(state):
            return fields
        if time.monotonic() > deadline:
            if cancel:
                subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
            gone = ": cancelled" if cancel else ""
            raise AssertionError(f"job {job_id} still {state} after {timeout_s:.0f} s{gone}")
        time.sleep(0.5)


def wait_for_job(job_id: str, timeout_s: float = 300.0) -> Job:
    """Poll until the job ends (no accounting: scontrol keeps it for MinJobAge).

    `sbatch --wait` would also do, but it polls with a growing interval (up to ~30 s late).
    """
    fields = _poll_job(job_id, lambda state: state in TERMINAL_STATES, timeout_s, cancel=True)
    return Job(job_id, fields.get("JobState", "?"), fields.get("ExitCode", "?"), fields)


def wait_until_started(job_id: str, timeout_s: float = 420.0) -> str:
    """Poll until the job has left the queue (its state then): on a loaded machine the jobs
    before it may hold both nodes for minutes, which a test's own deadlines must not count."""
    fields = _poll_job(
        job_id, lambda state: state not in ("PENDING", "CONFIGURING"), timeout_s, cancel=False
    )
    return fields.get("JobState", "?")


def make_submit_dir(root: Path, links: Sequence[str] = ("slurm_jobs", "configs", "src")) -> Path:
    """A stand-in repository root whose outputs/ is private to one test.

    The sbatch scripts take the repository from SLURM_SUBMIT_DIR and write their logs and
    run directories under outputs/ there; links keep the code the real one.
    """
    root.mkdir(parents=True, exist_ok=True)
    for name in links:
        (root / name).symlink_to(REPO / name)
    (root / "outputs").mkdir()
    if sys.prefix != sys.base_prefix:  # the venv running the tests is the job's .venv
        (root / ".venv").symlink_to(sys.prefix)
    return root


def job_env() -> dict[str, str]:
    """Environment for a job that runs this test's scalescope (venv or not)."""
    if sys.prefix != sys.base_prefix:
        return {}
    return {"SCALESCOPE_PYTHON": sys.executable}


# --- slow jobs, submitted when the run starts and checked at the end of the Slurm tier --------
#
# Two Slurm paths take minutes of mostly waiting: a job that runs into its time limit (Slurm's
# smallest limit is a minute) and a job that is requeued (Slurm holds it back for the cluster's
# cred_expire before it starts again). Submitted when the session starts, they run while the
# integration tier does; the tests that check them run last (tests/slurm/conftest.py).

EARLY_OVERRIDES = "workload.num_samples=2000 trainer.batch_size=64 tracking.mode=off"


def _cpu_job(env: dict[str, str]) -> dict[str, str]:
    """Every job the tests submit trains on CPUs, on a node with a GPU as on one without
    (core_helpers.CPU): first among its overrides, so a test's own come after it."""
    overrides = env.get("SCALESCOPE_OVERRIDES", "")
    return {**env, "SCALESCOPE_OVERRIDES": f"{CPU} {overrides}".strip()}


def sbatch(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """``sbatch --parsable args`` in ``cwd``; the job id."""
    import os

    out = subprocess.run(
        ["sbatch", "--parsable", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=_cpu_job({**os.environ, **(env or {})}),
        timeout=60,
    )
    assert out.returncode == 0, f"sbatch {' '.join(args)} failed: {out.stderr.strip()}"
    return out.stdout.strip().split(";")[0]


@dataclass
class TimeLimitJob:
    """A 2-node job with 1 s steps and ``--time=1``: Slurm stops it with SIGTERM."""

    repo: Path
    job_id: str

    @classmethod
    def submit(cls, root: Path) -> TimeLimitJob:
        repo = make_submit_dir(root / "time-limit")
        job_id = sbatch(
            "--nodes=2",
            "--ntasks-per-node=1",
            "--time=1",
            "slurm_jobs/multi_node_multi_gpu.sh",
            cwd=repo,
            env={
                **job_env(),
                "SCALESCOPE_OVERRIDES": (
                    f"{EARLY_OVERRIDES} trainer.max_epochs=1000 faults.step_sleep_s=1.0"
                ),
            },
        )
        return cls(repo, job_id)

    @property
    def log(self) -> Path:
        return self.repo / "outputs" / f"slurm-{self.job_id}.out"


REQUEUE_SWEEP = """\
name: slurm-requeue
train_config: {train_config}
overrides:
  trainer.accelerator: cpu
  workload.num_samples: 1000
  trainer.max_epochs: 15
  faults.step_sleep_s: 0.25
  tracking.mode: "off"
shapes:
  - {{nodes: 1, devices_per_node: 2}}
repeats: 1
timeout_min: 10
"""


class RequeueSweep:
    """``scalescope sweep --wait`` of one 2-task job on the local cluster, and a watcher that
    sends USR2 (what Slurm sends before preemption or the time limit) once the job trains.
    submitit calls SweepRun.checkpoint and requeues; the run starts again from scratch. Its
    steps sleep (60 of 0.25 s), so it waits rather than computes while other tests run."""

    def __init__(self, root: Path) -> None:
        import threading

        self.root = root / "requeue"
        self.root.mkdir(parents=True)
        sweep = self.root / "sweep.yaml"
        sweep.write_text(REQUEUE_SWEEP.format(train_config=REPO / "configs" / "spiral.yaml"))
        self.lines: list[str] = []
        self.job_id: str | None = None
        self.error: str | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "scalescope.cli", *sweep_argv(sweep, "requeue")],
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._thread = threading.Thread(target=self._watch, name="requeue-watcher", daemon=True)
        self._thread.start()

    @property
    def log(self) -> Path:
        assert self.job_id is not None
        return (
            self.root / "outputs" / "sweeps" / "requeue" / self.job_id / f"{self.job_id}_0_log.out"
        )

    def _watch(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                self.lines.append(line)
                if line.strip().startswith("submitted "):
                    self.job_id = line.split()[1]
                    break
            if self.job_id is None:
                self.error = "the sweep never said 'submitted'"
                return
            deadline = time.monotonic() + 300
            while not (
                self.log.exists() and ":::SCALESCOPE" in self.log.read_text("utf-8", "replace")
            ):
                if time.monotonic() > deadline:
                    self.error = "the job never printed its start event"
                    return
                time.sleep(1)
            time.sleep(3)  # into training
            subprocess.run(["scancel", "--signal=USR2", self.job_id], check=True, timeout=30)
            self.lines += list(self.proc.stdout)
        except Exception as exc:  # reported by the test that checks this job
            self.error = f"{type(exc).__name__}: {exc}"

    def finish(self, timeout_s: float) -> tuple[int, str]:
        """Wait for the sweep to end; its exit status and everything it printed."""
        self._thread.join(timeout_s)
        try:
            rc = self.proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            self.cancel()
            raise
        assert self.error is None, self.error + "\n" + "".join(self.lines)
        return rc, "".join(self.lines)

    def cancel(self) -> None:
        if self.job_id is not None:
            subprocess.run(["scancel", self.job_id], capture_output=True, timeout=30)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class EarlyJobs:
    time_limit: TimeLimitJob
    requeue: RequeueSweep
    root: Path

    @classmethod
    def start(cls, root: Path) -> EarlyJobs:
        return cls(TimeLimitJob.submit(root), RequeueSweep(root), root)

    def cancel(self) -> None:
        subprocess.run(["scancel", self.time_limit.job_id], capture_output=True, timeout=30)
        self.requeue.cancel()


EARLY_JOBS: pytest.StashKey[EarlyJobs | BaseException] = pytest.StashKey()
"""Where the session keeps its early jobs (or why they could not be submitted)."""
