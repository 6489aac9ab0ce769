"""The Slurm tier's fixtures: the local two-node cluster and job submission to it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import slurm_helpers
from slurm_helpers import EARLY_JOBS, EarlyJobs


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[object]:
    """The local two-node cluster, with SLURM_CONF set for the session.

    Uses the same state directory as `scalescope local-cluster up` (CI starts it before the
    tests), so a running cluster is reused and left running; one this fixture started is
    stopped at the end. Under scripts/test.sh (SCALESCOPE_REQUIRE_SLURM=1) or CI a cluster
    that cannot start fails the tier with the reason; elsewhere a machine that cannot host it
    (not root, no apt) skips the tier with that reason. Any other failure is an error.
    """
    from scalescope.launch import local_cluster

    try:
        info = local_cluster.up(timeout_s=120)
    except local_cluster.LocalClusterUnavailable as exc:
        if os.environ.get("SCALESCOPE_REQUIRE_SLURM") == "1" or os.environ.get("CI"):
            pytest.fail(f"the Slurm tier needs the local cluster, which cannot start: {exc}")
        pytest.skip(f"no local Slurm cluster on this machine: {exc}")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = info.conf
    try:
        yield info
    finally:
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        if not info.already_running:
            local_cluster.down(info.dir)


Submit = Callable[..., str]


@pytest.fixture
def sbatch(slurm_cluster: object) -> Iterator[Submit]:
    """``sbatch(*args, cwd=..., env=...) -> job id`` on the local cluster
    (:func:`slurm_helpers.sbatch` once the cluster is up). Every job it submitted is
    cancelled when the test ends: a test that fails mid-job must not hold the two nodes until
    the job's time limit, with every test after it waiting in the queue."""
    submitted: list[str] = []

    def submit(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
        job_id = slurm_helpers.sbatch(*args, cwd=cwd, env=env)
        submitted.append(job_id)
        return job_id

    yield submit
    if submitted:  # a job that ended is left as it is (scancel says so, and that is all)
        subprocess.run(["scancel", *submitted], capture_output=True, timeout=30)


@pytest.fixture(scope="session")
def early_jobs(
    request: pytest.FixtureRequest, slurm_cluster: object, tmp_path_factory: pytest.TempPathFactory
) -> EarlyJobs:
    """The slow jobs the session submitted when it started (tests/conftest.py), or, when the
    cluster was not up then, submitted now."""
    jobs = request.config.stash.get(EARLY_JOBS, None)
    if isinstance(jobs, BaseException):
        pytest.fail(f"the slow Slurm jobs could not be submitted at the start: {jobs!r}")
    if jobs is None:
        jobs = EarlyJobs.start(tmp_path_factory.mktemp("early-jobs"))
        request.config.stash[EARLY_JOBS] = jobs
    return jobs


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that check the early jobs run last: by then the jobs are done."""
    early = [i for i in items if "early_jobs" in getattr(i, "fixturenames", ())]
    if early:
        items[:] = [i for i in items if i not in early] + early
