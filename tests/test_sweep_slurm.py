"""``scalescope sweep`` through submitit on the local two-node Slurm cluster.

Three shapes, one job each: 1 task; 2 tasks on one node; 1 task on each of two nodes. Every
job must end COMPLETED (``scontrol show job``: accounting is disabled, so no sacct) and its
log must hold exactly one result record with the right world size.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_helpers import REPO, wait_for_job

from scalescope import cli
from scalescope.record import ResultRecord, decode_line

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

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
    rc = cli.main(
        [
            "sweep",
            "--config",
            str(sweep),
            "--cluster",
            str(REPO / "configs" / "clusters" / "local.yaml"),
            "--executor",
            "slurm",
            "--wait",
            "--sweep-id",
            "slurm-e2e",
        ]
    )
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
