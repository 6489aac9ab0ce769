"""Where a step's time goes, on every rank, without a per-step device sync.

Three measurements, each outside or beside what :mod:`.timing` measures and none of them
changing what is trained:

* **In the timed loop, per rank** (over the steady-state steps only):

  - *input wait*: the batch fetch Lightning does between two training calls, and the copy
    to the device;
  - *communication wait*: from backward's last gradient (when DDP hands its last bucket to
    the all-reduce) to ``backward`` returning: the all-reduce not hidden behind backward
    plus any wait for slower ranks (and, for modules with buffers, DDP's broadcast of them
    before forward). With gradient accumulation only the optimizer step's last backward
    synchronises: the others are compute, and every figure is per optimizer step;
  - *compute*: the rest of the rank's own steady-state time (forward, backward, optimizer,
    framework).

  On the CPU the marks are the wall clock. On GPUs they are CUDA events on the current
  stream, read lazily (never waited for inside the loop): the gap between two events is
  the time the device idled or waited between them.

* **Calibration windows, after training** (outside every timed interval): with the last
  training batch, K forward+backward passes under DDP's ``no_sync()`` and K with gradient
  sync, interleaved, the fastest window of each kind kept. No optimizer step is taken; the
  gradients are discarded, buffers (e.g. batch-norm statistics) and RNG states restored.
  ``sync - no_sync`` per pass is the exposed all-reduce time without any skew between ranks.

* **All-reduce baseline, before training** (:mod:`.allreduce`) and **GPU sampling**
  (:mod:`.sampling`), for the comparison and the device view.

Everything is gathered with the other end-of-run numbers in :func:`.timing.agree` (one
gather, bounded by the process group's timeout) and assembled into the record's
``diagnosis`` section by :func:`assemble` on rank 0.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import lightning as L
import numpy as np
import torch

from ..allreduce_model import estimate_bucket_bytes
from ..config import DiagnosisConfig, FaultsConfig
from .allreduce import SKIPPED_ONE_DEVICE
from .timing import Timings

# -- clocks ------------------------------------------------------------------------------
ANOTHER_RANK = "on another rank"

MAX_STEP_RECORDS = 1 << 16
"""Steady-state steps whose communication waits are kept one by one (8 bytes each and
collective, preallocated); later steps still count in the totals."""

COLLECTIVES = ("gradient", "broadcast")
"""The collectives a training step waits in, each kept per step: DDP's gradient all-reduce
(from backward's last gradient to ``backward`` returning) and, for modules with buffers, its
broadcast of them before forward (from the training call's start to the module's forward)."""


class _Clock:
    """Marks and accumulated intervals: the wall clock on CPUs, CUDA events on GPUs.

    ``add(..., step=i)`` also adds the interval into slot ``i`` of the per-step series
    ``steps[key]`` (preallocated for the keys named at construction): a step with no interval
    of that key keeps NaN, so the series of all ranks stay aligned step for step, and several
    intervals of one step (one buffer broadcast per micro-batch) add up in its slot.
    """

    kind = "wall"

    def __init__(self, series: Sequence[str] = (), capacity: int = MAX_STEP_RECORDS) -> None:
        self.totals: dict[str, float] = {}
        self.steps = {key: np.full(capacity, np.nan) for key in series}

    def mark(self) -> Any:
        return time.perf_counter()

    def add(self, key: str, start: Any, end: Any, *, step: int | None = None) -> None:
        self._count(key, end - start, step)

    def _count(self, key: str, seconds: float, step: int | None) -> None:
        self.totals[key] = self.totals.get(key, 0.0) + seconds
        if step is None:
            return
        series = self.steps.get(key)
        if series is not None and 0 <= step < len(series):
            old = series[step]
            series[step] = seconds if np.isnan(old) else old + seconds

    def settle(self) -> None:
        """Resolve everything pending (call where the device was synchronised)."""


class _CudaClock(_Clock):
    kind = "cuda_events"
    _MAX_PENDING = 1024

    def __init__(
        self, device: torch.device, series: Sequence[str] = (), capacity: int = MAX_STEP_RECORDS
    ) -> None:
        super().__init__(series, capacity)
        self.device = device
        self.pending: list[tuple[str, Any, Any, int | None]] = []
        self._spare: list[Any] = []

    def mark(self) -> Any:
        event = self._spare.pop() if self._spare else torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def add(self, key: str, start: Any, end: Any, *, step: int | None = None) -> None:
        # The step's slot is known now; its value when the events have completed.
        self.pending.append((key, start, end, step))
        if len(self.pending) > self._MAX_PENDING:
            self._drain(block=False)

    def _drain(self, *, block: bool) -> None:
        done = 0
        for key, start, end, step in self.pending:
            if not block and not (end.query() and start.query()):
                break
            if block:
                start.synchronize()
                end.synchronize()
            self._count(key, start.elapsed_time(end) / 1000.0, step)
            done += 1
        for _, start, end, _ in self.pending[:done]:
            if len(self._spare) < 2 * self._MAX_PENDING:
                self._spare += [start, end]
        del self.pending[:done]

    def settle(self) -> None:
        self._drain(block=True)


def _clock_for(device: torch.device, series: Sequence[str]) -> _Clock:
    return _CudaClock(device, series) if device.type == "cuda" else _Clock(series)


# -- the callbacks -----------------------------------------------------------------------
class StepBreakdown(L.Callback):
    """The per-rank step-time breakdown (after :class:`~.timing.TimingCallback` in the
    callback list), and the calibration windows at the end of training.

    Marks, all cheap and none a sync:

    * **fetch**: the fit loop's data fetcher is wrapped so the time from asking it for the
      next batch (and, at an epoch's start, from creating the iterator, which fetches the
      first one) to the start of the training call -- the fetch plus the copy to the
      device -- is input wait. Where a Lightning version has no such fetcher, the gap from
      one training call's end to the next one's start is used instead;
    * **last gradient**: during the first backward, a post-accumulate-grad hook on every
      trainable parameter learns which gradient is computed last; from then on one hook on
      that parameter marks the moment backward's own compute ends and DDP's last bucket goes
      to the all-reduce. ``backward`` returning ends the communication wait. DDP's built-in
      all-reduce is left as it is (a comm hook would change its arithmetic);
    * **buffer broadcast**: for a module with buffers, DDP broadcasts them from rank 0 before
      every forward; the wait from the start of the training call to the module's forward
      is communication wait too.

    Each collective's wait is kept per steady step (:data:`COLLECTIVES`): a rank that waits in
    the broadcast for a peer whose loader was slower is waiting, as much as one that waits
    in the all-reduce for a peer whose forward was slower (see :meth:`reduce_steps`).
    """

    def __init__(
        self,
        cfg: DiagnosisConfig,
        timings: Timings,
        faults: FaultsConfig | None = None,
        *,
        passes_per_step: int = 1,
    ) -> None:
        self.cfg = cfg
        self.t = timings
        self.faults = faults
        self.clock: _Clock = _Clock()
        self.passes_per_step = passes_per_step
        """Forward+backward passes (micro-batches) in one optimizer step: a calibration pass
        is one of them."""
        self._step = 0
        """The steady step the marks of the coming intervals belong to (counted at each
        backward that synchronises gradients)."""
        self.committed: dict[str, float] = {}
        """Totals at the end of the last complete epoch: what the steady time covers."""
        self._fetch_start: Any = None
        self._call_start: Any = None
        self._ready: Any = None
        self._counting = False
        self._direct_fetch = False
        self._grad_order: list[int] | None = None
        self._grad_hooks: list[Any] = []
        self._params: list[Any] = []
        self._batch: Any = None
        self.committed_steps = 0
        self._synced = 0
        """Backwards of the counted steps in which DDP all-reduced gradients."""
        self.committed_synced = 0
        self.step_waits: dict[str, float] | None = None
        self._probe: Callable[[], None] | None = None
        """Called at the last gradient of a calibration pass (see :func:`calibrate`)."""
        self.gather: Callable[[L.Trainer], Any] | None = None
        """The end-of-run gather of every rank's timings (set by the caller), run at
        training's end before the calibration; its result is :attr:`gathered`."""
        self.gathered: Any = None
        self.calibration: dict[str, Any] = {
            "status": "skipped",
            "reason": "training stopped before its end",
            "steps": cfg.calibration_steps,
        }

    # set-up ----------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.clock = _clock_for(trainer.strategy.root_device, COLLECTIVES)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from torch.nn.parallel import DistributedDataParallel

        model = trainer.strategy.model
        if not isinstance(model, DistributedDataParallel):
            return  # one device: no gradient all-reduce, no buffer broadcast
        params = [p for p in pl_module.parameters() if p.requires_grad]
        self._grad_order = []
        order = self._grad_order
        for i, p in enumerate(params):
            self._grad_hooks.append(
                p.register_post_accumulate_grad_hook(lambda _p, i=i: order.append(i))
            )
        self._params = params
        if model.broadcast_buffers and any(True for _ in pl_module.buffers()):
            # On the module DDP wraps: its forward starts right after the broadcast, whatever
            # the training step calls (Lightning's wrapper calls training_step, which need
            # not call the module's own forward).
            model.module.register_forward_pre_hook(self._forward_starts)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._direct_fetch = _time_fetches(trainer, self)

    # marks -----------------------------------------------------------------------------
    def fetch_starts(self) -> None:
        # An epoch's first batch is fetched when the iterator is made, before the first
        # __next__: keep the earlier mark, so both count.
        if self._counting and self._fetch_start is None:
            self._fetch_start = self.clock.mark()

    def fetched(self, start: Any) -> None:
        if self._counting and start is not None:
            self.clock.add("input_wait_s", start, self.clock.mark())

    def _last_gradient(self, _param: Any) -> None:
        if self._counting:
            self._ready = self.clock.mark()
        elif self._probe is not None:  # a calibration pass
            self._probe()

    def _forward_starts(self, module: Any, args: Any) -> None:
        if self._call_start is not None:  # the call's first forward: after DDP's broadcast
            end = self.clock.mark()
            self.clock.add("comm_wait_s", self._call_start, end)
            self.clock.add("broadcast", self._call_start, end, step=self._step)
            self._call_start = None

    # the timed loop --------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._counting = self.t.warmup_steps is not None
        if not self._direct_fetch:
            self.fetch_starts()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._batch = batch  # a reference: the calibration windows reuse the last batch
        if self._fetch_start is not None:
            self.fetched(self._fetch_start)
            self._fetch_start = None
        self._call_start = self.clock.mark() if self._counting else None

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._grad_order is not None:  # the first backward: keep one hook from now on
            self._settle_last_gradient()
        if not getattr(trainer.strategy.model, "require_backward_grad_sync", True):
            # A micro-batch that accumulates (DDP's no_sync): no all-reduce to wait for, its
            # backward is compute. The step's communication is its last micro-batch's.
            self._ready = None
            return
        if self._counting:
            self._synced += 1
        if self._counting and self._params:
            if self._ready is not None:  # else no gradient this step: its slot stays NaN
                end = self.clock.mark()
                self.clock.add("comm_wait_s", self._ready, end)
                self.clock.add("gradient", self._ready, end, step=self._step)
            self._step += 1
        self._ready = None

    def _settle_last_gradient(self) -> None:
        """After the first backward: keep one hook, on the gradient computed last."""
        for handle in self._grad_hooks:
            handle.remove()
        self._grad_hooks = []
        if self._grad_order:
            last = self._params[self._grad_order[-1]]
            self._grad_hooks = [last.register_post_accumulate_grad_hook(self._last_gradient)]
        self._grad_order = None

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        # The TimingCallback (earlier in the list) stamps the warm-up at this same hook.
        self._counting = self.t.warmup_steps is not None
        self._call_start = None
        if not self._direct_fetch:
            self.fetch_starts()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fetch_start = None  # a gap that spans validation is not input wait

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fetch_start = None  # the fetcher's last, empty call ends the epoch
        self.clock.settle()  # the TimingCallback synchronised the device just before
        self.committed = dict(self.clock.totals)
        self.committed_steps = self._step
        self.committed_synced = self._synced

    # calibration ---------------------------------------------------------------------
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Training's end, still inside the fit (the model is still wrapped by DDP and on its
        device): the per-step reduction and the end-of-run gather first, then the optional
        calibration, which can no longer cost the record anything."""
        self._counting = False
        self.clock.settle()
        self.reduce_steps(trainer)  # the gather reads training's peak memory: before calibration
        if self.gather is not None:
            self.gathered = self.gather(trainer)
        self.calibration = gather_calibration(trainer, self.calibrate(trainer, pl_module))

    # after training, on every rank ---------------------------------------------------
    def reduce_steps(self, trainer: L.Trainer) -> None:
        """Per step and collective, the least wait over the ranks (one all-reduce MIN of the
        per-step series): the rank that arrived last at a collective waited for nobody there,
        so the sum of those minima is the step's exposed communication, and each rank's
        excess over it is its wait for slower ranks, in whichever collective it waited. A
        collective: every rank calls it, before the gather."""
        n_local = min(self.committed_steps, MAX_STEP_RECORDS)
        if not self._params or trainer.world_size <= 1 or n_local <= 0:
            return
        import torch.distributed as dist

        device = trainer.strategy.root_device
        count = torch.tensor([float(n_local)], dtype=torch.float64, device=device)
        dist.all_reduce(count, op=dist.ReduceOp.MIN)  # every rank's series hold these steps
        n = int(count.item())
        mine = np.stack([self.clock.steps[key][:n] for key in COLLECTIVES])
        least = torch.from_numpy(np.where(np.isfinite(mine), mine, np.inf)).to(device)
        dist.all_reduce(least, op=dist.ReduceOp.MIN)
        self.step_waits = step_wait_stats(mine, least.cpu().numpy())

    def mine(self, rank_steady_s: float | None, steady_steps: int | None) -> dict[str, Any]:
        """This rank's share of the end-of-run gather: per-step figures over the complete
        epochs after the warm-up (what ``rank_steady_s`` covers)."""
        out: dict[str, Any] = {"clock": self.clock.kind}
        if rank_steady_s is None or not steady_steps or steady_steps <= 0:
            return out
        per = 1.0 / steady_steps
        step = rank_steady_s * per
        wait = self.committed.get("input_wait_s", 0.0) * per
        comm = self.committed.get("comm_wait_s", 0.0) * per
        out.update(
            step_time_s=step,
            input_wait_s=wait,
            comm_wait_s=comm,
            compute_s=max(0.0, step - wait - comm),
        )
        if self._params:  # under DDP: how many backwards per step asked for the all-reduce
            out["syncs_per_step"] = self.committed_synced * per
        if self.step_waits is not None:
            out["step_waits"] = self.step_waits
        return out

    def _set_probe(self, probe: Callable[[], None] | None) -> bool:
        """Have ``probe`` called at each calibration pass's last gradient; False where no
        last-gradient hook exists (one device, or no trainable parameter)."""
        self._probe = probe
        return bool(self._grad_hooks)

    def calibrate(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        """The calibration windows (every rank, after the gather): this rank's part. Never
        raises: a failure, here or on a peer, is the part's status and reason."""
        started = time.perf_counter()
        try:
            part = calibrate(
                trainer,
                pl_module,
                self._batch,
                self.cfg,
                self.faults,
                self._set_probe,
                pass_estimate_s=_pass_estimate(self.gathered, self.passes_per_step),
            )
        except Exception as exc:  # a peer that died, a collective that failed
            part = {
                "status": "failed",
                "reason": f"{type(exc).__name__}: {_first_line(exc)}",
                "steps": self.cfg.calibration_steps,
            }
        finally:
            self._batch = None
            self._probe = None
        # What it cost outside the timed region, whatever came of it (a trial pass that
        # found one pair of windows too long is a cost too).
        part["seconds"] = time.perf_counter() - started
        return part


def _pass_estimate(gathered: Any, passes_per_step: int) -> float | None:
    """One forward+backward pass (a micro-batch: what a calibration pass runs) estimated from
    the slowest rank's compute per optimizer step, which covers ``passes_per_step`` of them
    and the optimizer step (the same on every rank, from the gather); None where not known."""
    per_rank = getattr(gathered, "per_rank", None) or []
    times = [(p.get("diagnosis") or {}).get("compute_s") for p in per_rank]
    known = [t for t in times if isinstance(t, float) and t > 0]
    if not known or len(known) != len(times):
        return None
    return max(known) / max(1, passes_per_step)


def _time_fetches(trainer: L.Trainer, probe: StepBreakdown) -> bool:
    """Wrap the fit loop's data fetcher so each fetch is timed (see :class:`StepBreakdown`).
    False where this Lightning version has no such fetcher (the caller falls back)."""
    fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
    base: Any = type(fetcher)
    if fetcher is None or not hasattr(base, "__next__") or not hasattr(base, "__iter__"):
        return False

    def __iter__(self: Any) -> Any:  # an epoch's first batch is fetched here
        probe.fetch_starts()
        return base.__iter__(self)

    def __next__(self: Any) -> Any:
        probe.fetch_starts()
        return base.__next__(self)

    fetcher.__class__ = type(
        f"Timed{base.__name__}", (base,), {"__iter__": __iter__, "__next__": __next__}
    )
    return True


def step_wait_stats(mine: np.ndarray, least: np.ndarray) -> dict[str, Any] | None:
    """This rank's per-step communication waits against each step's least wait over the
    ranks. ``mine`` and ``least`` are (collective, step) arrays in :data:`COLLECTIVES` order,
    NaN (``least``: inf) where a step had no such interval. A step counts where its gradient
    all-reduce was timed on every rank; a collective that did not run in it adds nothing.

    Returns the means over those steps of the exposed communication (the sum over
    collectives of the least wait) and of this rank's wait for others (its total less the
    exposed), with standard errors over steps, and each collective's share; None where no
    step counts."""
    least = np.where(np.isfinite(least), least, np.nan)
    counted = np.isfinite(mine[0]) & np.isfinite(least[0])
    n = int(counted.sum())
    if n == 0:
        return None
    mine_c = np.nan_to_num(mine[:, counted])
    least_c = np.nan_to_num(least[:, counted])
    exposed = least_c.sum(axis=0)
    wait = mine_c.sum(axis=0) - exposed

    def se(values: np.ndarray) -> float | None:
        return float(values.std(ddof=1) / np.sqrt(n)) if n > 1 else None

    return {
        "steps": n,
        "exposed_s": float(exposed.mean()),
        "exposed_se_s": se(exposed),
        "wait_s": float(wait.mean()),
        "wait_se_s": se(wait),
        "by_collective": {
            key: {
                "exposed_s": float(least_c[i].mean()),
                "wait_s": float((mine_c[i] - least_c[i]).mean()),
            }
            for i, key in enumerate(COLLECTIVES)
        },
    }


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def calibrate(
    trainer: L.Trainer,
    pl_module: L.LightningModule,
    batch: Any,
    cfg: DiagnosisConfig,
    faults: FaultsConfig | None = None,
    set_probe: Callable[[Callable[[], None] | None], bool] | None = None,
    *,
    pass_estimate_s: float | None = None,
) -> dict[str, Any]:
    """The calibration windows (all ranks). Returns this rank's ``calibration`` part.

    The budget is checked per pass, one micro-batch's forward and backward, which is what a
    window repeats: first against ``pass_estimate_s`` (the slowest rank's compute per step
    divided by its micro-batches, which every rank has from the gather), so that where
    training's own steps already show one pair of one-pass windows would exceed the budget,
    nothing runs, not even the trial pass; then against the trial pass itself. The part's
    ``budget_basis`` says which decided.

    Order of events, so that no rank can wait for another that will never come:

    1. a trial pass on the plain module (not through DDP: no collective can start), which
       also times one pass;
    2. one all-reduce: did any rank fail, and the slowest pass (every rank plans the same
       windows from it);
    3. only then DDP passes: pairs of windows, no_sync and synced, in ABBA order (the first
       pair no_sync first, the next synced first...), so neither kind always runs first.

    Each window also times every pass from its start to its last gradient (``set_probe``
    installs the mark): the synced passes' excess over the no_sync ones there is backward
    slowed by the all-reduce running beside it (the overlap slowdown).
    """
    from torch.nn.parallel import DistributedDataParallel

    def skipped(reason: str, status: str = "skipped") -> dict[str, Any]:
        return {"status": status, "reason": reason, "steps": cfg.calibration_steps}

    if cfg.calibration_steps == 0:
        return skipped("diagnosis.calibration_steps=0", "off")
    model = trainer.strategy.model
    if trainer.world_size <= 1:
        return skipped(SKIPPED_ONE_DEVICE)
    if not isinstance(model, DistributedDataParallel):
        return skipped(f"not trained under DDP ({type(model).__name__})")
    too_long = pair_exceeds_budget(pass_estimate_s, cfg.calibration_budget_s)
    if too_long is not None:
        return {**skipped(too_long), "budget_basis": BUDGET_FROM_STEPS}
    # Ranks that cannot calibrate at all say so in the agreement below, with the others.
    loss_of = _loss_function(pl_module) if batch is not None else "no training batch was seen"
    if faults is not None and faults.exit_rank == trainer.global_rank:
        if faults.exit_at == "calibration":
            os._exit(1)

    device = trainer.strategy.root_device
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    precision = trainer.strategy.precision_plugin

    synced_passes = 0
    raises_in_window = faults is not None and faults.window_error_rank == trainer.global_rank

    def one_pass(grad_sync: bool) -> None:
        nonlocal synced_passes
        assert not isinstance(loss_of, str)
        pl_module.zero_grad(set_to_none=True)
        synced_passes += grad_sync
        if raises_in_window and synced_passes == 2:
            raise RuntimeError("injected by faults.window_error_rank")
        # As in a training step: the precision plugin's autocast around the forward.
        with precision.train_step_context(), _forward_as(pl_module, lambda: loss_of(batch)):
            if grad_sync:
                loss = model()
            else:
                with model.no_sync():
                    loss = model()
        loss.backward()

    def trial_pass() -> None:
        """Forward and backward on the module itself: DDP's reducer expects no gradients
        (its forward was not called), so nothing is all-reduced."""
        assert not isinstance(loss_of, str)
        pl_module.zero_grad(set_to_none=True)
        with precision.train_step_context(), _forward_as(pl_module, lambda: loss_of(batch)):
            loss = pl_module()
        loss.backward()

    cuda = device.type == "cuda"

    def mark() -> Any:
        if not cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def between(a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) / 1000.0 if cuda else float(b - a)

    grads: list[Any] = []
    probed = set_probe(lambda: grads.append(mark())) if set_probe is not None else False

    def window(grad_sync: bool, k: int) -> tuple[float, float | None]:
        """(seconds per pass, seconds per pass to its last gradient or None)."""
        starts: list[Any] = []
        grads.clear()
        sync()
        first = mark()
        for _ in range(k):
            starts.append(mark())
            one_pass(grad_sync)
        end = mark()
        if cuda:
            end.synchronize()
        per_pass = between(first, end) / k
        if not probed or len(grads) != k:
            return per_pass, None
        return per_pass, sum(between(a, b) for a, b in zip(starts, grads, strict=True)) / k

    with _preserved(pl_module, device):
        try:
            failed = loss_of if isinstance(loss_of, str) else ""
            started = time.perf_counter()
            if not failed:
                try:
                    trial_pass()
                    sync()
                except Exception as exc:  # e.g. a user's training_step outside the loop
                    failed = f"the calibration pass failed: {type(exc).__name__}: "
                    failed += _first_line(exc)
            agreed = torch.tensor(
                [1.0 if failed else 0.0, time.perf_counter() - started],
                dtype=torch.float64,
                device=device,
            )
            torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
            failed_anywhere, pass_s = agreed.tolist()
            if failed_anywhere > 0:
                return skipped(failed or f"the calibration pass failed {ANOTHER_RANK}")
            k, windows = calibration_plan(
                pass_s, cfg.calibration_steps, cfg.calibration_windows, cfg.calibration_budget_s
            )
            if windows == 0:  # every rank decides alike: the same reduced pass time
                return {
                    **skipped(
                        f"one pair of windows ({2 * pass_s:.2g} s) would exceed "
                        f"diagnosis.calibration_budget_s ({cfg.calibration_budget_s:g} s)"
                    ),
                    "budget_basis": BUDGET_FROM_TRIAL,
                }
            # No untimed DDP pass: training has just run this very path, warm.
            times: dict[bool, list[tuple[float, float | None]]] = {False: [], True: []}
            order = [s for w in range(windows) for s in ((False, True), (True, False))[w % 2]]
            for n, grad_sync in enumerate(order, 1):
                try:
                    trainer.strategy.barrier("scalescope-calibration")
                    times[grad_sync].append(window(grad_sync, k))
                except Exception as exc:
                    where = f"calibration window {n} of {len(order)} ({_KIND[grad_sync]})"
                    return skipped(_leave_after_failure(trainer, where, exc), "failed")
        finally:
            pl_module.zero_grad(set_to_none=True)
            if set_probe is not None:
                set_probe(None)
    to_grad = [g for kind in (False, True) for _, g in times[kind]]
    return {
        "status": "measured",
        "reason": None,
        "steps": k,
        "windows": windows,
        "budget_basis": BUDGET_FROM_TRIAL,
        "pass_s": pass_s,
        "fwd_bwd_windows_s": [t for t, _ in times[False]],
        "fwd_bwd_sync_windows_s": [t for t, _ in times[True]],
        # None where the last gradient could not be marked in every pass
        "to_last_grad_windows_s": [g for _, g in times[False]] if None not in to_grad else None,
        "to_last_grad_sync_windows_s": [g for _, g in times[True]] if None not in to_grad else None,
    }


BUDGET_FROM_STEPS = "one pass from the training steps"
"""``budget_basis``: the training steps' compute per micro-batch decided (nothing ran)."""
BUDGET_FROM_TRIAL = "the trial pass"
"""``budget_basis``: the timed trial pass decided (the slowest rank's)."""


_KIND = {False: "no_sync", True: "synced"}
_FAILURE_KEY = "scalescope/calibration_failure"


def _leave_after_failure(trainer: L.Trainer, where: str, exc: Exception) -> str:
    """A pass raised inside a window, here or on a peer: the reason, after leaving the
    process group so that no rank waits in a collective its peers will never join.

    The ranks may now be in different collectives (the failing rank left a pass whose
    all-reduce its peers are inside), which would hang until the collective timeout or
    mismatch. So the first rank to fail posts its reason in the rendezvous store (outside the
    process group) and aborts its process group: its peers' collectives then fail at once,
    they read that reason and abort theirs. Every later step skips collectives (none is
    initialised), rank 0 writes its record with the reason, and every rank ends."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    mine = f"{where} failed on rank {trainer.global_rank}: {type(exc).__name__}: {_first_line(exc)}"
    reason = mine
    try:
        store = c10d._get_default_store()
        if store.check([_FAILURE_KEY]):  # a peer failed first: this is the consequence
            reason = store.get(_FAILURE_KEY).decode()
        else:
            store.set(_FAILURE_KEY, mine)
    except Exception:  # no store (or it is gone with a peer): this rank's own words
        pass
    if dist.is_initialized():
        abort = getattr(c10d, "_abort_process_group", None)
        if abort is not None:
            abort()
        else:  # pragma: no cover - older torch
            dist.destroy_process_group()
    return reason


def pair_exceeds_budget(pass_estimate_s: float | None, budget_s: float) -> str | None:
    """Why no calibration runs, where training's steps (``pass_estimate_s`` a pass, one
    micro-batch) already show one pair of one-pass windows exceeds ``budget_s``; None
    where it may fit."""
    if pass_estimate_s is None or 2 * pass_estimate_s <= budget_s:
        return None
    return (
        f"one pair of one-pass windows (about {2 * pass_estimate_s:.2g} s, from the training "
        f"steps' compute per micro-batch) would exceed diagnosis.calibration_budget_s "
        f"({budget_s:g} s)"
    )


def calibration_plan(pass_s: float, steps: int, windows: int, budget_s: float) -> tuple[int, int]:
    """(passes per window, pairs of windows) that keep the timed windows within
    ``budget_s`` at ``pass_s`` a pass, taking passes off before pairs; (0, 0) where not even
    one pair of one-pass windows fits: the calibration is a cross-check, not worth more than
    its budget. Every rank computes it from the same reduced ``pass_s``, so all agree."""
    affordable = int(budget_s / pass_s) if pass_s > 0 else steps * windows * 2
    if affordable < 2:
        return 0, 0
    k = max(1, min(steps, affordable // (2 * windows)))
    w = max(1, min(windows, affordable // (2 * k)))
    return k, w


def _loss_function(pl_module: L.LightningModule) -> Callable[[Any], torch.Tensor] | str:
    """How one forward pass's loss is computed, or why it cannot be (a reason)."""
    own = getattr(pl_module, "calibration_loss", None)
    if callable(own):
        return own  # type: ignore[no-any-return]
    if not pl_module.automatic_optimization:
        return (
            "manual optimization: the module's training_step steps its own optimizer, so it "
            "cannot run without one (define calibration_loss(batch) to enable)"
        )

    def from_training_step(batch: Any) -> torch.Tensor:
        out = pl_module.training_step(batch, 0)
        loss = out.get("loss") if isinstance(out, Mapping) else out
        if not isinstance(loss, torch.Tensor):
            raise _NoLoss(f"training_step returned {type(out).__name__}, not a loss tensor")
        return loss

    return from_training_step


class _NoLoss(RuntimeError):
    pass


@contextmanager
def _forward_as(pl_module: L.LightningModule, fn: Callable[[], torch.Tensor]) -> Any:
    """Route DDP's forward to ``fn`` (as Lightning's own forward redirection does), with
    ``self.log`` allowed as in a training step."""
    previous_fx = getattr(pl_module, "_current_fx_name", None)

    def outer(*args: Any, **kwargs: Any) -> torch.Tensor:
        del pl_module.forward  # only DDP's call is redirected; the loss calls the real one
        return fn()

    pl_module.forward = outer  # type: ignore[method-assign]
    pl_module._current_fx_name = "training_step"
    try:
        yield
    finally:
        if "forward" in vars(pl_module):
            del pl_module.forward
        pl_module._current_fx_name = previous_fx


@contextmanager
def _preserved(pl_module: L.LightningModule, device: torch.device) -> Any:
    """Buffers (batch-norm statistics...) and every RNG state as they were."""
    buffers = {name: b.detach().clone() for name, b in pl_module.named_buffers()}
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    py_rng = random.getstate()
    try:
        import numpy as np

        np_rng: Any = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy is a dependency
        np_rng = None
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in pl_module.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng, device)
        random.setstate(py_rng)
        if np_rng is not None:
            import numpy as np

            np.random.set_state(np_rng)


# -- rank 0: the record's section ---------------------------------------------------------
def off(reason: str) -> dict[str, Any]:
    """The section of a run measured without the breakdown: null fields and why."""
    return {"status": "off", "reason": reason, "ranks": None}


def assemble(
    *,
    per_rank: Sequence[Mapping[str, Any]],
    steady_steps: int | None,
    per_device_batch_size: int,
    allreduce: Mapping[str, Any],
    nvml: Mapping[str, Any],
    calibration: Mapping[str, Any],
    calibration_steps: int,
) -> dict[str, Any]:
    """The record's ``diagnosis`` section from every rank's gathered part (rank order)."""
    ranks = []
    for i, part in enumerate(per_rank):
        d = part.get("diagnosis") or {}
        row: dict[str, Any] = {
            "rank": i,
            "local_rank": part.get("local_rank"),
            "node": part.get("node"),
            "peak_mem_gib": part.get("peak_dev"),
            "peak_host_rss_gib": part.get("rss"),
        }
        if "step_time_s" in d:
            row.update(
                {k: d[k] for k in ("step_time_s", "input_wait_s", "comm_wait_s", "compute_s")}
            )
            row["own_s"] = d["input_wait_s"] + d["compute_s"]
            if "syncs_per_step" in d:
                row["syncs_per_step"] = d["syncs_per_step"]
            waits = d.get("step_waits")
            if len(per_rank) == 1:  # one device: no all-reduce, nobody to wait for
                row.update(wait_s=0.0, exposed_comm_s=d["comm_wait_s"], waits_steps=0)
            elif waits:
                # the gradient wait beyond the step's least over ranks is waiting for others;
                # the rest of the communication wait (and any buffer broadcast) is exposed
                row.update(
                    wait_s=waits["wait_s"],
                    exposed_comm_s=d["comm_wait_s"] - waits["wait_s"],
                    waits_steps=waits["steps"],
                )
        ranks.append(row)
    parts = [p.get("diagnosis") or {} for p in per_rank]
    clock = parts[0].get("clock", "wall") if parts else "wall"
    out: dict[str, Any] = {
        "status": "recorded",
        "reason": None,
        "clock": clock,
        "steady_steps": steady_steps,
        "per_device_batch_size": per_device_batch_size,
        "ranks": ranks,
        "slowest_rank": None,
        "slowest_node": None,
        "typical_rank": None,
        "rank_skew": None,
    }
    syncs = [r["syncs_per_step"] for r in ranks if "syncs_per_step" in r]
    # Gradient all-reduces per optimizer step: 1 (with accumulation too: only the last
    # micro-batch's backward synchronises); more is communication an accumulation loop
    # could avoid (no_sync).
    out["syncs_per_step"] = max(syncs) if syncs else None
    timed = [r for r in ranks if "own_s" in r]
    if timed and len(timed) == len(ranks):
        slowest = max(timed, key=lambda r: r["own_s"])
        typical = _lower_median(timed)
        out.update(
            slowest_rank=slowest["rank"],
            slowest_node=slowest["node"],
            typical_rank=typical["rank"],
            rank_skew=(
                (slowest["own_s"] - typical["own_s"]) / typical["own_s"]
                if typical["own_s"] > 0
                else None
            ),
        )
    elif not timed:
        out["reason"] = "no complete epoch after the warm-up: nothing to break down"
    waits = [p.get("step_waits") for p in parts]
    if len(parts) > 1 and all(waits):
        out["step_waits"] = {
            "steps": min(w["steps"] for w in waits),
            "exposed_s": waits[0]["exposed_s"],  # the same per-step minimum on every rank
            "exposed_se_s": waits[0]["exposed_se_s"],
        }
    elif len(parts) > 1:
        out["step_waits"] = None
        out["step_waits_reason"] = "no per-step gradient waits on every rank"
    out["calibration"] = dict(calibration)
    if out["calibration"].get("steps") is None:
        out["calibration"]["steps"] = calibration_steps
    out["allreduce"] = dict(allreduce)
    out["nvml"] = dict(nvml)
    out["overhead_s"] = {
        "calibration": out["calibration"].get("seconds"),
        "allreduce_baseline": allreduce.get("seconds"),
    }
    return out


def _lower_median(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The rank at the lower median of own time: in a 2-rank job, the faster one, so one
    slow rank's whole excess counts as skew."""
    ordered = sorted(rows, key=lambda r: (r["own_s"], r["rank"]))
    return ordered[(len(ordered) - 1) // 2]


def combine_calibration(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every rank's windows into one cross-check of the exposed all-reduce, and the
    overlap slowdown.

    Per pair of windows p: the median over ranks of the synced window minus the slowest
    rank's no_sync window (the synced passes wait for it anyway), less the pair's overlap
    slowdown where measured (the median over ranks of synced minus no_sync time to the last
    gradient: backward slowed by the all-reduce beside it, which the difference holds too).
    Each estimate is the median over pairs, unclipped (a negative value is noise, and says
    how much), with the per-pair values kept for an interval.
    """
    measured = [p for p in parts if p.get("status") == "measured"]
    if not measured or len(measured) != len(parts):
        # the rank that failed says why; the others only that some rank did
        others = [p for p in parts if p.get("status") != "measured"]
        others.sort(key=lambda p: str(p.get("reason") or "").endswith(ANOTHER_RANK))
        first = others[0] if others else {}
        return {
            "status": first.get("status", "skipped"),
            "reason": first.get("reason") or "not measured on every rank",
            "steps": first.get("steps"),
            "windows": None,
            "fwd_bwd_s": None,
            "fwd_bwd_sync_s": None,
            "exposed_comm_s": None,
            "paired_diffs_s": None,
            "overlap_slowdown_s": None,
            "overlap_diffs_s": None,
            # what trying cost (a trial pass, say); None where no rank got that far
            "seconds": max((p.get("seconds") or 0.0) for p in parts) or None,
        }
    pairs = min(
        min(len(p["fwd_bwd_windows_s"]), len(p["fwd_bwd_sync_windows_s"])) for p in measured
    )
    nosync = [max(p["fwd_bwd_windows_s"][i] for p in measured) for i in range(pairs)]
    synced = [
        statistics.median(p["fwd_bwd_sync_windows_s"][i] for p in measured) for i in range(pairs)
    ]
    diffs = [b - a for a, b in zip(nosync, synced, strict=True)]
    # Backward slowed by the all-reduce beside it: per pair, the median over ranks of each
    # rank's synced minus no_sync time to the last gradient.
    overlap: list[float] | None = None
    if all(
        p.get("to_last_grad_windows_s") and p.get("to_last_grad_sync_windows_s") for p in measured
    ):
        overlap = [
            statistics.median(
                p["to_last_grad_sync_windows_s"][i] - p["to_last_grad_windows_s"][i]
                for p in measured
            )
            for i in range(pairs)
        ]
    if overlap:  # synced - no_sync holds the slowdown too: exposed is the rest
        diffs = [d - o for d, o in zip(diffs, overlap, strict=True)]
    return {
        "status": "measured",
        "reason": None,
        "steps": measured[0]["steps"],
        "windows": measured[0]["windows"],
        "fwd_bwd_s": statistics.median(nosync),
        "fwd_bwd_sync_s": statistics.median(synced),
        "exposed_comm_s": statistics.median(diffs),
        "paired_diffs_s": diffs,
        "overlap_slowdown_s": statistics.median(overlap) if overlap else None,
        "overlap_diffs_s": overlap,
        "seconds": max((p.get("seconds") or 0.0) for p in measured) or None,
    }


def gather_calibration(trainer: L.Trainer, part: Mapping[str, Any]) -> dict[str, Any]:
    """Every rank's calibration part, combined (call on every rank). A peer that died or a
    failed collective gives a ``failed`` section with the reason: never an exception."""
    import torch.distributed as dist

    try:
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            everyone: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(everyone, dict(part))
        else:
            everyone = [dict(part)]
    except Exception as exc:  # this rank's own failure says more, where it had one
        failure = {
            "status": "failed",
            "reason": f"gathering the calibration failed: {type(exc).__name__}: {_first_line(exc)}",
            "steps": part.get("steps"),
        }
        everyone = [part if part.get("status") == "failed" else failure]
    return combine_calibration(everyone)


class BeforeTiming(L.Callback):
    """Before the training clock starts (earlier in the list than the TimingCallback): the
    all-reduce baseline on every rank, and the NVML sampler on each node's local rank 0.
    When training ends, DDP's own gradient buckets replace the baseline's estimate of them.

    ``timings`` (the TimingCallback's) tells when the warm-up ends: the sampler's figures
    cover the steady state from then on. Without it every sample counts, as before."""

    def __init__(
        self,
        cfg: DiagnosisConfig,
        *,
        local_rank: int,
        node: str,
        timings: Timings | None = None,
        faults: FaultsConfig | None = None,
    ) -> None:
        self.cfg = cfg
        self.local_rank = local_rank
        self.node = node
        self.timings = timings
        self.faults = faults
        """Its emulated network (``faults.network_alpha_s``) holds the sweep's ops back."""
        self.allreduce: dict[str, Any] = {
            "status": "skipped",
            "reason": "training never started",
        }
        self.nvml: dict[str, Any] | None = None
        self._sampler: Any = None
        self._awaiting_steady = False  # a sampler runs and the warm-up has not ended yet

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = trainer.strategy.root_device
        if self.local_rank != 0:
            return
        from .sampling import GpuSampler, cuda_pci_bus_ids_or_reason, nvml_section, off_section

        interval = self.cfg.nvml_interval_s
        if not self.cfg.nvml:
            self.nvml = off_section("diagnosis.nvml=false", interval)
        elif device.type != "cuda":
            self.nvml = nvml_section("unavailable", "CPU run: no GPU to sample", interval)
        else:
            bus_ids, unknown = cuda_pci_bus_ids_or_reason()
            self._sampler = GpuSampler(
                interval_s=interval,
                pci_bus_ids=bus_ids,
                node=self.node,
                unknown_reason=unknown,
            )
            if self.timings is None:
                self._sampler.steady()  # no warm-up known: every sample counts
            else:
                self._awaiting_steady = True
            self._sampler.start()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from . import allreduce as ar

        if not self.cfg.allreduce_baseline:
            self.allreduce = ar.off_section("diagnosis.allreduce_baseline=false")
            return
        device = trainer.strategy.root_device
        caps = ar.ddp_bucket_caps(trainer.strategy.model)
        self.allreduce = ar.allreduce_baseline(
            gradient_bytes=ar.gradient_bytes(pl_module),
            device=device,
            budget_s=self.cfg.allreduce_budget_s,
            bucket_bytes=estimate_bucket_bytes(ar.parameter_bytes(pl_module), *caps),
            bucket_reason=f"{ar.NOT_READ_YET}; {ar.ESTIMATED_FROM_PARAMETERS}",
            hold_s=self.faults.network_hold_s if self.faults is not None else None,
        )
        if device.type == "cuda":  # the record's peak memory is training's, not the sweep's
            torch.cuda.reset_peak_memory_stats(device)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        # One attribute test per batch (three until the warm-up ends). This callback runs before
        # the TimingCallback, which sets warmup_steps at the batch end where the warm-up
        # ends: the mark comes one training call later. That call's samples count as warm-up,
        # never a warm-up sample as steady; the TimingCallback's device sync at the warm-up's
        # end has already drained the warm-up's GPU work by then.
        if self._awaiting_steady and self.timings is not None:
            if self.timings.warmup_steps is not None:
                self._sampler.steady()
                self._awaiting_steady = False

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.stop_sampler()
        self.read_ddp_buckets(trainer.strategy.model)

    def read_ddp_buckets(self, model: Any) -> None:
        """DDP's own buckets, built in its first iterations, in place of the estimate, and the
        prediction redone for them. On every rank, from its own DDP's logging data: no
        collective, under a millisecond. Where they cannot be read the estimate stays, with
        the reason; this never raises into training."""
        from . import allreduce as ar

        if self.allreduce.get("status") != "measured":
            return
        buckets, why = ar.read_ddp_buckets(model)
        if buckets is not None:
            self.allreduce = ar.with_buckets(self.allreduce, buckets, "ddp", None)
        else:
            reason = f"{why}; {ar.ESTIMATED_FROM_PARAMETERS}"
            self.allreduce = ar.with_buckets(
                self.allreduce, self.allreduce["bucket_bytes"], "estimated", reason
            )

    def stop_sampler(self) -> None:
        if self._sampler is not None:
            self.nvml = self._sampler.stop()
            self._sampler = None
            self._awaiting_steady = False


def merge_nvml(parts: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """One ``nvml`` section from each node's sampler result (local rank 0 of each node)."""
    found = [p for p in parts if p]
    sampled = [p for p in found if p.get("status") == "sampled"]
    if not sampled:
        first = found[0] if found else {"status": "unavailable", "reason": "no sampler ran"}
        return {
            "status": first.get("status"),
            "reason": first.get("reason"),
            "interval_s": first.get("interval_s"),
            "gpus": None,
        }
    return {
        "status": "sampled",
        "reason": None,
        "interval_s": sampled[0].get("interval_s"),
        "gpus": [g for p in sampled for g in (p.get("gpus") or [])],
    }
