"""The calibration's passes under FSDP2 (scalescope.job.diagnosis.calibration and
sharded.calibration): a real ``fully_shard`` in a one-rank gloo group in this process (an
in-memory store: no port, no process); the trainer is a stand-in holding its model, device,
precision plugin and world size. One rank issues no collective: that the synced windows'
excess is the reduce-scatter, and rises by a held one, is tested with 2 processes
(tests/integration/test_fsdp_diagnosis_job.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from lightning.pytorch.plugins.precision import Precision
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from scalescope.config import DiagnosisConfig, FaultsConfig
from scalescope.job.diagnosis.calibration import _not_run, _Passes
from scalescope.job.diagnosis.sharded import calibration as fsdp
from scalescope.job.faults.fsdp_comms import REDUCE_SCATTER, fsdp_modules, taps_for
from scalescope.job.faults.injection import FaultInjection

cpu = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_rank_group")


class BlocksAndHead(torch.nn.Module):
    """Two blocks sharded each, and a head the root keeps (as gpt's root keeps its
    embeddings): gathered from its forward to its backward."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(2))
        self.head = torch.nn.Linear(8, 1)
        self.fails = False
        """Raise between the blocks (a forward that fails half-way)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.tanh(block(x))
            if self.fails:
                raise RuntimeError("injected")
        return self.head(x)


def sharded() -> BlocksAndHead:
    module = BlocksAndHead()
    for block in module.blocks:
        fully_shard(block)
    fully_shard(module, reshard_after_forward=False)
    return module


BATCH = torch.linspace(-1.0, 1.0, 32).reshape(4, 8)


def passes_over(module: torch.nn.Module, loss_of: Any = None) -> _Passes:
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(model=module, root_device=cpu, precision_plugin=Precision()),
        lightning_module=module,
        world_size=2,  # the calibration's gate; the group itself has one rank
        global_rank=0,
    )
    loss_of = loss_of or (lambda batch: module(batch).square().mean())
    return _Passes(trainer, module, BATCH, loss_of, None)  # type: ignore[arg-type]


def sharded_grads(module: torch.nn.Module) -> list[torch.Tensor | None]:
    """The gradients of the parameters the module holds (FSDP registers its shards)."""
    return [p.grad for p in module.parameters()]


def unsharded_grads_left(module: torch.nn.Module) -> bool:
    params = fsdp.sharded_params(fsdp_modules(module))
    assert params  # this torch keeps the state where it is looked for
    return any(
        getattr(getattr(p, "_unsharded_param", None), "grad", None) is not None
        or p.unsharded_accumulated_grad is not None
        for p in params
    )


def all_resharded(module: torch.nn.Module) -> bool:
    return all(isinstance(p, DTensor) for p in module.parameters())


def test_the_calibration_runs_under_fsdp_and_says_what_it_isolates() -> None:
    module = sharded()
    passes = passes_over(module)
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(model=module), lightning_module=module, world_size=2
    )
    assert _not_run(trainer, DiagnosisConfig(), None) is None  # type: ignore[arg-type]
    assert passes.isolates == "reduce_scatter"
    assert passes_over(torch.nn.Linear(8, 1)).isolates == "all_reduce"  # DDP's module


def test_under_hsdp_the_calibration_isolates_the_shards_all_reduce_too() -> None:
    """Sharded over a 2-D mesh (replicate x shard, here 1 x 1 on the one rank), a pass without
    sync skips the all-reduce of each shard across the shard groups with the reduce-scatter:
    the section says it isolates both."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("replicate", "shard"))
    module = BlocksAndHead()
    for block in module.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(module, mesh=mesh, reshard_after_forward=False)
    assert passes_over(module).isolates == "reduce_scatter+replica_all_reduce"
    assert fsdp.isolates(fsdp_modules(sharded())) == "reduce_scatter"


def test_a_pass_without_sync_reduces_nothing_and_leaves_no_gradient_behind() -> None:
    """A no_sync pass leaves its gradients unsharded (nothing reduced to the shards); the
    next pass drops them, so a synced pass after it reduces its own gradient alone."""
    module = sharded()
    passes = passes_over(module)
    passes.one_pass(True)
    alone = [g.full_tensor().clone() for g in sharded_grads(module) if g is not None]
    assert len(alone) == 6 and not unsharded_grads_left(module)

    passes.one_pass(False)
    assert sharded_grads(module) == [None] * 6  # no reduce-scatter to the shards
    assert unsharded_grads_left(module)  # FSDP kept them unsharded, out of zero_grad's reach

    passes.one_pass(True)  # not the sum of both passes
    after = [g.full_tensor() for g in sharded_grads(module) if g is not None]
    assert len(after) == 6
    for a, b in zip(alone, after, strict=True):
        torch.testing.assert_close(a, b)


def test_after_the_passes_sync_is_on_no_gradient_is_left_and_every_unit_is_resharded() -> None:
    module = sharded()
    passes = passes_over(module)
    passes.one_pass(True)
    passes.one_pass(False)
    with torch.no_grad():  # as a validation pass leaves it: the root's head stays gathered
        module(BATCH)
    assert not all_resharded(module)
    passes.finish()
    assert all_resharded(module) and not unsharded_grads_left(module)
    assert sharded_grads(module) == [None] * 6
    module(BATCH).sum().backward()  # as training would: gradient sync is on again
    assert all(g is not None for g in sharded_grads(module))


def test_a_pass_that_raises_mid_forward_is_cleaned_up_too() -> None:
    """The forward raised half-way (the root gathered and still in its forward, which
    FSDP's own reshard leaves as it is), with sync off. Afterwards, as after any pass."""
    module = sharded()
    passes = passes_over(module)
    module.fails = True
    with pytest.raises(RuntimeError, match="injected"):
        passes.one_pass(False)
    module.fails = False
    assert not all_resharded(module)
    passes.finish()
    assert all_resharded(module)
    module(BATCH).sum().backward()
    assert all(g is not None for g in sharded_grads(module))


def test_a_held_reduce_scatter_is_the_first_after_each_forward() -> None:
    """faults.reducescatter_delay_s: armed by each forward of the sharded model, held once
    (the first reduce-scatter of its backward), whatever the backward issues after it. One
    rank issues no collective: the taps are run as FSDP's reduce-scatter runs them."""
    module = sharded()
    hold_s = 0.2
    trainer = SimpleNamespace(lightning_module=module, world_size=2, global_rank=0)
    injection = FaultInjection(FaultsConfig(reducescatter_delay_s=hold_s))
    injection._hold_first_reduce_scatter(trainer, hold_s)  # type: ignore[arg-type]
    taps, _ = taps_for(module)
    assert taps is not None

    def scatter() -> float:
        started = time.perf_counter()
        taps.run(REDUCE_SCATTER, torch.zeros(1), lambda: None)
        return time.perf_counter() - started

    assert scatter() < hold_s / 2  # no forward yet: nothing armed
    with torch.no_grad():
        module(BATCH)
    assert scatter() >= hold_s
    assert scatter() < hold_s / 2  # the same backward's next reduce-scatter
    with torch.no_grad():
        module(BATCH)
    assert scatter() >= hold_s
