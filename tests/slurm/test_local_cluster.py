"""`scalescope local-cluster`: a real two-node Slurm cluster on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_helpers import wait_for_job

from scalescope.launch import local_cluster as lc
from scalescope.launch.local_cluster_daemons import _cmdline

# --- without Slurm ---------------------------------------------------------------------------


# --- with the cluster ------------------------------------------------------------------------

USABLE = {"idle", "mixed", "allocated", "completing"}


def test_status_and_up_are_idempotent(slurm_cluster: lc.ClusterInfo) -> None:
    before = lc.status(slurm_cluster.dir)
    assert before.running, before.problem
    assert before.problem is None
    assert set(before.nodes) == {"node1", "node2"}
    assert set(before.nodes.values()) <= USABLE, before.nodes
    assert before.conf == os.environ["SLURM_CONF"]

    again = lc.up(slurm_cluster.dir)
    assert again.already_running
    assert again.daemons == before.daemons  # nothing was started or restarted


def test_cli_status_prints_the_slurm_conf_line(slurm_cluster: lc.ClusterInfo) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalescope.cli",
            "local-cluster",
            "status",
            "--dir",
            slurm_cluster.dir,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "node1" in out.stdout and "node2" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == slurm_cluster.export_line


def test_two_node_job_runs_one_task_on_each_node(
    slurm_cluster: lc.ClusterInfo, sbatch, tmp_path: Path
) -> None:
    log = tmp_path / "two-nodes.out"
    job_id = sbatch(
        "--nodes=2",
        "--ntasks-per-node=1",
        "--time=2",
        f"--output={log}",
        "--wrap",
        'srun bash -c "echo task=\\$SLURM_PROCID node=\\$SLURMD_NODENAME"',
        cwd=tmp_path,
    )
    job = wait_for_job(job_id, timeout_s=120)
    assert job.state == "COMPLETED", log.read_text() if log.exists() else job.fields
    tasks = sorted(line for line in log.read_text().splitlines() if line.startswith("task="))
    assert tasks == ["task=0 node=node1", "task=1 node=node2"]


def test_two_one_cpu_jobs_share_a_node(
    slurm_cluster: lc.ClusterInfo, sbatch, tmp_path: Path
) -> None:
    """Cores, not whole nodes, are allocated (CR_Core): both jobs run on node1 at once."""
    marker = tmp_path / "both-running"
    script = (
        f'touch "{tmp_path}/$SLURM_JOB_ID"; '
        f'for i in $(seq 100); do [ $(ls "{tmp_path}" | grep -c "^[0-9]") -ge 2 ] '
        f'&& touch "{marker}" && exit 0; sleep 0.2; done; exit 1'
    )
    args = (
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=1",
        "--nodelist=node1",
        "--time=2",
        "--output=/dev/null",
        "--wrap",
        script,
    )
    first, second = sbatch(*args, cwd=tmp_path), sbatch(*args, cwd=tmp_path)
    for job_id in (first, second):
        job = wait_for_job(job_id, timeout_s=120)
        assert job.state == "COMPLETED", job.fields
        assert job.fields["NodeList"] == "node1"
    assert marker.exists()


@pytest.fixture
def second_cluster(slurm_cluster: lc.ClusterInfo) -> Iterator[Path]:
    """Another cluster beside the session's one: own short directory, own ports."""
    root = Path(tempfile.mkdtemp(prefix="ss-lc-", dir="/tmp"))
    try:
        yield root
    finally:
        lc.down(root)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_down_stops_exactly_its_own_processes(
    slurm_cluster: lc.ClusterInfo, second_cluster: Path
) -> None:
    info = lc.up(second_cluster, port_base=slurm_cluster.ports["slurmctld"] + 100)
    assert info.running and not info.already_running
    assert set(info.nodes.values()) == {"idle"}
    # munge already served the session's cluster: this one did not start its own.
    assert not info.started_munged and "munged" not in info.daemons
    ours = info.daemons
    assert set(ours) == {"slurmctld", "slurmd-node1", "slurmd-node2"}

    assert sorted(lc.down(second_cluster)) == sorted(ours)
    for name, pid in ours.items():
        assert not Path(f"/proc/{pid}/cmdline").exists() or not _cmdline(pid), name
    assert lc.down(second_cluster) == []  # a second down is a no-op
    assert not lc.status(second_cluster).daemons

    session = lc.status(slurm_cluster.dir)  # the session's cluster was not touched
    assert session.running and session.daemons == slurm_cluster.daemons
