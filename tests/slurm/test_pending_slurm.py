"""A shape larger than the local cluster's 2-node partition: a sweep refuses it before
submitting anything (sinfo), and a job submitted by hand with it pends with
PartitionNodeLimit (PartitionConfig where the partition sets no MaxNodes), which the
sweep's live view shows with its scancel (squeue's %r)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from slurm_helpers import REPO, sbatch

from scalescope import cli
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
