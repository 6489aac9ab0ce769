"""Where a step's time goes, on every rank, without a per-step device sync.

In the timed loop, per rank (over the steady-state steps only):

* *input wait*: the batch fetch Lightning does between two training calls, and the copy to
  the device;
* *communication wait*: from backward's last gradient (when DDP hands its last bucket to the
  all-reduce) to ``backward`` returning: the all-reduce not hidden behind backward plus any
  wait for slower ranks (and, for modules with buffers, DDP's broadcast of them before
  forward). With gradient accumulation only the optimizer step's last backward synchronises:
  the others are compute, and every figure is per optimizer step;
* *compute*: the rest of the rank's own steady-state time (forward, backward, optimizer,
  framework).

The marks are taken with the clocks of :mod:`.step_clock`. At training's end the same
callback runs the calibration windows (:mod:`.calibration`). Before the steady state, the
profiler's rank choice (:mod:`..profile.capture`) may open a *window*: a second clock the same
communication waits go to for a few warm-up steps, without touching the breakdown's own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import lightning as L

from ...collectives import DDP_BROADCAST, DDP_GRADIENT
from ...config import DiagnosisConfig, FaultsConfig
from ...errors import described
from ..clocks.timing import Timings
from .allreduce import FSDP_HAS_NO_BUCKETS
from .bucket_ready import ReadinessTimer, not_recorded
from .calibration import calibrate, pass_estimate
from .cross_rank import gather_calibration, reduce_step_waits
from .step_clock import COLLECTIVES, MAX_STEP_RECORDS, Clock, clock_for
from .strategies import attach_waits, wait_hooks


class StepBreakdown(L.Callback):
    """The per-rank step-time breakdown (after :class:`~..clocks.timing.TimingCallback` in the
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

    Under FSDP2 the marks are its own (:mod:`.sharded.waits`, registered beside DDP's): the
    last-gradient hook and the buffer broadcast's are not installed.

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
        self.clock: Clock = Clock()
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
        self._first_order: list[int] | None = None
        """Parameter indices in the order the first backward produced their gradients."""
        self.ready: ReadinessTimer | None = None
        """Times every gradient in the first steady steps (:mod:`.bucket_ready`); under DDP."""
        self.ready_part: dict[str, Any] | None = None
        """This rank's ``bucket_ready`` part, made at training's end."""
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
        self.window: Clock | None = None
        """While set (only before the steady state: the profiler's measurement steps), the
        communication waits go to this clock instead (``comm_wait_s``)."""
        self.strategy: str | None = None
        """The strategy whose wait hooks took the model (:mod:`.strategies`), or None."""
        self.fsdp: Any = None
        """Under FSDP2, its marks (:class:`.sharded.waits.FsdpWaits`)."""
        self.not_timed: str | None = None
        """Why a strategy's waits could not be marked, where its hooks refused."""
        self.calibration: dict[str, Any] = {
            "status": "skipped",
            "reason": "training stopped before its end",
            "steps": cfg.calibration_steps,
        }

    # set-up ----------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.clock = clock_for(trainer.strategy.root_device, COLLECTIVES["ddp"])

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # one device: no collective, nothing to mark; FSDP's hooks set the clock's series
        self.strategy = attach_waits(self, trainer, pl_module)

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

    def _waits_to(self) -> Clock | None:
        """Where communication waits go now: the breakdown's clock in the steady state, the
        window's before it, else nowhere."""
        return self.clock if self._counting else self.window

    def _last_gradient(self, _param: Any) -> None:
        if self._waits_to() is not None:
            self._ready = self.clock.mark()
        elif self._probe is not None:  # a calibration pass
            self._probe()

    def _forward_starts(self, module: Any, args: Any) -> None:
        if self._call_start is not None:  # the call's first forward: after DDP's broadcast
            end = self.clock.mark()
            if self._counting:
                self.clock.add("comm_wait_s", self._call_start, end)
                self.clock.add(DDP_BROADCAST.key, self._call_start, end, step=self._step)
            elif self.window is not None:
                self.window.add("comm_wait_s", self._call_start, end)
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
        self._call_start = self.clock.mark() if self._waits_to() is not None else None

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: Any
    ) -> None:
        # Only a steady backward that all-reduces has buckets to time (DDP's no_sync sets the
        # flag before the micro-batch's forward).
        if self.fsdp is not None:
            self.fsdp.backward_starts()
            return
        sync = getattr(trainer.strategy.model, "require_backward_grad_sync", True)
        if self.ready is not None and self._counting and sync:
            self.ready.backward_starts()

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.fsdp is not None:  # its reduce-scatters said whether this one synchronised
            self.fsdp.backward_ends()
            return
        if self._grad_order is not None:  # the first backward: keep one hook from now on
            self._settle_last_gradient()
        if self.ready is not None:
            self.ready.backward_ends()  # nothing unless this backward was timed
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
                self.clock.add(DDP_GRADIENT.key, self._ready, end, step=self._step)
            self._step += 1
        elif self.window is not None and self._params and self._ready is not None:
            self.window.add("comm_wait_s", self._ready, self.clock.mark())
        self._ready = None

    def _settle_last_gradient(self) -> None:
        """After the first backward: keep one hook, on the gradient computed last."""
        for handle in self._grad_hooks:
            handle.remove()
        self._grad_hooks = []
        if self._grad_order:
            self._first_order = list(self._grad_order)
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
        if self.fsdp is not None:  # its all-gathers there are not the training step's
            self.fsdp.validating = True

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.fsdp is not None:
            self.fsdp.validating = False

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fetch_start = None  # the fetcher's last, empty call ends the epoch
        self.clock.settle()  # the TimingCallback synchronised the device just before
        self.committed = dict(self.clock.totals)
        self.committed_steps = self._step
        self.committed_synced = self._synced
        if self.fsdp is not None:
            self.fsdp.commit()

    # calibration ---------------------------------------------------------------------
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Training's end, still inside the fit (the model is still wrapped by DDP and on its
        device): the per-step reduction and the end-of-run gather first, then the optional
        calibration, which can no longer cost the record anything."""
        self._counting = False
        self.clock.settle()
        if self.ready is not None:  # the device is synchronised: its marks can be read
            self.ready_part = self.ready.result(trainer.strategy.model, self._first_order)
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
        timed = bool(self._params) or self.fsdp is not None
        if not timed or trainer.world_size <= 1 or n_local <= 0:
            return
        self.step_waits = reduce_step_waits(trainer, self.clock.steps, n_local)

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
        if self._params or self.fsdp is not None:
            # how many backwards per step asked for the all-reduce (FSDP: reduce-scattered)
            out["syncs_per_step"] = self.committed_synced * per
        if self.fsdp is not None:
            out["collectives_per_step"] = self.fsdp.per_step(per)
        if self.step_waits is not None:
            out["step_waits"] = self.step_waits
        if self.ready_part is not None:
            out["bucket_ready"] = self.ready_part
        elif self.fsdp is not None:
            out["bucket_ready"] = not_recorded(FSDP_HAS_NO_BUCKETS)
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
                pass_estimate_s=pass_estimate(self.gathered, self.passes_per_step),
            )
        except Exception as exc:  # a peer that died, a collective that failed
            part = {
                "status": "failed",
                "reason": described(exc),
                "steps": self.cfg.calibration_steps,
            }
        finally:
            self._batch = None
            self._probe = None
        # What it cost outside the timed region, whatever came of it (a trial pass that
        # found one pair of windows too long is a cost too).
        part["seconds"] = time.perf_counter() - started
        return part


@wait_hooks("ddp")
def ddp_waits(probe: StepBreakdown, trainer: L.Trainer, pl_module: L.LightningModule) -> bool:
    """DDP's waits: one hook per trainable parameter learns, in the first backward, which
    gradient comes last (:meth:`StepBreakdown.on_after_backward` keeps the one on it), and
    for a module with buffers a forward pre-hook ends the buffer broadcast's wait."""
    from torch.nn.parallel import DistributedDataParallel

    model = trainer.strategy.model
    if not isinstance(model, DistributedDataParallel):
        return False
    params = [p for p in pl_module.parameters() if p.requires_grad]
    probe._grad_order = []
    order = probe._grad_order
    for i, p in enumerate(params):
        probe._grad_hooks.append(
            p.register_post_accumulate_grad_hook(lambda _p, i=i: order.append(i))
        )
    probe._params = params
    probe.ready = ReadinessTimer(probe.clock, params)
    if model.broadcast_buffers and any(True for _ in pl_module.buffers()):
        # On the module DDP wraps: its forward starts right after the broadcast, whatever
        # the training step calls (Lightning's wrapper calls training_step, which need
        # not call the module's own forward).
        model.module.register_forward_pre_hook(probe._forward_starts)
    return True


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


from .sharded import waits as _fsdp_waits  # noqa: E402,F401  FSDP's hooks: registered after DDP's
