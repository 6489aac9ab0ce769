"""DDP, FSDP and HSDP through ``scalescope sweep`` on the local two-node Slurm cluster: the gpt
workload at 2 tasks on one node and 2 tasks on each of two nodes (FSDP's all-gathers and
reduce-scatters between the nodes; HSDP's within each node, its all-reduce between them),
under each strategy, summarised into one report with a series per strategy and the table
comparing them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from slurm_helpers import REPO, sweep_argv

from scalescope import cli
from scalescope.record import ResultRecord, read_result_json

SWEEP = f"""\
name: fsdp-slurm
train_config: {REPO / "configs" / "gpt.yaml"}
overrides:
  trainer.accelerator: cpu
  workload.preset: tiny
  workload.train_sequences: 256
  workload.val_sequences: 64
  trainer.batch_size: 32
  trainer.max_epochs: 2
  trainer.warmup_steps: 2
  tracking.mode: "off"
shapes:
  - {{nodes: 1, devices_per_node: 2}}
  - {{nodes: 2, devices_per_node: 2}}
strategies: [ddp, fsdp, hsdp]
repeats: 1
timeout_min: 10
"""


@pytest.mark.timeout(900)
def test_ddp_and_fsdp_sweep_gives_one_summary_with_both(
    slurm_cluster: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP)
    rc = cli.main(sweep_argv(sweep, "fsdp-slurm"))
    out = capsys.readouterr().out
    sweep_dir = tmp_path / "outputs" / "sweeps" / "fsdp-slurm"
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    assert rc == 0, out
    assert len(manifest["jobs"]) == 6, manifest["jobs"]
    assert all(j["state"] == "COMPLETED" for j in manifest["jobs"]), manifest["jobs"]

    records: list[ResultRecord] = [
        read_result_json(p) for p in sorted((sweep_dir / "runs").rglob("result.json"))
    ]
    by = {(r.identity.strategy, r.identity.nodes): r for r in records}
    assert set(by) == {(k, n) for k in ("ddp", "fsdp", "hsdp") for n in (1, 2)}, sorted(by)
    fsdp = by[("fsdp", 2)]
    assert len(set(fsdp.node_names)) == 2, fsdp.node_names
    d = fsdp.diagnosis
    assert d is not None and d["status"] == "recorded", d
    for rank in d["ranks"]:  # FSDP's collectives counted, between the two nodes
        per_step = rank["collectives_per_step"]
        assert per_step["all_gather"]["count"] > 0 and per_step["reduce_scatter"]["count"] > 0
    # model state per rank (within 10%): FSDP shards over the 4 ranks, HSDP over a node's 2,
    # so HSDP holds about twice FSDP's at 2 nodes
    ddp, hsdp = by[("ddp", 2)], by[("hsdp", 2)]
    assert fsdp.memory is not None and ddp.memory is not None and hsdp.memory is not None
    whole = ddp.memory["model_state_bytes"][0]
    assert fsdp.memory["model_state_bytes"] == [pytest.approx(whole / 4, rel=0.10)] * 4
    assert hsdp.memory["model_state_bytes"] == [pytest.approx(whole / 2, rel=0.10)] * 4
    # HSDP's shard groups are the nodes: ranks 0-1 on one, 2-3 on the other
    assert hsdp.sharding is not None and hsdp.sharding["mesh"]["shape"] == [2, 2]
    groups = hsdp.sharding["mesh"]["groups"]
    assert groups == {"replicate": [[0, 2], [1, 3]], "shard": [[0, 1], [2, 3]]}
    nodes = hsdp.node_names
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3], nodes

    summary = json.loads((sweep_dir / "summary" / "summary.json").read_text())
    series = {g["series"] for g in summary["groups"]}
    assert any(s.endswith("· fsdp") for s in series), series
    assert any(s.endswith("· hsdp") for s in series), series
    assert any(not s.endswith(("· fsdp", "· hsdp")) for s in series), series
    assert summary["strategy"], "no DDP-vs-FSDP table in summary.json"
    # where the exposed communication crossed nodes: HSDP's all-reduce across its node groups
    at2 = {r["series"].rsplit("· ", 1)[-1]: r for r in summary["diagnosis"] if r["nodes"] == 2}
    assert at2["hsdp"]["comm_inter_note"].startswith("HSDP: its all-reduce"), at2["hsdp"]
    assert at2["fsdp"]["comm_inter_note"] == "every collective spans the nodes", at2["fsdp"]
    hsdp_inter = at2["hsdp"]["comm_inter_step_s_mean"]
    assert 0.0 <= hsdp_inter <= at2["hsdp"]["exposed_comm_s_mean"], at2["hsdp"]
    assert summary["strategy_findings"], "no paragraph on which strategy scales better"
