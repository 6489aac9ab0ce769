"""The projection's mechanics on the local two-node Slurm cluster (issue: a local check).

An emulated network (``faults.network_alpha_s``) holds every all-reduce, DDP's buckets in
training and the diagnosis' sweep alike, back 20 ms x log2(world size): a cost that grows
with scale and dominates the spiral's few-millisecond steps, so the 4 processes of the
largest shape oversubscribing two cores do not decide the outcome. A sweep of 1 task, 2 tasks
on one node and 2 tasks on each of two nodes, twice each, one job at a time (so no job
measures beside another's load), is summarised with ``--project``: the leave-one-out
self-check predicts the 2x2 jobs from the 1x1 and 1x2 ones alone, and their measured
efficiency must be within a factor of 2 of the prediction. Not "inside the interval": the
interval is now the error of published clusters (learned from them), and the oversubscribed
cores, shared with the other test tiers, make these 2x2 jobs 8-29% slower than any network
model says (measured 1.39% against 1.58% [1.44, 1.72] on a quiet machine). This
tests the plumbing (the sweep's fit, the record, the model, the interval), not the physics:
the backtest on published cases does.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from slurm_helpers import REPO, sweep_argv

from analysis import summarize
from scalescope import cli

SWEEP = f"""\
name: projection-check
train_config: {REPO / "configs" / "spiral.yaml"}
overrides:
  trainer.accelerator: cpu
  trainer.max_epochs: 3
  trainer.scaling: weak
  trainer.batch_size: 64
  workload.num_samples: 3000
  tracking.mode: "off"
  faults.network_alpha_s: 0.02
shapes:
  - {{nodes: 1, devices_per_node: 1}}
  - {{nodes: 1, devices_per_node: 2}}
  - {{nodes: 2, devices_per_node: 2}}
repeats: 2
timeout_min: 10
project_nodes: [2, 4]
"""


@pytest.mark.timeout(900)
def test_the_largest_shape_is_projected_from_the_smaller_ones(
    slurm_cluster: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP)
    # one job at a time: none measures beside another's load
    rc = cli.main(sweep_argv(sweep, "projection-check", "--max-parallel", "1"))
    printed = capsys.readouterr().out
    assert rc == 0, printed
    # the sweep's own summary carries the projection (project_nodes)
    assert "Projected: spiral" in printed, printed[-3000:]
    assert "Self-check, spiral" in printed, printed[-3000:]
    sweep_dir = tmp_path / "outputs" / "sweeps" / "projection-check"
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = summarize.main(
            [str(sweep_dir), "--project", "4", "--format", "json", "--no-write", "--jobs", "1"]
        )
    assert rc == 0, err.getvalue()
    doc = json.loads(out.getvalue())
    (check,) = doc["projection_check"]
    print(f"self-check: {check}")
    assert (check["world_size"], check["nodes"]) == (4, 2)
    assert check["from_world_sizes"] == "1,2"
    # within a factor of 2: the 2x2 jobs run beside the other tiers on two shared cores,
    # 8-29% slower than projected in three full-suite runs
    assert 0.5 < check["predicted"] / check["measured"] < 2.0, check
    # with a 2-node shape measured, the inter-node level is no assumption up to 2 nodes
    plain = [r for r in doc["projection"] if r["what_if"] == "as measured"]
    assert "measured at 2 nodes" in plain[0]["network"], plain[0]
