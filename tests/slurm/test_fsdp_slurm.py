"""DDP against FSDP through ``scalescope sweep`` on the local two-node Slurm cluster: the gpt
workload at 1 task and at 1 task on each of two nodes (FSDP's all-gathers and
reduce-scatters between the nodes), under each strategy, summarised into one report with a
series per strategy and the table comparing them."""

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
  - {{nodes: 1, devices_per_node: 1}}
  - {{nodes: 2, devices_per_node: 1}}
strategies: [ddp, fsdp]
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
    assert len(manifest["jobs"]) == 4, manifest["jobs"]
    assert all(j["state"] == "COMPLETED" for j in manifest["jobs"]), manifest["jobs"]

    records: list[ResultRecord] = [
        read_result_json(p) for p in sorted((sweep_dir / "runs").rglob("result.json"))
    ]
    by = {(r.identity.strategy, r.identity.nodes): r for r in records}
    assert set(by) == {("ddp", 1), ("ddp", 2), ("fsdp", 1), ("fsdp", 2)}, sorted(by)
    fsdp = by[("fsdp", 2)]
    assert len(set(fsdp.node_names)) == 2, fsdp.node_names
    d = fsdp.diagnosis
    assert d is not None and d["status"] == "recorded", d
    for rank in d["ranks"]:  # FSDP's collectives counted, between the two nodes
        per_step = rank["collectives_per_step"]
        assert per_step["all_gather"]["count"] > 0 and per_step["reduce_scatter"]["count"] > 0
    # model state per rank: each node holds half of what each DDP rank holds (within 10%)
    ddp = by[("ddp", 2)]
    assert fsdp.memory is not None and ddp.memory is not None
    whole = ddp.memory["model_state_bytes"][0]
    assert fsdp.memory["model_state_bytes"] == [pytest.approx(whole / 2, rel=0.10)] * 2

    summary = json.loads((sweep_dir / "summary" / "summary.json").read_text())
    series = {g["series"] for g in summary["groups"]}
    assert any(s.endswith("· fsdp") for s in series), series
    assert any(not s.endswith("· fsdp") for s in series), series
    assert summary["strategy"], "no DDP-vs-FSDP table in summary.json"
    assert summary["strategy_findings"], "no paragraph on which strategy scales better"
