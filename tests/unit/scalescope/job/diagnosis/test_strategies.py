"""Where a strategy's collectives plug into the diagnosis (scalescope.job.diagnosis.strategies):
DDP's wait hooks and all-reduce baseline are the first entries, and another strategy's are
tried beside them without touching them. A real one-rank gloo group and a real DDP; the
trainer is a stand-in holding its model and device."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from scalescope.config import DiagnosisConfig
from scalescope.job.clocks.timing import Timings
from scalescope.job.diagnosis import strategies
from scalescope.job.diagnosis.section import BeforeTiming
from scalescope.job.diagnosis.step_breakdown import StepBreakdown
from scalescope.job.diagnosis.strategies import (
    BASELINES,
    WAIT_HOOKS,
    AllReduceBaseline,
    attach_waits,
    wait_hooks,
)

cpu = torch.device("cpu")


@pytest.fixture
def registries() -> Iterator[None]:
    """Both registries as they were after the test (a test's own strategy does not stay)."""
    hooks, baselines = dict(WAIT_HOOKS), dict(BASELINES)
    yield
    WAIT_HOOKS.clear()
    WAIT_HOOKS.update(hooks)
    BASELINES.clear()
    BASELINES.update(baselines)


class WithBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def breakdown() -> StepBreakdown:
    return StepBreakdown(DiagnosisConfig(), Timings(process_start_unix=0.0))


def trainer_of(model: torch.nn.Module) -> Any:
    return SimpleNamespace(strategy=SimpleNamespace(model=model, root_device=cpu))


def test_ddp_is_the_first_strategy_of_both_registries() -> None:
    assert list(WAIT_HOOKS) == ["ddp", "fsdp"] and list(BASELINES) == ["ddp", "fsdp"]
    assert isinstance(BASELINES["ddp"], AllReduceBaseline)
    assert BASELINES["ddp"].section == "allreduce"


def test_ddps_hooks_take_a_ddp_model_and_mark_its_gradient_and_broadcast(
    one_rank_group: None,
) -> None:
    module = WithBuffer()
    ddp = DistributedDataParallel(module)
    probe = breakdown()
    assert attach_waits(probe, trainer_of(ddp), module) == "ddp"  # type: ignore[arg-type]
    assert len(probe._params) == 2 and len(probe._grad_hooks) == 2
    assert len(module._forward_pre_hooks) == 1  # the buffer broadcast's end


def test_no_strategy_takes_one_device() -> None:
    module = WithBuffer()
    probe = breakdown()
    assert attach_waits(probe, trainer_of(module), module) is None  # type: ignore[arg-type]
    assert probe._params == [] and probe._grad_hooks == []
    assert len(module._forward_pre_hooks) == 0


@pytest.mark.usefixtures("registries")
def test_another_strategys_hooks_are_tried_beside_ddps() -> None:
    """A model DDP's hooks decline goes on to the next strategy's, which marks its own waits
    on the same probe; DDP's entry stays first and unchanged."""
    ddp_hooks = WAIT_HOOKS["ddp"]
    taken: list[Any] = []

    @wait_hooks("sharded")
    def sharded(probe: Any, trainer: Any, pl_module: Any) -> bool:
        if not getattr(trainer.strategy.model, "sharded", False):
            return False
        taken.append(probe)
        return True

    module = WithBuffer()
    module.sharded = True  # type: ignore[assignment]
    probe = breakdown()
    assert attach_waits(probe, trainer_of(module), module) == "sharded"  # type: ignore[arg-type]
    assert taken == [probe] and list(WAIT_HOOKS) == ["ddp", "fsdp", "sharded"]
    assert WAIT_HOOKS["ddp"] is ddp_hooks
    with pytest.raises(ValueError, match="already registered"):
        wait_hooks("ddp")(sharded)


class GatherBaseline:
    """Another strategy's start-up sweep: what it measured is what it was given."""

    section = "all_gather"

    def not_started(self) -> dict[str, Any]:
        return {"status": "skipped", "reason": "not started"}

    def measure(self, trainer: Any, pl_module: Any, cfg: Any, faults: Any) -> dict[str, Any]:
        return {"status": "measured", "world": 1}

    def after_training(self, model: Any, part: dict[str, Any]) -> dict[str, Any]:
        return {**part, "after": True}


@pytest.mark.usefixtures("registries")
def test_before_timing_runs_every_registered_baseline_by_its_section() -> None:
    strategies.BASELINES["sharded"] = GatherBaseline()
    module = WithBuffer()
    before = BeforeTiming(DiagnosisConfig(allreduce_baseline=False), local_rank=1, node="n")
    assert before.baselines["all_gather"]["reason"] == "not started"
    assert before.allreduce == {"status": "skipped", "reason": "training never started"}
    trainer = trainer_of(module)
    before.on_train_start(trainer, module)  # type: ignore[arg-type]
    before.on_train_end(trainer, module)  # type: ignore[arg-type]
    assert before.baselines["all_gather"] == {"status": "measured", "world": 1, "after": True}
    assert before.allreduce["status"] == "off"
    assert before.allreduce["reason"] == "diagnosis.allreduce_baseline=false"
