"""The Lightning strategy of ``trainer.strategy: fsdp``: FSDP2 (``fully_shard``) through
Lightning's ``ModelParallelStrategy`` over a 1-D data-parallel mesh of every rank.

Lightning's ``FSDPStrategy`` is FSDP1 and refuses the CPU; ``ModelParallelStrategy`` builds
the device mesh and calls the module's ``configure_model``, which applies ``fully_shard``
(:mod:`scalescope.workloads.sharding`). One thing it leaves out: its
``block_backward_sync``, which Lightning's automatic loop enters on every micro-batch but a
step's last, turns DDP's gradient sync off only. Here it turns FSDP's reduce-scatter off the
same way (``set_requires_gradient_sync``), so a user's module accumulating under Lightning
synchronises once per optimizer step, as it would under DDP.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from datetime import timedelta
from typing import Any

from lightning.pytorch.strategies import ModelParallelStrategy

from ...workloads.sharding import sharded_roots
from .children import StartedRanks, adopting


class FsdpStrategy(ModelParallelStrategy):
    """ModelParallelStrategy with FSDP2's gradient sync switched off while accumulating."""

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        """Every sharded root's reduce-scatters off while accumulating: the module's own, or
        those of the modules it sharded within it (an inner model, or its blocks alone)."""
        roots = sharded_roots(self.model) if self.model is not None else []
        if roots:
            for root in roots:
                root.set_requires_gradient_sync(False)  # type: ignore[operator]
            try:
                yield None
            finally:
                for root in roots:
                    root.set_requires_gradient_sync(True)  # type: ignore[operator]
        else:
            with super().block_backward_sync():
                yield None


def fsdp_strategy(world_size: int, timeout: timedelta, started: StartedRanks | None) -> Any:
    """Every rank in one data-parallel dimension (no tensor parallelism); adopting the ranks
    rank 0 already started, where it did (:func:`.children.start_local_ranks`)."""
    kwargs: dict[str, Any] = {
        "data_parallel_size": world_size,
        "tensor_parallel_size": 1,
        "timeout": timeout,
    }
    if started is not None:
        return adopting(FsdpStrategy, started, **kwargs)
    return FsdpStrategy(**kwargs)
