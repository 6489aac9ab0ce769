"""A job's start: the one line that says a CPU run puts more processes on a node than it has
cores, from rank 0 only, never for a GPU run."""

from __future__ import annotations

import pytest
from core_helpers import pretend_cores

from scalescope.job.run.startup import warn_core_sharing
from scalescope.job.run.topology import Topology

SHARING = (
    "scalescope: warning: trainer.devices=4: 4 processes on 2 cores: they will share cores "
    "and the efficiency measured will include that contention"
)


def topo(devices: int, *, rank: int = 0, launcher: str = "local") -> Topology:
    return Topology(launcher, 1, devices, rank, rank, 0, "7", None, None, 0)


def warned(capsys: pytest.CaptureFixture[str]) -> list[str]:
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


def test_more_cpu_processes_than_cores_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pretend_cores(monkeypatch, 2)
    warn_core_sharing(topo(4), "cpu")
    assert warned(capsys) == [SHARING]


def test_a_core_each_says_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pretend_cores(monkeypatch, 2)
    warn_core_sharing(topo(2), "cpu")
    warn_core_sharing(topo(1), "cpu")
    assert warned(capsys) == []


def test_gpu_runs_and_other_ranks_say_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pretend_cores(monkeypatch, 2)
    warn_core_sharing(topo(4), "gpu")
    for rank in (1, 3):
        warn_core_sharing(topo(4, rank=rank), "cpu")
    assert warned(capsys) == []


def test_under_slurm_the_cores_are_the_jobs_on_the_node(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task bound to its own core sees one: the node's share is Slurm's count."""
    pretend_cores(monkeypatch, 1)
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "4")
    warn_core_sharing(topo(4, launcher="slurm"), "cpu")
    assert warned(capsys) == []
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "2")
    warn_core_sharing(topo(4, launcher="slurm"), "cpu")
    assert warned(capsys) == [SHARING]
