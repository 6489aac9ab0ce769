"""Builders for the sweep tests: a sweep file, a cluster profile, its local plan, the CLI
in-process, and the check that a refused sweep submitted nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalescope import cli
from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

TRAIN_CONFIG = """\
name: spiral
workload: {name: spiral, num_samples: 1000}
trainer: {scaling: strong, batch_size: 256, max_epochs: 1, accelerator: cpu}
tracking: {mode: "off"}
"""

GPU_PROFILE = """\
name: test-a100
partition: gpu
account: proj42
qos: normal
gpus_per_node: 4
cpus_per_task: 8
mem_gb: 240
max_nodes: 4
max_devices_per_node: 4
timeout_min: 45
constraint: a100
setup: |
  module load cuda/12.4
  source "$HOME/venvs/scalescope/bin/activate"
sbatch_extra: ['--exclusive', '--reservation=bench']
"""

CPU_PROFILE = """\
name: test-cpu
partition: debug
max_nodes: 2
max_devices_per_node: 2
"""


def _shapes(*shapes: tuple[int, int]) -> str:
    return "".join(f"  - {{nodes: {n}, devices_per_node: {d}}}\n" for n, d in shapes)


def write_sweep(
    root: Path,
    *,
    shapes: tuple[tuple[int, int], ...] = ((1, 1), (1, 2)),
    extra: str = "",
    overrides: str = "",
    train: str = TRAIN_CONFIG,
    train_path: str = "../train.yaml",
) -> Path:
    (root / "configs" / "sweeps").mkdir(parents=True, exist_ok=True)
    (root / "configs" / "train.yaml").write_text(train)
    sweep = root / "configs" / "sweeps" / "test.yaml"
    text = f"name: test\ntrain_config: {train_path}\nshapes:\n{_shapes(*shapes)}{extra}"
    if overrides:
        text += f"overrides:\n{overrides}"
    sweep.write_text(text)
    return sweep


def write_profile(root: Path, text: str, name: str = "site.yaml") -> Path:
    path = root / "configs" / "clusters" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def sweep_cli(*argv: str) -> int:
    return cli.main(["sweep", *argv])


def assert_nothing_submitted(root: Path) -> None:
    assert not (root / "outputs").exists(), "a job folder was created although validation failed"


def expect_error(root: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = sweep_cli(*argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("scalescope sweep: error: ")
    assert len(err.splitlines()) == 1, err
    assert_nothing_submitted(root)
    return err


def plan_of(sweep: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    """The sweep file's plan for the local executor."""
    return plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t", **kwargs)
