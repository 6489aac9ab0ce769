"""``scalescope sweep`` through submitit on the local two-node Slurm cluster.

Three shapes, one job each: 1 task; 2 tasks on one node; 1 task on each of two nodes. Every
job must end COMPLETED (``scontrol show job``: accounting is disabled, so no sacct) and its
log must hold exactly one result record with the right world size. A second test preempts a
running job (USR2) and checks that submitit requeues it through ``SweepRun.checkpoint``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_helpers import REPO, EarlyJobs, sweep_argv, wait_for_job

from scalescope import cli
from scalescope.record import ResultRecord, decode_line

SWEEP = f"""\
name: slurm-test
train_config: {REPO / "configs" / "spiral.yaml"}
overrides:
  trainer.accelerator: cpu
  trainer.max_epochs: 1
  workload.num_samples: 1000
  tracking.mode: "off"
shapes:
  - {{nodes: 1, devices_per_node: 1}}
  - {{nodes: 1, devices_per_node: 2}}
  - {{nodes: 2, devices_per_node: 1}}
repeats: 1
timeout_min: 10
"""


def results_in(log: Path) -> list[ResultRecord]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        event = decode_line(line)
        if isinstance(event, ResultRecord):
            out.append(event)
    return out


@pytest.mark.timeout(900)
def test_three_shape_sweep_on_the_local_cluster(
    slurm_cluster: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP)
    rc = cli.main(sweep_argv(sweep, "slurm-e2e"))
    out = capsys.readouterr().out
    sweep_dir = tmp_path / "outputs" / "sweeps" / "slurm-e2e"
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    jobs = {j["shape"]: j for j in manifest["jobs"]}
    assert rc == 0, out
    assert set(jobs) == {"1x1", "1x2", "2x1"}

    for shape, world, nodes in (("1x1", 1, 1), ("1x2", 2, 1), ("2x1", 2, 2)):
        job = jobs[shape]
        assert job["state"] == "COMPLETED", f"{shape}: {job}"
        assert wait_for_job(job["job_id"], timeout_s=60).state == "COMPLETED"
        results = results_in(Path(job["stdout"]))
        assert len(results) == 1, f"{shape}: {len(results)} result records in {job['stdout']}"
        (result,) = results
        ident = result.identity
        assert ident.launcher == "slurm"
        assert (ident.world_size, ident.nodes) == (world, nodes)
        assert ident.sweep_id == "slurm-e2e"
        assert ident.job_id == job["job_id"].split("_")[0] or ident.job_id == job["job_id"]
        assert len(set(result.node_names)) == nodes, result.node_names


@pytest.mark.timeout(600)
def test_preempted_job_is_requeued_and_restarts_cleanly(early_jobs: EarlyJobs) -> None:
    """USR2 (what Slurm sends before preemption or the time limit) reaches submitit, which
    calls SweepRun.checkpoint and requeues: the run starts again from scratch and the one
    result record carries restart count 1. Slurm holds a requeued job back for the cluster's
    cred_expire (20 s), so the sweep was started with the session (slurm_helpers)."""
    sweep = early_jobs.requeue
    rc, out = sweep.finish(timeout_s=420)
    assert sweep.job_id is not None
    job_id, log = sweep.job_id, sweep.log
    assert rc == 0, out
    assert "PENDING" in out  # seen waiting again after the requeue
    job = wait_for_job(job_id, timeout_s=60)
    assert job.state == "COMPLETED" and job.fields.get("Restarts") == "1", job.fields
    events = [e for e in map(decode_line, log.read_text().splitlines()) if e is not None]
    assert [e.identity.restart_count for e in events if not isinstance(e, ResultRecord)] == [0, 1]
    (result,) = [e for e in events if isinstance(e, ResultRecord)]
    assert result.identity.restart_count == 1 and result.identity.world_size == 2
