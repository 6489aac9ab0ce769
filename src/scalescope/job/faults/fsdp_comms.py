"""FSDP2's collectives, tapped through its public custom-collective hooks.

``fully_shard`` lets a module's all-gather and reduce-scatter be replaced
(``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``). :func:`taps_for`
installs, once per LightningModule, wrappers that call exactly what FSDP's defaults call
(``all_gather_single`` / ``reduce_scatter_single``, same arguments) and around each call run

* the *holds* (:attr:`Taps.holds`): called before the collective with its kind -- the
  faults' delay of a step's first all-gather (:mod:`.injection`);
* the *listeners* (:attr:`Taps.listeners`): ``start(kind)`` before the holds and
  ``end(kind, nbytes, started)`` after the call returns -- the diagnosis' marks of each
  collective's wait and its count of what was issued (:mod:`..diagnosis.fsdp_waits`).

Both users share one wrapper (a later ``set_custom_*`` would replace an earlier one), and a
hold sits inside the listeners' span: a held collective is a slower one. This module lives
with the faults, the lowest room that needs it; the diagnosis imports it from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"


class Listener(Protocol):
    def start(self, kind: str) -> Any: ...

    def end(self, kind: str, nbytes: int, started: Any) -> None: ...


class Taps:
    """The holds and listeners every tapped collective of one module runs."""

    def __init__(self) -> None:
        self.holds: list[Callable[[str], None]] = []
        self.listeners: list[Listener] = []

    def run(self, kind: str, output: torch.Tensor, call: Callable[[], Any]) -> Any:
        started = [listener.start(kind) for listener in self.listeners]
        for hold in self.holds:
            hold(kind)
        result = call()
        nbytes = output.numel() * output.element_size()
        for listener, mark in zip(self.listeners, started, strict=True):
            listener.end(kind, nbytes, mark)
        return result


_ATTR = "_scalescope_fsdp_taps"


def fsdp_modules(module: torch.nn.Module) -> list[Any]:
    """The modules ``fully_shard`` was applied to (an empty list: not FSDP2)."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)]


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
