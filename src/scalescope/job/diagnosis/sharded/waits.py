"""FSDP2's waits on the step breakdown's clock, and what it issued per optimizer step.

Registered as ``WAIT_HOOKS["fsdp"]`` (:mod:`.strategies`). The collectives are tapped
through FSDP's public custom-collective hooks (:mod:`..faults.fsdp_comms`): wrappers that
call FSDP's own default all-gather and reduce-scatter.

* On CPUs FSDP's collectives run synchronously on the training thread (gloo, nothing
  overlaps), so the wall time inside each call is that collective's wait: each all-gather
  (before a block's forward, and before its backward unless ``reshard_after_forward`` is off)
  and each reduce-scatter (after a block's backward) goes into the step's series of its kind.
* On GPUs the calls only enqueue work on FSDP's own streams, so the waits are CUDA-event
  marks on the compute stream: a prepended forward pre-hook and a plain one bracket FSDP's
  pre-forward (its unshard and the compute stream's wait for the all-gather) of each sharded
  module; the end of backward is timed from the last reduce-scatter's issue to ``backward``
  returning (FSDP's final backward callback makes the compute stream wait for it). The
  all-gathers FSDP prefetches during backward are not marked apart: what of them is exposed
  shows in backward's own time.

Every call is also counted where it is issued, with the bytes it moves (an all-gather's
gathered output, a reduce-scatter's output), over the steady steps: the record's
``collectives_per_step``. A backward that issued no reduce-scatter did not synchronise
gradients (``set_requires_gradient_sync(False)``: an accumulating micro-batch); the optimizer
step is counted at the backward that did.

Under FSDP2 the sharded parameters' post-accumulate-grad hooks fire after the
reduce-scatter, called by FSDP itself, so DDP's last-gradient mark is not installed here.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch

from ...faults.fsdp_comms import (
    ALL_GATHER,
    REDUCE_SCATTER,
    REPLICA_ALL_REDUCE,
    fsdp_modules,
    taps_for,
)
from ..step_clock import COLLECTIVES, clock_for
from ..strategies import wait_hooks


class FsdpWaits:
    """The breakdown's FSDP marks (a listener of the tapped collectives)."""

    def __init__(self, probe: Any, device: torch.device) -> None:
        self.probe = probe
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.current_stream(device) if self.cuda else None
        """The compute stream, where every GPU mark is recorded."""
        self.issued = {key: [0, 0] for key in COLLECTIVES["fsdp"]}
        """Per collective, the calls and bytes issued in the counted steps."""
        self.committed = {key: [0, 0] for key in COLLECTIVES["fsdp"]}
        self.scatters = 0
        """Reduce-scatters issued in the current backward."""
        self.replicas = 0
        """All-reduces across shard groups issued in the current backward (HSDP)."""
        self._last_scatter: Any = None
        self._forward_start: Any = None
        self.validating = False
        """Inside validation: its all-gathers are neither timed nor counted."""

    # the taps' listener ---------------------------------------------------------------
    def start(self, kind: str) -> Any:
        if not self.cuda:
            return time.perf_counter()
        return self._mark() if kind == REDUCE_SCATTER else None

    def end(self, kind: str, nbytes: int, started: Any) -> None:
        probe = self.probe
        if self.validating:
            return
        if kind == REDUCE_SCATTER:
            self.scatters += 1
            self._last_scatter = started
        elif kind == REPLICA_ALL_REDUCE:
            self.replicas += 1
        if probe._counting:
            count = self.issued[kind]
            count[0] += 1
            count[1] += nbytes
        to = probe._waits_to()
        # no start: an all-reduce across shard groups of one rank, which FSDP issues with no
        # reduce-scatter before it to open its span; counted, its time stays in compute
        if self.cuda or to is None or started is None:
            return
        end = time.perf_counter()
        to.add("comm_wait_s", started, end)
        if to is probe.clock:
            to.add(kind, started, end, step=probe._step)

    # GPU marks around FSDP's pre-forward -----------------------------------------------
    def _mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)
        event.record(self.stream)
        return event

    def _before_unshard(self, _module: Any, _args: Any) -> None:
        timed = self.probe._waits_to() is not None and not self.validating
        self._forward_start = self._mark() if timed else None

    def _after_unshard(self, _module: Any, _args: Any) -> None:
        start, self._forward_start = self._forward_start, None
        to = self.probe._waits_to()
        if start is None or to is None:
            return
        end = self._mark()
        to.add("comm_wait_s", start, end)
        if to is self.probe.clock:
            to.add(ALL_GATHER, start, end, step=self.probe._step)

    def hook_forwards(self, module: torch.nn.Module) -> None:
        for m in fsdp_modules(module):
            m.register_forward_pre_hook(self._before_unshard, prepend=True)
            m.register_forward_pre_hook(self._after_unshard)

    # the breakdown's backward ----------------------------------------------------------
    def backward_starts(self) -> None:
        self.scatters = self.replicas = 0
        self._last_scatter = None

    def backward_ends(self) -> None:
        """A backward that reduce-scattered (or, in shard groups of one rank, all-reduced
        across them) ends an optimizer step (on GPUs: its last reduce-scatter's issue to now
        is the wait); one that did neither accumulates."""
        probe = self.probe
        synced = self.scatters > 0 or self.replicas > 0
        self.scatters = self.replicas = 0
        start, self._last_scatter = self._last_scatter, None
        if not synced:
            return
        to = probe._waits_to()
        if self.cuda and start is not None and to is not None:
            end = self._mark()
            to.add("comm_wait_s", start, end)
            if to is probe.clock:
                to.add(REDUCE_SCATTER, start, end, step=probe._step)
        if probe._counting:
            probe._synced += 1
            probe._step += 1

    def commit(self) -> None:
        """At an epoch's end: what the steady time covers."""
        self.committed = {key: list(count) for key, count in self.issued.items()}

    def per_step(self, per: float) -> dict[str, dict[str, float]]:
        """Calls and bytes issued per optimizer step (``per``: 1 / the steady steps)."""
        return {
            key: {"count": count * per, "bytes": nbytes * per}
            for key, (count, nbytes) in self.committed.items()
        }


@wait_hooks("fsdp")
def fsdp_waits(probe: Any, trainer: L.Trainer, pl_module: L.LightningModule) -> bool:
    """FSDP2's waits (see the module): the taps' listener, the breakdown's clock keeping the
    FSDP collectives' per-step series, and on GPUs the forward pre-hooks. False where the
    module is not sharded by FSDP2; where it is but its collectives cannot be tapped, the
    reason is kept (:attr:`StepBreakdown.not_timed`) and no wait is marked."""
    if not fsdp_modules(pl_module) or trainer.world_size <= 1:
        return False
    taps, why = taps_for(pl_module)
    if taps is None:
        probe.not_timed = why
        return False
    device = trainer.strategy.root_device
    waits = FsdpWaits(probe, device)
    probe.clock = clock_for(device, COLLECTIVES["fsdp"])
    probe.fsdp = waits
    taps.listeners.append(waits)
    if waits.cuda:
        waits.hook_forwards(pl_module)
    return True
