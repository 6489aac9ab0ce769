"""A shape larger than the local cluster's 2-node partition of 2-CPU nodes: a sweep refuses
it before submitting anything (sinfo's nodes and CPUs per node), a submission that sbatch
refuses midway records the jobs it cancelled, and a job submitted by hand with too many
nodes pends with PartitionNodeLimit (PartitionConfig where the partition sets no MaxNodes),
which the sweep's live view shows with its scancel (squeue's %r)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from slurm_helpers import REPO, sbatch, wait_for_job

from scalescope import cli
from scalescope.launch import slurm_info
from scalescope.launch.monitor import squeue_states
from scalescope.launch.slurm_info import pending_note

SWEEP = f"""\
name: too-big
train_config: {REPO / "configs" / "spiral.yaml"}
overrides:
  trainer.accelerator: cpu
  tracking.mode: "off"
shapes:
  - {{nodes: 1, devices_per_node: 1}}
  - {{nodes: 4, devices_per_node: 1}}
repeats: 1
timeout_min: 5
"""


def test_a_shape_over_the_partition_is_refused_before_submission(
    slurm_cluster: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    local = (REPO / "configs" / "clusters" / "local.yaml").read_text(encoding="utf-8")
    assert "max_nodes: 2" in local
    profile = tmp_path / "four.yaml"  # a profile that claims more nodes than the partition has
    profile.write_text(local.replace("max_nodes: 2", "max_nodes: 4"), encoding="utf-8")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP, encoding="utf-8")
    argv = ["sweep", "--config", str(sweep), "--cluster", str(profile), "--executor", "slurm"]
    rc = cli.main([*argv, "--wait", "--sweep-id", "too-big"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    assert "shape 4x1: 4 nodes, but partition 'debug' has 2 node(s) (sinfo)" in err, err
    assert "PartitionNodeLimit" in err and "max_nodes: 2" in err
    assert not (tmp_path / "outputs").exists()  # nothing submitted


def _wide_profile(tmp_path: Path) -> Path:
    """The local cluster's profile, claiming 8 devices per node on nodes of 2 CPUs."""
    local = (REPO / "configs" / "clusters" / "local.yaml").read_text(encoding="utf-8")
    assert "max_devices_per_node: 2" in local
    profile = tmp_path / "wide.yaml"
    profile.write_text(
        local.replace("max_devices_per_node: 2", "max_devices_per_node: 8"), encoding="utf-8"
    )
    return profile


WIDE = SWEEP.replace("{nodes: 4, devices_per_node: 1}", "{nodes: 1, devices_per_node: 4}").replace(
    "repeats: 1\n", "repeats: 1\norder_seed: 1\n"
)


def test_more_tasks_per_node_than_cpus_is_refused_before_submission(
    slurm_cluster: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(WIDE, encoding="utf-8")
    argv = ["sweep", "--config", str(sweep), "--cluster", str(_wide_profile(tmp_path))]
    for extra in (["--dry-run"], ["--executor", "slurm", "--wait", "--sweep-id", "wide"]):
        rc = cli.main([*argv, *extra])
        err = capsys.readouterr().err.strip()
        assert rc == 2, err
        assert len(err.splitlines()) == 1, err
        assert "shape 1x4: 4 task(s) per node x 1 CPU(s) per task = 4 CPUs per node, but " in err
        assert "the nodes of partition 'debug' have 2 CPUs (sinfo)" in err, err
        assert "max_devices_per_node: 2" in err, err
    assert not (tmp_path / "outputs").exists()  # nothing submitted


def test_a_submission_sbatch_refuses_midway_records_the_job_it_cancelled(
    slurm_cluster: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Where sinfo gives no answer, sbatch is the one to refuse 1x4, after 1x1 went in: the
    1x1 job is cancelled, and sweep.json keeps its id and says so."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(slurm_info, "partition_limits", lambda **_: None)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(WIDE, encoding="utf-8")
    argv = ["sweep", "--config", str(sweep), "--cluster", str(_wide_profile(tmp_path))]
    rc = cli.main([*argv, "--executor", "slurm", "--sweep-id", "midway"])
    err = capsys.readouterr().err.strip()
    manifest = json.loads((tmp_path / "outputs" / "sweeps" / "midway" / "sweep.json").read_text())
    first, second = sorted(manifest["jobs"], key=lambda j: j["order"])
    try:
        assert rc == 2, err
        assert (first["shape"], second["shape"]) == ("1x1", "1x4"), manifest["jobs"]
        line = err.splitlines()[-1]  # sbatch's own lines come before it
        assert "submitting shape 1x4 repeat 0 failed: sbatch: CPU count per node " in line, err
        assert f"cancelled job {first['job_id']}, already submitted" in err, err
        assert first["state"] == "CANCELLED" and first["job_id"], first
        assert first["detail"] == "cancelled: submitting shape 1x4 repeat 0 failed", first
        assert second["state"] == "CANCELLED" and second["job_id"] is None, second
        assert second["detail"].startswith("not submitted: "), second
        state = wait_for_job(first["job_id"], timeout_s=60).state
        assert state == "CANCELLED", state
    finally:
        if first["job_id"]:
            subprocess.run(["scancel", first["job_id"]], capture_output=True, timeout=30)


def test_a_job_pending_with_partition_node_limit_is_shown_with_scancel(
    slurm_cluster: object, tmp_path: Path
) -> None:
    job_id = sbatch("--nodes=4", "--ntasks-per-node=1", "--time=1", "--wrap", "true", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30  # the controller gives the reason at its first pass
        while True:
            found = (squeue_states([job_id]) or {}).get(job_id)
            if (found and found[2]) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert found is not None, f"squeue does not list job {job_id}"
        state, _, reason = found
        # Slurm names the limit PartitionNodeLimit where the partition sets MaxNodes, and
        # PartitionConfig (the local cluster's 22.05, none set) where it only has fewer nodes
        assert state == "PENDING" and reason in ("PartitionNodeLimit", "PartitionConfig"), found
        note = pending_note(job_id, state, reason)
        assert note is not None and note.startswith(f"pending: {reason} (")
        assert note.endswith(f"scancel {job_id} cancels it")
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
