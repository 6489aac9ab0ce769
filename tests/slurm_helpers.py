"""Helpers for tests that submit jobs to the local Slurm cluster (see conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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


def wait_for_job(job_id: str, timeout_s: float = 300.0) -> Job:
    """Poll until the job ends (no accounting: scontrol keeps it for MinJobAge).

    `sbatch --wait` would also do, but it polls with a growing interval (up to ~30 s late).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        fields = _scontrol_job(job_id)
        state = fields.get("JobState", "?")
        if state in TERMINAL_STATES:
            return Job(job_id, state, fields.get("ExitCode", "?"), fields)
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
            raise AssertionError(f"job {job_id} still {state} after {timeout_s:.0f} s: cancelled")
        time.sleep(0.5)


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
