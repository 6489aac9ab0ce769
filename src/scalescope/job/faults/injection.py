"""Deliberate faults (config section ``faults``), injected through a Lightning callback.

Each fault is off by default and recorded in the result's config. They exist to test how a
job and the analysis behave when things go wrong, and to show that the diagnosis names the
right cause:

* ``step_sleep_s`` -- slow steps on every rank (preemption within the grace period);
* ``input_sleep_s`` -- a slow input pipeline: the training input sleeps before each batch,
  inside the fetch Lightning does between two training calls (where a slow data set would
  block), so it is input wait, not compute;
* ``slow_rank`` / ``slow_rank_sleep_s`` -- one straggler: that rank sleeps in every optimizer
  step and the others wait for it in the next gradient all-reduce; ``slow_rank_at`` moves
  the sleep into that rank's batch fetch (a slower loader: for a module with buffers its
  peers wait in DDP's buffer broadcast) or into its module's forward;
* ``rotating_sleep_s`` -- per-step stragglers: in each step one rank sleeps, a different one
  each step (each rank once in every world-size steps, in a seeded random order), so no rank
  is slower on average while the others wait in every step;
* ``allreduce_delay_s`` -- a slow network of known size: a DDP communication hook runs DDP's
  own all-reduce and holds each bucket's result back that long, so backward ends that much
  later on every rank (exposed communication, none of it hidden);
* ``allgather_delay_s`` -- the same under FSDP2: FSDP's custom all-gather
  (:mod:`.fsdp_comms`) holds each optimizer step's first all-gather back that long before it
  starts, so every rank's forward waits that much longer (exposed communication). Under DDP
  it has nothing to hold, and the DDP hooks' faults have nothing to hook under FSDP: each
  says so in the record's ``faults_not_applied`` and on the job's log, never silently;
* ``reducescatter_delay_s`` -- FSDP's gradient reduction of known size: its custom
  reduce-scatter holds the first reduce-scatter after each forward of the sharded model
  back that long (one per optimizer step, in its synchronising backward; one per synced
  pass of the calibration windows, which take no optimizer step), so backward ends that
  much later on every rank;
* ``overlap_burn_s`` -- communication that slows backward: the same kind of hook busy-loops
  on the CPU for each bucket but backward's last, before its all-reduce, while backward
  still has gradients to compute (overlapped, yet it costs backward that long);
* ``network_alpha_s`` / ``network_busbw_gbps`` -- an emulated network whose cost grows with
  the world size p: the same kind of hook holds each bucket back alpha log2(p) + bytes
  2(p-1)/p / busbw, and the diagnosis' all-reduce sweep holds each of its ops back the same,
  so the sweep fits the emulated network and the projection can be checked against a larger
  scale (the mechanics, not the physics);
* ``exit_rank`` / ``exit_at`` -- a rank that dies in the calibration windows or before the
  end-of-run gather (see :mod:`..diagnosis.section` and :mod:`..run.entry`).

A communication-heavy model is not a fault but a model: ``configs/diagnosis/comm_heavy.yaml``.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from typing import Any

import lightning as L

from ...config import FaultsConfig
from .fsdp_comms import ALL_GATHER, REDUCE_SCATTER, REPLICA_ALL_REDUCE, fsdp_modules, taps_for


class FaultInjection(L.Callback):
    def __init__(self, faults: FaultsConfig) -> None:
        self.faults = faults
        self._sleep_s = 0.0
        self._first_gather: list[bool] | None = None
        """Under ``allgather_delay_s``: whether the step's first all-gather is still to come."""
        self.not_applied: dict[str, str] = {}
        """A fault that the trained model's strategy gives nothing to act on: why."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        f = self.faults
        self._sleep_s = f.step_sleep_s
        slow = f.slow_rank is not None and f.slow_rank == trainer.global_rank
        if slow and f.slow_rank_at == "step":
            self._sleep_s += f.slow_rank_sleep_s
        fetch_s = f.input_sleep_s + (
            f.slow_rank_sleep_s if slow and f.slow_rank_at == "input" else 0
        )
        if fetch_s > 0:
            _slow_fetches(trainer, fetch_s)
        if slow and f.slow_rank_at == "forward":
            seconds = f.slow_rank_sleep_s
            _slow_forward(trainer, seconds)
        hooked = _allreduce_hook_faults(f)
        if f.allreduce_delay_s > 0 and self._hold_replica_all_reduce(trainer, f.allreduce_delay_s):
            hooked.remove("allreduce_delay_s")  # HSDP's all-reduce across shard groups held
        if hooked:
            why = _hook_allreduce(trainer, f)
            if why is not None:
                for name in hooked:
                    self._not_applied(name, why)
        if f.allgather_delay_s > 0:
            self._hold_first_all_gather(trainer, f.allgather_delay_s)
        if f.reducescatter_delay_s > 0:
            self._hold_first_reduce_scatter(trainer, f.reducescatter_delay_s)

    def _hold_first_all_gather(self, trainer: L.Trainer, seconds: float) -> None:
        """FSDP's custom all-gather sleeps ``seconds`` before the first all-gather of every
        optimizer step (re-armed when the step's optimizer runs), inside the span the
        diagnosis times: a slower collective, on every rank."""
        taps, why = taps_for(trainer.lightning_module)
        if taps is None:
            self._not_applied("allgather_delay_s", f"nothing to hold: {why}")
            return
        armed = self._first_gather = [True]

        def hold(kind: str) -> None:
            # validation's gathers leave it armed: the step after a validation pass is held too
            if kind == ALL_GATHER and armed[0] and trainer.training:
                armed[0] = False
                time.sleep(seconds)

        taps.holds.append(hold)

    def _hold_first_reduce_scatter(self, trainer: L.Trainer, seconds: float) -> None:
        """FSDP's custom reduce-scatter sleeps ``seconds`` before the first reduce-scatter
        after each forward of the sharded model (re-armed by a forward pre-hook on its
        outermost sharded module): once in each backward that synchronises gradients, inside
        the span the diagnosis times, on every rank."""
        module = trainer.lightning_module
        taps, why = taps_for(module)
        if taps is None:
            self._not_applied("reducescatter_delay_s", f"nothing to hold: {why}")
            return
        armed = [False]

        def hold(kind: str) -> None:
            if kind == REDUCE_SCATTER and armed[0]:
                armed[0] = False
                time.sleep(seconds)

        outermost = fsdp_modules(module)[0]  # module order: the outermost comes first
        outermost.register_forward_pre_hook(lambda _module, _args: armed.__setitem__(0, True))
        taps.holds.append(hold)

    def _hold_replica_all_reduce(self, trainer: L.Trainer, seconds: float) -> bool:
        """Under HSDP: FSDP's all-reduce hook sleeps ``seconds`` after the first all-reduce of
        gradient shards across the shard groups after each forward of the sharded model
        (re-armed as the reduce-scatter's hold is), inside the span the diagnosis times: once
        in each backward that synchronises, on every rank. False where the model is not
        HSDP's (nothing held)."""
        module = trainer.lightning_module
        taps, _ = taps_for(module)
        if taps is None or not taps.hybrid:
            return False
        armed = [False]

        def hold(kind: str) -> None:
            if kind == REPLICA_ALL_REDUCE and armed[0]:
                armed[0] = False
                time.sleep(seconds)

        outermost = fsdp_modules(module)[0]
        outermost.register_forward_pre_hook(lambda _module, _args: armed.__setitem__(0, True))
        taps.holds.append(hold)
        return True

    def _not_applied(self, fault: str, why: str) -> None:
        self.not_applied[fault] = why
        print(f"scalescope: faults.{fault} not applied: {why}", file=sys.stderr, flush=True)

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        if self._first_gather is not None:
            self._first_gather[0] = True  # the next all-gather is the next step's first
        if self._sleep_s > 0:
            time.sleep(self._sleep_s)
        rotating = self.faults.rotating_sleep_s
        if rotating > 0 and rotating_rank(trainer.global_step, trainer.world_size) == (
            trainer.global_rank
        ):
            time.sleep(rotating)


def _allreduce_hook_faults(f: FaultsConfig) -> list[str]:
    """The requested faults that act through a DDP communication hook, by name."""
    asked = {
        "allreduce_delay_s": f.allreduce_delay_s > 0,
        "overlap_burn_s": f.overlap_burn_s > 0,
        "network_alpha_s": f.network_alpha_s > 0,
        "network_busbw_gbps": f.network_busbw_gbps > 0,
    }
    return [name for name, on in asked.items() if on]


def not_applied(trainer: L.Trainer) -> dict[str, str] | None:
    """The record's ``faults_not_applied``: each requested fault the trained model gave
    nothing to act on, and why (None where every requested fault applied)."""
    found: dict[str, str] = {}
    for callback in trainer.callbacks:
        if isinstance(callback, FaultInjection):
            found.update(callback.not_applied)
    return found or None


def rotating_rank(step: int, world_size: int, seed: int = 0) -> int:
    """The rank that sleeps in ``step``: every block of ``world_size`` steps is a seeded
    random permutation of the ranks, the same on every rank."""
    order = list(range(world_size))
    random.Random(seed * 1_000_003 + step // world_size).shuffle(order)
    return order[step % world_size]


def _slow_fetches(trainer: L.Trainer, seconds: float) -> None:
    """Make every training batch fetch sleep first: the fit loop's data fetcher (which
    Lightning calls between two training calls, and which calls the loader's iterator)
    becomes a subclass whose ``__next__`` sleeps. A test-only fault; it names what it needs
    if a Lightning version lacks it."""
    fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
    if fetcher is None or not hasattr(type(fetcher), "__next__"):
        raise RuntimeError(
            "faults.input_sleep_s: this Lightning version has no fit_loop._data_fetcher to "
            "slow down"
        )
    base = type(fetcher)

    def __next__(self: Any) -> Any:
        time.sleep(seconds)
        return base.__next__(self)

    fetcher.__class__ = type(f"Slow{base.__name__}", (base,), {"__next__": __next__})


def _slow_forward(trainer: L.Trainer, seconds: float) -> None:
    """Sleep at the start of every training call's forward, after DDP's buffer broadcast:
    the module DDP wraps (Lightning's wrapper, which calls training_step) sleeps first. A
    1-device run has no DDP wrapper: the LightningModule itself is hooked."""
    from torch.nn.parallel import DistributedDataParallel

    model = trainer.strategy.model
    inner = model.module if isinstance(model, DistributedDataParallel) else trainer.lightning_module
    inner.register_forward_pre_hook(lambda _module, _args: time.sleep(seconds))


def _hook_allreduce(trainer: L.Trainer, faults: FaultsConfig) -> str | None:
    """Register a DDP communication hook that all-reduces each bucket as DDP would (PyTorch's
    default hook: divide by the world size, then sum) and

    * completes its future ``allreduce_delay_s`` later (plus what the emulated network holds
      a bucket of its size back): DDP waits for every bucket's future before backward
      returns, so each step's backward ends that much later (exposed);
    * first busy-loops ``overlap_burn_s`` on the CPU for every bucket but the last one of backward
      (DDP calls the hook in the autograd thread when a bucket is ready, so backward's
      remaining gradients wait that long: overlapped communication that slows backward).

    A 1-device run has no DDP wrapper and nothing to hook; a model sharded by FSDP has no DDP
    buckets either: the reason is returned (None: hooked)."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    ddp = getattr(trainer.strategy, "model", None)
    if not isinstance(ddp, DistributedDataParallel):
        if trainer.world_size <= 1:
            return None  # one device: no all-reduce to hold, as before
        return (
            f"no DDP communication hook under {type(ddp).__name__} (under FSDP: "
            "faults.allgather_delay_s holds its all-gather back)"
        )

    # No annotations: DDP accepts only `dist.GradBucket` there, and this module's postponed
    # annotations would be strings.
    def hooked(state, bucket):  # type: ignore[no-untyped-def]
        if faults.overlap_burn_s > 0 and not bucket.is_last():
            until = time.perf_counter() + faults.overlap_burn_s
            while time.perf_counter() < until:
                pass
        fut = default_hooks.allreduce_hook(state, bucket)
        buf = bucket.buffer()
        held = faults.allreduce_delay_s + faults.network_hold_s(
            buf.numel() * buf.element_size(), world
        )
        if held <= 0:
            return fut
        # Held on a thread of its own: a callback chained with ``fut.then`` runs inline in
        # the autograd thread when the all-reduce has already finished, and would hold
        # backward itself (compute) instead of DDP's wait for the bucket at its end.
        out: torch.futures.Future[Any] = torch.futures.Future()

        def hold() -> None:
            try:
                value = fut.wait()
                time.sleep(held)
                out.set_result(value)
            except BaseException as exc:  # the all-reduce failed: DDP sees its error
                out.set_exception(exc)

        threading.Thread(target=hold, name="scalescope-held-allreduce", daemon=True).start()
        return out

    world = trainer.world_size
    ddp.register_comm_hook(None, hooked)
    return None


def fault_callbacks(faults: FaultsConfig) -> list[L.Callback]:
    return [FaultInjection(faults)] if faults.active else []
