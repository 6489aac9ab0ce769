"""The FSDP strategy's gradient sync while accumulating (scalescope.job.run.sharded_strategy),
on a real ``fully_shard`` in a one-rank gloo group in this process: whichever module was
sharded (the LightningModule itself, an inner model, or its blocks alone), every unit's
reduce-scatter is off inside ``block_backward_sync`` and on again after it."""

from __future__ import annotations

from typing import Any

import lightning as L
import pytest
import torch
from torch.distributed.fsdp import fully_shard

from scalescope.job.run.sharded_strategy import FsdpStrategy
from scalescope.workloads.sharding import sharded_roots


class Lit(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))


def _units(module: torch.nn.Module) -> list[Any]:
    return [
        group
        for m in module.modules()
        if hasattr(m, "_get_fsdp_state")
        for group in m._get_fsdp_state()._fsdp_param_groups
    ]


def _shard(lit: Lit, where: str) -> None:
    for layer in lit.model:
        fully_shard(layer)
    if where in ("inner", "root"):
        fully_shard(lit.model)
    if where == "root":
        fully_shard(lit)


@pytest.mark.usefixtures("one_rank_group")
@pytest.mark.parametrize(("where", "roots"), [("root", 1), ("inner", 1), ("blocks", 2)])
def test_every_unit_stops_syncing_while_accumulating_wherever_the_root_is(
    where: str, roots: int
) -> None:
    lit = Lit()
    _shard(lit, where)
    assert len(sharded_roots(lit)) == roots
    strategy = FsdpStrategy(data_parallel_size=1, tensor_parallel_size=1)
    strategy.model = lit
    units = _units(lit)
    assert units and all(g.reduce_grads for g in units)
    with strategy.block_backward_sync():
        assert not any(g.reduce_grads for g in units), where
    assert all(g.reduce_grads for g in units)


def test_a_module_not_sharded_has_no_roots() -> None:
    assert sharded_roots(Lit()) == []
