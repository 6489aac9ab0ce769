"""FSDP2's waits on the step breakdown (scalescope.job.diagnosis.sharded.waits) and every
DDP-only path under FSDP: a real ``fully_shard`` in a one-rank gloo group in this process (an
in-memory store: no port, no process); the trainer is a stand-in holding its model, device
and world size. FSDP issues no collective on one rank: what the taps count and time, and
the held all-gather, are tested with 2 processes (tests/integration/test_fsdp_taps.py,
test_fsdp_diagnosis_job.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from scalescope.config import DiagnosisConfig, FaultsConfig
from scalescope.job.clocks.timing import Timings
from scalescope.job.diagnosis.allreduce import FSDP_HAS_NO_BUCKETS, read_ddp_buckets
from scalescope.job.diagnosis.calibration import _not_run
from scalescope.job.diagnosis.step_breakdown import StepBreakdown
from scalescope.job.diagnosis.step_clock import COLLECTIVES
from scalescope.job.diagnosis.strategies import attach_waits
from scalescope.job.faults.fsdp_comms import taps_for
from scalescope.job.faults.injection import FaultInjection, _hook_allreduce, not_applied

cpu = torch.device("cpu")


class TwoBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def sharded() -> TwoBlocks:
    module = TwoBlocks()
    for block in module.blocks:
        fully_shard(block)
    fully_shard(module, reshard_after_forward=False)
    return module


def trainer_of(module: torch.nn.Module, world_size: int = 2) -> Any:
    return SimpleNamespace(
        strategy=SimpleNamespace(model=module, root_device=cpu),
        lightning_module=module,
        world_size=world_size,
        global_rank=0,
        global_step=0,
        training=True,
    )


def counting_breakdown() -> StepBreakdown:
    probe = StepBreakdown(DiagnosisConfig(), Timings(process_start_unix=0.0))
    probe.clock = probe.clock.__class__(COLLECTIVES["ddp"])
    return probe


@pytest.mark.usefixtures("one_rank_group")
def test_fsdps_hooks_take_a_sharded_model_and_ddps_marks_stay_off() -> None:
    module = sharded()
    probe = counting_breakdown()
    trainer = trainer_of(module)
    assert attach_waits(probe, trainer, module) == "fsdp"  # type: ignore[arg-type]
    assert tuple(probe.clock.steps) == ("all_gather", "reduce_scatter", "replica_all_reduce")
    # no last-gradient hook (it would fire after FSDP's reduce-scatter), no DDP marks
    assert probe._grad_hooks == [] and probe._params == [] and probe.ready is None
    assert probe._grad_order is None


@pytest.mark.usefixtures("one_rank_group")
def test_every_ddp_only_path_measures_or_says_why_under_fsdp() -> None:
    module = sharded()
    trainer = trainer_of(module)
    cfg = DiagnosisConfig()
    # the calibration runs (its windows isolate the reduce-scatter: test_calibration.py)
    assert _not_run(trainer, cfg, None) is None  # type: ignore[arg-type]
    assert read_ddp_buckets(module) == (None, FSDP_HAS_NO_BUCKETS)
    why = _hook_allreduce(trainer, FaultsConfig(allreduce_delay_s=0.02))  # type: ignore[arg-type]
    assert why is not None and "allgather_delay_s" in why
    injection = FaultInjection(FaultsConfig(allreduce_delay_s=0.02, network_busbw_gbps=1.0))
    injection.on_train_start(trainer, module)  # type: ignore[arg-type]
    # each requested fault by name, and only those requested; the record reads them
    assert list(injection.not_applied) == ["allreduce_delay_s", "network_busbw_gbps"]
    trainer.callbacks = [object(), injection]
    assert not_applied(trainer) == injection.not_applied  # type: ignore[arg-type]
    trainer.callbacks = [FaultInjection(FaultsConfig())]
    assert not_applied(trainer) is None  # type: ignore[arg-type]


def test_a_model_not_sharded_has_no_taps_and_says_why() -> None:
    module = TwoBlocks()
    taps, why = taps_for(module)
    assert taps is None and why == "not sharded by FSDP2 (TwoBlocks)"
    injection = FaultInjection(FaultsConfig(allgather_delay_s=0.02))
    injection.on_train_start(trainer_of(module), module)  # type: ignore[arg-type]
    assert "allgather_delay_s" in injection.not_applied


@pytest.mark.gpu
def test_on_a_gpu_fsdps_pre_forward_is_bracketed_on_the_compute_stream() -> None:
    """CUDA-event marks around FSDP's pre-forward of every sharded module: a prepended
    forward pre-hook before FSDP's own, a plain one after it; the all-gather's slot of the
    step holds their span once the events are read."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    device = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.cuda.set_device(device)
        module = TwoBlocks().to(device)
        for block in module.blocks:
            fully_shard(block)
        fully_shard(module)
        probe = StepBreakdown(DiagnosisConfig(), Timings(process_start_unix=0.0))
        trainer = SimpleNamespace(
            strategy=SimpleNamespace(model=module, root_device=device),
            lightning_module=module,
            world_size=2,  # the hooks' gate; the group itself has one rank
        )
        assert attach_waits(probe, trainer, module) == "fsdp"  # type: ignore[arg-type]
        assert probe.clock.kind == "cuda_events"
        hooks = list(module._forward_pre_hooks.values())
        assert hooks[0] == probe.fsdp._before_unshard
        assert hooks[-1] == probe.fsdp._after_unshard
        probe._counting = True
        module(torch.ones(4, 8, device=device)).sum().backward()
        probe.clock.settle()
        assert probe.clock.steps["all_gather"][0] >= 0.0
        assert probe.clock.totals["comm_wait_s"] >= 0.0
    finally:
        dist.destroy_process_group()


def test_the_fsdp_baseline_section_is_left_out_of_a_run_not_sharded() -> None:
    from scalescope.job.diagnosis.section import assemble
    from scalescope.job.diagnosis.sharded import baseline as fsdp_baseline

    def section(fsdp: Any) -> dict[str, Any]:
        return assemble(
            per_rank=[{}],
            steady_steps=None,
            per_device_batch_size=1,
            allreduce={},
            nvml={},
            calibration={"steps": 8},
            calibration_steps=8,
            fsdp_collectives=fsdp,
        )

    module = TwoBlocks()
    part = fsdp_baseline.FsdpBaseline().measure(
        trainer_of(module),
        module,
        DiagnosisConfig(),
        None,  # type: ignore[arg-type]
    )
    assert part == {"status": "skipped", "reason": fsdp_baseline.NOT_FSDP}
    assert "fsdp_collectives" not in section(part)
    assert section({"status": "measured"})["fsdp_collectives"] == {"status": "measured"}


@pytest.mark.usefixtures("one_rank_group")
def test_the_all_gather_hold_waits_for_training_not_validation() -> None:
    """``faults.allgather_delay_s`` holds each optimizer step's first all-gather; a validation
    pass gathers too, and must leave the hold armed for the next training step's gather
    (else the step after each validation pass runs unheld)."""
    module = sharded()
    trainer = trainer_of(module)
    injection = FaultInjection(FaultsConfig(allgather_delay_s=0.001))
    injection.on_train_start(trainer, module)  # type: ignore[arg-type]
    taps, _ = taps_for(module)
    assert taps is not None and injection._first_gather == [True]
    trainer.training = False  # validating
    for hold in taps.holds:
        hold("all_gather")
    assert injection._first_gather == [True]
    trainer.training = True
    for hold in taps.holds:
        hold("all_gather")
    assert injection._first_gather == [False]


def test_an_all_reduce_across_shard_groups_of_one_rank_is_counted_and_ends_the_step() -> None:
    """HSDP in shard groups of one rank (a node of one device, the default shard size there):
    FSDP issues no gather and no reduce-scatter, only each shard's all-reduce across the
    groups, so no reduce-scatter opened its span. It is counted (calls and bytes), its
    backward ends an optimizer step, and its time, unmeasured, stays in compute (it raised a
    TypeError at the first steady step)."""
    from scalescope.job.diagnosis.sharded.waits import FsdpWaits
    from scalescope.job.diagnosis.step_clock import Clock
    from scalescope.job.faults.fsdp_comms import REPLICA_ALL_REDUCE

    probe = SimpleNamespace(
        clock=Clock(COLLECTIVES["fsdp"]), _counting=True, _step=0, _synced=0, window=None
    )
    probe._waits_to = lambda: probe.clock
    waits = FsdpWaits(probe, cpu)
    for _ in range(2):
        waits.backward_starts()
        for nbytes in (288, 288):  # one all-reduce a unit, each hooked with no span
            waits.end(REPLICA_ALL_REDUCE, nbytes, None)
        waits.backward_ends()
    assert waits.issued[REPLICA_ALL_REDUCE] == [4, 1152]
    assert probe._step == 2 and probe._synced == 2
    # and a backward with no collective at all still accumulates
    waits.backward_starts()
    waits.backward_ends()
    assert probe._step == 2


@pytest.mark.usefixtures("one_rank_group")
def test_the_baseline_gathers_in_the_policys_dtype_and_reduces_in_its_reduce_dtype() -> None:
    """The FSDP baseline's sizes are FSDP's: under a bf16 gather and fp32 reduction policy
    (``bf16-mixed``) each unit's gather is half its reduce-scatter (it was timed at the fp32
    storage size, twice FSDP's gather); with no policy the two are the parameters' own."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from scalescope.job.diagnosis.sharded.baseline import shard_bytes

    plain, mixed = TwoBlocks(), TwoBlocks()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for module, kw in ((plain, {}), (mixed, {"mp_policy": policy})):
        for block in module.blocks:
            fully_shard(block, **kw)
        fully_shard(module, **kw)
    block = (8 * 8 + 8) * 4  # a Linear(8, 8)'s weight and bias in fp32, one rank
    assert shard_bytes(plain) == [(block, block), (block, block)]
    assert shard_bytes(mixed) == [(block // 2, block), (block // 2, block)]
