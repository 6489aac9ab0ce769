"""Shared by the resnet tests of the unit and integration tiers."""

from __future__ import annotations

from pathlib import Path

from core_helpers import TrainRun

from scalescope.workloads import validate_params
from scalescope.workloads.params import ResnetParams

RESNET = (
    "workload.name=resnet",
    "workload.preset=tiny",
    "trainer.max_epochs=2",
    "trainer.batch_size=64",
    "tracking.mode='off'",
)


def _params(tmp_path: Path, **extra: object) -> ResnetParams:
    return validate_params("resnet", {"cache_dir": str(tmp_path / "cache"), **extra})


def _assert_one_line(run: TrainRun, *parts: str) -> None:
    assert run.returncode == 2, run.describe()
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("scalescope train: error: "), run.describe()
    for part in parts:
        assert part in lines[0], run.describe()
    assert run.events() == []
