"""FSDP2's collectives, tapped through its public custom-collective hooks.

``fully_shard`` lets a module's all-gather and reduce-scatter be replaced
(``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``). :func:`taps_for`
installs, once per LightningModule, wrappers that call exactly what FSDP's defaults call
(``all_gather_single`` / ``reduce_scatter_single``, same arguments) and around each call run

* the *holds* (:attr:`Taps.holds`): called before the collective with its kind -- the
  faults' delay of a step's first all-gather (:mod:`.injection`);
* the *listeners* (:attr:`Taps.listeners`): ``start(kind)`` before the holds and
  ``end(kind, nbytes, started)`` after the call returns -- the diagnosis' marks of each
  collective's wait and its count of what was issued (:mod:`..diagnosis.sharded.waits`).

Both users share one wrapper (a later ``set_custom_*`` would replace an earlier one), and a
hold sits inside the listeners' span: a held collective is a slower one.

Under hybrid sharding (HSDP: a 2-D mesh) each reduce-scatter is followed by an all-reduce of
its output across the shard groups, which torch calls directly; FSDP2's all-reduce hook
(``set_all_reduce_hook``, called right after it) closes its span, opened when the
reduce-scatter returned (:data:`REPLICA_ALL_REDUCE`): on CPUs, where both run on the training
thread, that span is the all-reduce; its holds run in the hook, inside the span. This module lives
with the faults, the lowest room that needs it; the diagnosis imports it from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
REPLICA_ALL_REDUCE = "replica_all_reduce"


class Listener(Protocol):
    def start(self, kind: str) -> Any: ...

    def end(self, kind: str, nbytes: int, started: Any) -> None: ...


class Taps:
    """The holds and listeners every tapped collective of one module runs."""

    def __init__(self) -> None:
        self.holds: list[Callable[[str], None]] = []
        self.listeners: list[Listener] = []
        self.hybrid = False
        """Whether a tapped module shards on HSDP's 2-D mesh (its all-reduce is tapped too)."""
        self._replica_started: list[Any] = []

    def run(self, kind: str, output: torch.Tensor, call: Callable[[], Any]) -> Any:
        started = [listener.start(kind) for listener in self.listeners]
        for hold in self.holds:
            hold(kind)
        result = call()
        nbytes = output.numel() * output.element_size()
        for listener, mark in zip(self.listeners, started, strict=True):
            listener.end(kind, nbytes, mark)
        if kind == REDUCE_SCATTER and self.hybrid:  # the all-reduce across groups comes next
            self._replica_started = [
                listener.start(REPLICA_ALL_REDUCE) for listener in self.listeners
            ]
        return result

    def all_reduced(self, output: torch.Tensor) -> None:
        """FSDP2's all-reduce hook under HSDP: the all-reduce of ``output`` has been issued
        (on CPUs: has run); its holds, then its listeners' end."""
        started, self._replica_started = self._replica_started, []
        if len(started) != len(self.listeners):
            started = [None] * len(self.listeners)
        for hold in self.holds:
            hold(REPLICA_ALL_REDUCE)
        nbytes = output.numel() * output.element_size()
        for listener, mark in zip(self.listeners, started, strict=True):
            listener.end(REPLICA_ALL_REDUCE, nbytes, mark)


_ATTR = "_scalescope_fsdp_taps"


def fsdp_modules(module: torch.nn.Module) -> list[Any]:
    """The modules ``fully_shard`` was applied to (an empty list: not FSDP2)."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)]


def is_hybrid(module: Any) -> bool:
    """Whether an FSDP module shards on a 2-D (replicate x shard) mesh: HSDP, whose gradient
    shards are all-reduced across the shard groups."""
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None) or []
    return any(
        getattr(g.mesh_info, "replicate_mesh_dim", None) is not None
        and getattr(g.mesh_info, "shard_mesh_dim", None) is not None
        for g in groups
    )


def taps_for(module: torch.nn.Module) -> tuple[Taps | None, str | None]:
    """The module's taps, installed on every FSDP module in it at the first call, or None and
    why not (no FSDP2 module in it; FSDP refuses a custom collective, as it does for a module
    with parameters on several meshes)."""
    taps = getattr(module, _ATTR, None)
    if isinstance(taps, Taps):
        return taps, None
    sharded = fsdp_modules(module)
    if not sharded:
        return None, f"not sharded by FSDP2 ({type(module).__name__})"
    taps = Taps()
    try:
        gather, scatter = _comms(taps)
        for m in sharded:
            m.set_custom_all_gather(gather)
            m.set_custom_reduce_scatter(scatter)
            if is_hybrid(m):
                m.set_all_reduce_hook(taps.all_reduced)
                taps.hybrid = True
    except (ValueError, ImportError, AttributeError) as exc:
        return None, f"FSDP's custom collectives could not be set: {exc}"
    object.__setattr__(module, _ATTR, taps)  # not a submodule, not a parameter
    return taps, None


def _comms(taps: Taps) -> tuple[Any, Any]:
    """An all-gather and a reduce-scatter for ``set_custom_*``: FSDP's defaults (their
    allocation, their calls), through ``taps``."""
    import torch.distributed as dist
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    class TappedAllGather(DefaultAllGather):
        def __call__(
            self,
            output_tensor: torch.Tensor,
            input_tensor: torch.Tensor,
            group: dist.ProcessGroup,
            async_op: bool = False,
        ) -> Any:
            return taps.run(
                ALL_GATHER,
                output_tensor,
                lambda: super(TappedAllGather, self).__call__(
                    output_tensor, input_tensor, group, async_op
                ),
            )

    class TappedReduceScatter(DefaultReduceScatter):
        def __call__(
            self,
            output_tensor: torch.Tensor,
            input_tensor: torch.Tensor,
            group: dist.ProcessGroup,
            op: Any,
            async_op: bool = False,
        ) -> Any:
            return taps.run(
                REDUCE_SCATTER,
                output_tensor,
                lambda: super(TappedReduceScatter, self).__call__(
                    output_tensor, input_tensor, group, op, async_op
                ),
            )

    return TappedAllGather(), TappedReduceScatter()
