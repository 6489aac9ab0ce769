"""Where a strategy's collectives plug into the diagnosis (their names and keys are in
:mod:`scalescope.collectives`), one entry per strategy in each of two registries:

* :data:`WAIT_HOOKS` -- a :class:`WaitHooks`: given the step breakdown, the trainer and the
  module, it installs the hooks that mark its collectives' waits on the breakdown's clock,
  and says whether the trainer's model is its strategy's. DDP's
  (:func:`.step_breakdown.ddp_waits`) marks the gradient all-reduce and the buffer broadcast;
* :data:`BASELINES` -- a :class:`Baseline`: a sweep of a collective on the job's own
  allocation before training, the record section it fills, and its update once training has
  ended. DDP's is :class:`AllReduceBaseline` (here), over :mod:`.allreduce`.

Another strategy's go beside DDP's, in a module of its own: FSDP's hooks would mark the
all-gather before a unit's forward and backward and the reduce-scatter after its backward,
its baseline would sweep those two collectives (a record section of its own). Nothing of
DDP's changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import lightning as L

from ...allreduce_model import estimate_bucket_bytes
from ...config import DiagnosisConfig, FaultsConfig
from . import allreduce as ar


class WaitHooks(Protocol):
    def __call__(self, probe: Any, trainer: L.Trainer, pl_module: L.LightningModule) -> bool:
        """Install the marks of this strategy's waits on ``probe`` (the step breakdown) when
        the trainer's model is this strategy's, and say whether it was."""
        ...


class Baseline(Protocol):
    section: str
    """The record's ``diagnosis`` key it fills."""

    def not_started(self) -> dict[str, Any]: ...

    def measure(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        cfg: DiagnosisConfig,
        faults: FaultsConfig | None,
    ) -> dict[str, Any]:
        """At training's start, on every rank (its collectives: every rank runs them)."""
        ...

    def after_training(self, model: Any, part: dict[str, Any]) -> dict[str, Any]:
        """``part`` once training has ended (no collective)."""
        ...


def never_started() -> dict[str, Any]:
    """A baseline's section where training never started (every strategy's the same)."""
    return {"status": "skipped", "reason": "training never started"}


WAIT_HOOKS: dict[str, WaitHooks] = {}
BASELINES: dict[str, Baseline] = {}


def wait_hooks(strategy: str) -> Callable[[WaitHooks], WaitHooks]:
    """Register a strategy's :class:`WaitHooks` (a decorator)."""

    def add(hooks: WaitHooks) -> WaitHooks:
        if strategy in WAIT_HOOKS:
            raise ValueError(f"wait hooks of {strategy!r} already registered")
        WAIT_HOOKS[strategy] = hooks
        return hooks

    return add


def attach_waits(probe: Any, trainer: L.Trainer, pl_module: L.LightningModule) -> str | None:
    """The strategy whose hooks took the trainer's model (marking its waits from now on), or
    None: one device, or a strategy none is registered for (no waits marked)."""
    for strategy, hooks in WAIT_HOOKS.items():
        if hooks(probe, trainer, pl_module):
            return strategy
    return None


class AllReduceBaseline:
    """DDP's: the all-reduce sweep of :mod:`.allreduce` with its bucket estimate, the buckets
    DDP built replacing the estimate once training has ended."""

    section = "allreduce"

    def not_started(self) -> dict[str, Any]:
        return never_started()

    def measure(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        cfg: DiagnosisConfig,
        faults: FaultsConfig | None,
    ) -> dict[str, Any]:
        if not cfg.allreduce_baseline:
            return ar.off_section("diagnosis.allreduce_baseline=false")
        device = trainer.strategy.root_device
        caps = ar.ddp_bucket_caps(trainer.strategy.model)
        part = ar.allreduce_baseline(
            gradient_bytes=ar.gradient_bytes(pl_module),
            device=device,
            budget_s=cfg.allreduce_budget_s,
            bucket_bytes=estimate_bucket_bytes(ar.parameter_bytes(pl_module), *caps),
            bucket_reason=f"{ar.NOT_READ_YET}; {ar.ESTIMATED_FROM_PARAMETERS}",
            hold_s=faults.network_hold_s if faults is not None else None,
        )
        if device.type == "cuda":  # the record's peak memory is training's, not the sweep's
            import torch

            torch.cuda.reset_peak_memory_stats(device)
        return part

    def after_training(self, model: Any, part: dict[str, Any]) -> dict[str, Any]:
        """DDP's own buckets, built in its first iterations, in place of the estimate, and
        the prediction redone for them. On every rank, from its own DDP's logging data: no
        collective, under a millisecond. Where they cannot be read the estimate stays, with
        the reason; this never raises into training."""
        if part.get("status") != "measured":
            return part
        buckets, why = ar.read_ddp_buckets(model)
        if buckets is not None:
            return ar.with_buckets(part, buckets, "ddp", None)
        reason = f"{why}; {ar.ESTIMATED_FROM_PARAMETERS}"
        return ar.with_buckets(part, part["bucket_bytes"], "estimated", reason)


BASELINES["ddp"] = AllReduceBaseline()
