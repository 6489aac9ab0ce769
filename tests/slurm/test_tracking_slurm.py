"""Comet tracking in a real two-node Slurm job: one offline archive, written by rank 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_helpers import job_env, make_submit_dir, wait_for_job
from tracking_helpers import archives, one_result

from scalescope.job.tracking import comet as tracking


def test_two_node_slurm_job_offline_writes_one_archive(sbatch: Any, tmp_path: Path) -> None:
    repo = make_submit_dir(tmp_path / "repo")
    out = tmp_path / "out"
    overrides = (
        f"trainer.max_epochs=2 workload.num_samples=2000 trainer.batch_size=64 "
        f"tracking.mode=offline output_dir={out}"
    )
    job_id = sbatch(
        "--nodes=2",
        "--ntasks-per-node=1",
        "--time=10",
        "slurm_jobs/multi_node_multi_gpu.sh",
        cwd=repo,
        env={**job_env(), "SCALESCOPE_OVERRIDES": overrides},
    )
    job = wait_for_job(job_id)
    log = (repo / "outputs" / f"slurm-{job_id}.out").read_text(errors="replace")
    assert job.state == "COMPLETED", f"{job.state} {job.exit_code}\n{log[-3000:]}"
    result = one_result(out)
    found = archives(out)
    assert len(found) == 1, found  # one experiment per job: rank 0 on the first node
    data = tracking.read_offline_archive(found[0])
    assert data["name"] == f"spiral-2n1d-{job_id}"
    assert {"world2", "nodes2"} <= set(data["tags"])
    assert data["parameters"]["nodes"] == 2
    assert data["others"]["job_id"] == job_id
    assert data["others"]["launcher"] == "slurm"
    assert result.tracking["archive"] == str(found[0])
