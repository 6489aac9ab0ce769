"""Honest timing of a Lightning fit, measured without changing what is measured.

Rules this module follows:

* The device is synchronised only at interval edges (train start, epoch start/end,
  validation start/end), never per step, so queued GPU work is counted in the interval it
  belongs to and the CPU may still run ahead within an epoch.
* Every N steps (``log_every_n_steps``) rank 0 reads the loss (``.item()``, a host sync it
  would pay for logging anyway) and stamps the clock right after it: consecutive stamps give
  synchronised step-time windows without adding syncs.
* Intervals are measured on every rank and reduced with MAX at the end: the job is as slow
  as its slowest rank. Train start follows a barrier, so all ranks start the clock together.
* Validation time is measured separately and excluded from the training time.
* Steady state: every rank stamps the clock once, with a device sync, at the first step
  boundary at or after the warm-up (``trainer.warmup_steps``: the first epoch by default, at
  most ``WARMUP_AUTO_MAX_STEPS`` steps). Training time after that stamp is the steady-state
  time the headline figures use; the first steps (allocator growth, cuDNN/autotuning,
  lazy initialisation, DDP's first bucket rebuild) stay out of them. A profiler capture
  (``trainer.profile``, :mod:`..profile.capture`) holds the warm-up open until its profiled steps
  are done: they are warm-up, never steady state.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import lightning as L
import torch
import torch.distributed as dist

from ...procinfo import peak_host_rss_gib, process_start_unix
from ...run_length import WARMUP_AUTO_MAX_STEPS, resolve_warmup
from .host_load import CpuSample, host_loads
from .host_load import rank_part as cpu_part
from .host_load import sample as cpu_sample
from .peak_memory import DevicePeaks

__all__ = [
    "STREAM_NOTE",
    "TimingCallback",
    "agree",
    "combine",
    "loader_steps",
    "median_step_time",
    "process_start_unix",
    "rank_part",
    "rank_steady_s",
    "resolve_warmup",
    "unbounded_stream",
]


READY_LINE = "scalescope: training starts"
"""Printed by rank 0 once every rank has met at the start of training (the clock starts)."""


@dataclass
class Timings:
    """What one rank measured; :func:`agree` reduces them over ranks."""

    process_start_unix: float
    train_start_unix: float = float("nan")
    train_end_unix: float = float("nan")
    epoch_times_s: list[float] = field(default_factory=list)
    epoch_steps: list[int] = field(default_factory=list)
    val_time_s: float = 0.0
    step_windows: list[tuple[int, int, float]] = field(default_factory=list)
    """(first step, steps in window, seconds), rank 0 only."""
    warmup_steps: int | None = None
    """Steps done when the warm-up ended (a call boundary at or after the target); None
    while training never got past the warm-up."""
    warmup_train_s: float = float("nan")
    """Training time (validation excluded) from train start to the end of the warm-up."""
    peaks: DevicePeaks | None = None
    """Training's and validation's peak device memory, apart (CUDA only)."""
    cpu_start: CpuSample | None = None
    cpu_end: CpuSample | None = None
    """The cores' and this rank's CPU counters at train start and end (:mod:`.host_load`)."""


class WarmupHold(Protocol):
    """What may keep the warm-up open past its target (the profiler's capture): told the
    resolved target at train start, then asked at each step boundary. Its answer must be the
    same on every rank at the same step, as the warm-up's end is."""

    def resolve(self, trainer: L.Trainer, target: int | None) -> None: ...

    def holds(self, step: int) -> bool: ...


STREAM_NOTE = (
    "the training loader has no length (an iterable data set): each epoch ends when its "
    "stream does, as in Lightning, and a stream that never ends runs until the job's time "
    "limit (trainer.max_steps bounds it)"
)


def unbounded_stream(trainer: L.Trainer) -> bool:
    """A training loader without a length that nothing bounds: its epochs end only where its
    stream does."""
    return math.isinf(trainer.num_training_batches) and _max_steps(trainer) is None


def _max_steps(trainer: L.Trainer) -> int | None:
    """The run's step bound, or None (Lightning's -1: no bound)."""
    return trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None


class TimingCallback(L.Callback):
    def __init__(
        self,
        *,
        process_start: float,
        log_every_n_steps: int,
        warmup_steps: int | str = "auto",
        steps_per_epoch: Callable[[L.Trainer], int] | None = None,
        on_loss: Callable[[float, int, int], None] | None = None,
        on_epoch: Callable[[dict[str, float], int, int], None] | None = None,
        hold: WarmupHold | None = None,
    ) -> None:
        self.t = Timings(process_start_unix=process_start)
        self.hold = hold
        """Keeps the warm-up open while it says so (see :class:`WarmupHold`)."""
        self.every = log_every_n_steps
        self.warmup_setting = warmup_steps
        self._steps_per_epoch = steps_per_epoch or loader_steps
        self._warmup_target = 0
        self._warmup_by_epoch = False
        """The warm-up is the first epoch, whose length is known only when it ends."""
        self.on_loss = on_loss
        self.on_epoch = on_epoch
        self._epoch_start = 0.0
        self._val_start = 0.0
        self._epoch_val_s = 0.0
        self._epoch_first_step = 0
        self._last_stamp: tuple[int, float] | None = None
        self._sync: Callable[[], None] = lambda: None

    # -- helpers -------------------------------------------------------------------------
    def _held(self, step: int) -> bool:
        return self.hold is not None and self.hold.holds(step)

    def _now(self) -> float:
        self._sync()
        return time.perf_counter()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        device = trainer.strategy.root_device
        if device.type == "cuda":
            self._sync = lambda: torch.cuda.synchronize(device)
        self.t.peaks = DevicePeaks.of(device)
        _thin_sigterm_broadcast(trainer, self.every)

    # -- train ---------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.strategy.barrier("scalescope-train-start")
        self._sync()
        self.t.train_start_unix = time.time()
        self.t.cpu_start = cpu_sample()
        if trainer.global_rank == 0:
            print(f"{READY_LINE} (all {trainer.world_size} ranks met)", flush=True)
            if unbounded_stream(trainer):
                print(f"scalescope: {STREAM_NOTE}", flush=True)
        target = resolve_warmup(
            self.warmup_setting, self._steps_per_epoch(trainer), _max_steps(trainer)
        )
        self._warmup_by_epoch = target is None
        self._warmup_target = WARMUP_AUTO_MAX_STEPS if target is None else target
        if self.hold is not None:
            self.hold.resolve(trainer, target)
        if self._warmup_target == 0 and not self._held(0):
            self.t.warmup_steps, self.t.warmup_train_s = 0, 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_val_s = 0.0
        self._epoch_first_step = trainer.global_step
        self._epoch_start = self._now()
        self._last_stamp = (trainer.global_step, self._epoch_start)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        step = trainer.global_step
        if self.t.warmup_steps is None and step >= self._warmup_target and not self._held(step):
            # Once per run and on every rank: a device sync, then the clock.
            done = sum(self.t.epoch_times_s)
            self.t.warmup_train_s = done + self._now() - self._epoch_start - self._epoch_val_s
            self.t.warmup_steps = step
        # A call may take several optimizer steps: act when a multiple of N was crossed.
        last = self._last_stamp[0] if self._last_stamp is not None else step - 1
        if step // self.every == last // self.every or trainer.global_rank != 0:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            value: float | None = float(loss.detach().float().item())  # the one sync every N
            now = time.perf_counter()
        else:
            # No loss to read (manual optimization returns None): the same sync, explicitly.
            value, now = None, self._now()
        if self._last_stamp is not None and step > self._last_stamp[0]:
            self.t.step_windows.append(
                (self._last_stamp[0], step - self._last_stamp[0], now - self._last_stamp[1])
            )
        self._last_stamp = (step, now)
        if self.on_loss is not None and value is not None:
            self.on_loss(value, step, trainer.current_epoch)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._val_start = self._now()
        self._last_stamp = None  # a window must not span validation
        if self.t.peaks is not None:
            self.t.peaks.validation_starts()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        elapsed = self._now() - self._val_start
        self._epoch_val_s += elapsed
        self.t.val_time_s += elapsed
        if self.t.peaks is not None:
            self.t.peaks.validation_ends()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning runs the epoch's validation before this hook: subtract it.
        epoch_s = self._now() - self._epoch_start - self._epoch_val_s
        self.t.epoch_times_s.append(epoch_s)
        steps = trainer.global_step - self._epoch_first_step
        self.t.epoch_steps.append(steps)
        if self.t.warmup_steps is None and self._warmup_by_epoch:  # the stream's first epoch
            if self._held(trainer.global_step):  # ends at the first boundary once released
                self._warmup_by_epoch, self._warmup_target = False, 0
            else:
                self.t.warmup_steps = trainer.global_step
                self.t.warmup_train_s = math.fsum(self.t.epoch_times_s)
        if self.on_epoch is not None and trainer.global_rank == 0:
            metrics = {"epoch_time_s": epoch_s, "epoch_steps": float(steps)}
            history = getattr(pl_module, "val_history", [])
            if history and history[-1][0] == trainer.current_epoch:
                metrics["val_loss"], metrics["val_acc"] = history[-1][1], history[-1][2]
            self.on_epoch(metrics, trainer.global_step, trainer.current_epoch)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._sync()
        self.t.train_end_unix = time.time()
        self.t.cpu_end = cpu_sample()


def loader_steps(trainer: L.Trainer) -> int:
    """Optimizer steps in one epoch as known before it runs (0 when unknown): a built-in
    loader's own count, else Lightning's number of training batches (the loader's length,
    ``limit_train_batches`` applied; infinite for a loader without a length) over its
    gradient accumulation, the last partial accumulation stepping too (as Lightning does at an
    epoch's end). Unknown for a user's module under manual optimization: it decides how many
    optimizer steps a batch takes (a GAN's two, each counted in Lightning's ``global_step``;
    one every k batches where it accumulates by hand), so the epoch's steps are the ones it
    ran, and an ``auto`` warm-up ends with its first epoch (or at the cap)."""
    loader = trainer.train_dataloader
    if loader is None:
        return 0
    own = getattr(loader, "num_steps", None)
    if own:
        return int(own)
    module = trainer.lightning_module
    if module is not None and not module.automatic_optimization:
        return 0
    batches = trainer.num_training_batches
    if not math.isfinite(batches):
        return 0
    return math.ceil(int(batches) / max(1, int(trainer.accumulate_grad_batches)))


def _thin_sigterm_broadcast(trainer: L.Trainer, every: int) -> None:
    """Remove Lightning's per-call SIGTERM broadcast.

    Lightning 2.6 broadcasts a SIGTERM flag from rank 0 and reads it with ``.item()`` before
    *every* training call when the world size is > 1: a collective plus a host-device sync
    per call, which stops the CPU from running ahead of the GPU and taxes exactly the
    multi-device runs this tool compares. Where the trainer carries a
    :class:`~scalescope.job.clocks.preemption.StopOnSignal` callback, that callback checks on a time
    basis at steps all ranks agree on (see its module), so the broadcast goes entirely.
    Without one, the broadcast runs every ``every`` calls, which keeps graceful preemption
    (later). Other Lightning versions without this method are left alone.
    """
    from .preemption import StopOnSignal

    loop = trainer.fit_loop.epoch_loop
    original = getattr(loop, "_broadcast_sigterm_tensor", None)
    if original is None:
        return
    if any(isinstance(cb, StopOnSignal) for cb in trainer.callbacks):  # type: ignore[attr-defined]
        loop._broadcast_sigterm_tensor = lambda: None  # type: ignore[method-assign]
        return
    calls = 0

    def every_n() -> None:
        nonlocal calls
        calls += 1
        if calls % every == 0:
            original()

    loop._broadcast_sigterm_tensor = every_n  # type: ignore[method-assign]


@dataclass(frozen=True)
class Agreed:
    """Timings every rank agrees on (max over ranks), plus per-rank lists."""

    setup_time_s: float
    job_time_s: float
    epoch_times_s: list[float]
    epoch_steps: list[int]
    val_time_s: float
    node_names: list[str]
    peak_mem_gib: list[float] | None
    """Training's peak device memory per rank (validation's apart); None on CPUs."""
    val_peak_mem_gib: list[float] | None
    """Validation's peak device memory per rank; None on CPUs or without validation."""
    peak_host_rss_gib: list[float]
    warmup_steps: int | None
    """Steps left out as warm-up (the same on every rank); None if training ended in it."""
    steady_time_s: float | None
    """Training time after the warm-up, max over ranks; None without a steady state."""
    reserved_peak_gib: list[float] | None = None
    """Training's peak of the allocator's reserved memory per rank; None off CUDA."""
    train_start_unix: float = float("nan")
    """Wall clock (Unix seconds) when the timed interval began: the last rank's, after the
    barrier every rank meets at train start."""
    train_end_unix: float = float("nan")
    """Wall clock (Unix seconds) when training ended on the last rank."""
    per_rank: list[dict[str, Any]] = field(default_factory=list)
    """What each rank sent, in rank order (node, local rank, peaks, and ``extra``)."""
    host_load: list[dict[str, Any]] | None = None
    """Per machine, the CPU its cores gave the run and other programs while training
    (:func:`.host_load.host_loads`); None where a rank did not sample."""


def rank_steady_s(t: Timings) -> float | None:
    """This rank's own training time after the warm-up (validation excluded)."""
    return sum(t.epoch_times_s) - t.warmup_train_s if t.warmup_steps is not None else None


def agree(
    trainer: L.Trainer,
    t: Timings,
    node_name: str,
    extra: Mapping[str, Any] | None = None,
) -> Agreed:
    """Reduce this rank's timings with every other rank's (call on all ranks).

    One gather of a small dict per rank (:func:`rank_part`), bounded by the process group's
    timeout (``trainer.collective_timeout_s``): a rank that died makes the others fail
    within it. ``extra`` (the diagnosis' per-rank part) travels in the same gather. The
    gathered parts are reduced by :func:`combine`.
    """
    mine = rank_part(t, node_name, trainer.local_rank, extra)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    else:
        everyone = [mine]
    return combine(everyone)


def rank_part(
    t: Timings, node_name: str, local_rank: int, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What one rank sends in :func:`agree`'s gather."""
    peaks = t.peaks
    return {
        "start": t.process_start_unix,
        "train_start": t.train_start_unix,
        "end": t.train_end_unix,
        "epochs": t.epoch_times_s,
        "steps": t.epoch_steps,
        "val": t.val_time_s,
        "node": node_name,
        "peak_dev": peaks.training_gib() if peaks is not None else None,
        "peak_val": peaks.validation_gib() if peaks is not None else None,
        "reserved_peak": peaks.training_reserved_gib() if peaks is not None else None,
        "rss": peak_host_rss_gib(),
        "warmup_steps": t.warmup_steps,
        "steady": rank_steady_s(t),
        "local_rank": local_rank,
        "cpu": cpu_part(t.cpu_start, t.cpu_end, node_name),
        **(dict(extra) if extra else {}),
    }


def combine(everyone: list[dict[str, Any]]) -> Agreed:
    """Every rank's part (rank order) reduced: the job is as slow as its slowest rank, so
    each interval is the max over ranks (the setup ends when the last rank starts training),
    and the steady time is the slowest rank's own."""
    start = min(r["start"] for r in everyone)
    train_start = max(r["train_start"] for r in everyone)
    end = max(r["end"] for r in everyone)
    epochs = [max(vals) for vals in zip(*(r["epochs"] for r in everyone), strict=True)]
    peaks = [r["peak_dev"] for r in everyone]
    val_peaks = [r["peak_val"] for r in everyone]
    reserved = [r.get("reserved_peak") for r in everyone]
    steady = [r["steady"] for r in everyone]
    warmup = everyone[0]["warmup_steps"]
    total_steps = sum(everyone[0]["steps"])
    has_steady = warmup is not None and total_steps > warmup and all(v is not None for v in steady)
    return Agreed(
        setup_time_s=train_start - start,
        job_time_s=end - start,
        epoch_times_s=epochs,
        epoch_steps=list(everyone[0]["steps"]),
        val_time_s=max(r["val"] for r in everyone),
        node_names=[r["node"] for r in everyone],
        peak_mem_gib=None if any(p is None for p in peaks) else peaks,
        val_peak_mem_gib=None if any(p is None for p in val_peaks) else val_peaks,
        reserved_peak_gib=None if any(p is None for p in reserved) else reserved,
        peak_host_rss_gib=[r["rss"] for r in everyone],
        warmup_steps=warmup,
        steady_time_s=max(steady) if has_steady else None,
        train_start_unix=train_start,
        train_end_unix=end,
        per_rank=everyone,
        host_load=_host_loads(everyone),
    )


def _host_loads(everyone: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """:func:`.host_load.host_loads` of the gathered parts; None rather than an error, which
    would cost the run its record."""
    try:
        return host_loads([r.get("cpu") for r in everyone])
    except Exception:  # a measurement beside training, never a reason to lose its record
        return None


def median_step_time(windows: list[tuple[int, int, float]], warmup_steps: int) -> float | None:
    """Median seconds per step over the windows that start after the warm-up.

    None without such windows (training ended within the warm-up).
    """
    later = [w for w in windows if w[0] >= warmup_steps]
    if not later:
        return None
    return statistics.median(seconds / steps for _, steps, seconds in later)
