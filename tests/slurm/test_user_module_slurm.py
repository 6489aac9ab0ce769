"""A LightningModule the project has never seen, on the local two-node Slurm cluster.

The example project (examples/my_project: its own module and data module) is submitted the
two ways a user would: the sbatch script across two nodes, and a submitit sweep of 1 task
and of 2 tasks on one node. Every job must end COMPLETED with one result record whose
samples were counted from the project's own loader, and the summary must show the speedup
row exactly as for a built-in workload.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_helpers import REPO, job_env, make_submit_dir, wait_for_job

from scalescope import cli
from scalescope.record import ResultRecord, decode_line

SMALL = "trainer.max_epochs=2 tracking.mode='off'"


def _results(log: Path) -> list[ResultRecord]:
    events = (decode_line(line) for line in log.read_text(errors="replace").splitlines())
    return [e for e in events if isinstance(e, ResultRecord)]


@pytest.mark.timeout(600)
def test_example_project_through_sbatch_on_two_nodes(sbatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = make_submit_dir(tmp_path / "repo", links=("slurm_jobs", "configs", "src", "examples"))
    job_id = sbatch(
        "--nodes=2",
        "--ntasks-per-node=1",
        "--time=10",
        "slurm_jobs/multi_node_multi_gpu.sh",
        cwd=repo,
        env={
            **job_env(),
            "SCALESCOPE_CONFIG": "examples/my_project.yaml",
            "SCALESCOPE_OVERRIDES": SMALL,
        },
    )
    job = wait_for_job(job_id)
    log = repo / "outputs" / f"slurm-{job_id}.out"
    text = log.read_text(errors="replace")
    assert job.state == "COMPLETED", f"{job.state} {job.exit_code}\n{text[-3000:]}"
    (result,) = _results(log)
    assert result.identity.workload == "examples.my_project.model:MyModel"
    assert result.identity.world_size == 2 and len(set(result.node_names)) == 2
    assert result.identity.cluster == "local"
    assert result.flops_source == "measured" and (result.model_flops_per_sample or 0) > 0
    assert result.train_samples > 0 and result.steady_samples_per_s


@pytest.mark.timeout(900)
def test_example_project_sweep_on_the_cluster_and_its_summary(
    slurm_cluster: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The user's own project folder: the package beside its configs, submitted from there.
    project = tmp_path / "project"
    project.mkdir()
    (project / "examples").symlink_to(REPO / "examples")
    monkeypatch.chdir(project)
    rc = cli.main(
        [
            "sweep",
            "--config",
            "examples/sweeps/my_project.yaml",
            "--cluster",
            str(REPO / "configs" / "clusters" / "local.yaml"),
            "--executor",
            "slurm",
            "--wait",
            "--repeats",
            "1",
            "--sweep-id",
            "user-slurm",
            *SMALL.split(),
        ]
    )
    out = capsys.readouterr().out
    sweep_dir = project / "outputs" / "sweeps" / "user-slurm"
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    assert rc == 0, out
    assert sorted(j["world_size"] for j in manifest["jobs"]) == [1, 2]
    for job in manifest["jobs"]:
        assert job["state"] == "COMPLETED", job
        (result,) = _results(Path(job["stdout"]))
        assert result.identity.world_size == job["world_size"]
        assert result.identity.launcher == "slurm" and result.identity.cluster == "local"
    summary = subprocess.run(
        [sys.executable, "-m", "analysis.summarize", str(sweep_dir), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert summary.returncode == 0, summary.stderr
    doc = json.loads(summary.stdout)
    rows = {r["world_size"]: r for r in doc["scaling"]}
    assert set(rows) == {1, 2} and rows[2]["speedup"] > 0
    assert rows[2]["headline_basis"] == "steady state"
