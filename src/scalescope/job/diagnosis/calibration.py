"""The calibration windows, after training (outside every timed interval), on every rank.

With the last training batch, K forward+backward passes under DDP's ``no_sync()`` and K with
gradient sync, interleaved, the fastest window of each kind kept. No optimizer step is
taken; the gradients are discarded, buffers (e.g. batch-norm statistics) and RNG states
restored. ``sync - no_sync`` per pass is the exposed all-reduce time without any skew between
ranks. Every rank's part is combined in :func:`.cross_rank.gather_calibration`.

Under FSDP2 the windows without sync switch it off on every sharded unit
(``set_requires_gradient_sync(False)``): their passes skip the reduce-scatters and keep the
all-gathers, so ``sync - no_sync`` is the exposed reduce-scatter only; the section's
``isolates`` names the collective (:mod:`.sharded.calibration`).

After the timed pairs, one more window of synced passes runs under the profiler: how long the
collectives' kernels ran in a pass, for the compute split (:mod:`.comm_kernels`).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch

from ...config import DiagnosisConfig, FaultsConfig
from ...errors import described
from ..faults.fsdp_comms import fsdp_modules
from .allreduce import SKIPPED_ONE_DEVICE
from .comm_kernels import profiled_window
from .sharded import calibration as fsdp

ANOTHER_RANK = "on another rank"
DRAIN_S = 1.0
"""Seconds an aborted process group's threads get to drop their queued collectives."""

BUDGET_FROM_STEPS = "one pass from the training steps"
"""``budget_basis``: the training steps' compute per micro-batch decided (nothing ran)."""
BUDGET_FROM_TRIAL = "the trial pass"
"""``budget_basis``: the timed trial pass decided (the slowest rank's)."""


_KIND = {False: "no_sync", True: "synced"}
_FAILURE_KEY = "scalescope/calibration_failure"

Windows = dict[bool, list[tuple[float, float | None]]]
"""Per kind (synced or not), each window's (seconds per pass, seconds per pass to its last
gradient or None)."""


def pass_estimate(gathered: Any, passes_per_step: int) -> float | None:
    """One forward+backward pass (a micro-batch: what a calibration pass runs) estimated from
    the slowest rank's compute per optimizer step, which covers ``passes_per_step`` of them
    and the optimizer step (the same on every rank, from the gather); None where not known."""
    per_rank = getattr(gathered, "per_rank", None) or []
    times = [(p.get("diagnosis") or {}).get("compute_s") for p in per_rank]
    known = [t for t in times if isinstance(t, float) and t > 0]
    if not known or len(known) != len(times):
        return None
    return max(known) / max(1, passes_per_step)


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

    Under FSDP2 every pass gathers the parameters, the trial pass too: there every rank first
    agrees that it can start one, and a trial pass that fails leaves the process group as a
    window's does (:func:`_leave_after_failure`). Afterwards gradient sync is on again on
    every unit, the gradients are dropped (the unsharded ones too) and every unit is
    resharded, whatever happened.

    Each window also times every pass from its start to its last gradient (``set_probe``
    installs the mark): the synced passes' excess over the no_sync ones there is backward
    slowed by the all-reduce running beside it (the overlap slowdown). Under FSDP2 no such
    mark exists (its parameters' gradient hooks fire after the reduce-scatter).
    """
    not_run = _not_run(trainer, cfg, pass_estimate_s)
    if not_run is not None:
        return not_run
    # Ranks that cannot calibrate at all say so in the agreement below, with the others.
    loss_of = _loss_function(pl_module) if batch is not None else "no training batch was seen"
    if faults is not None and faults.exit_rank == trainer.global_rank:
        if faults.exit_at == "calibration":
            os._exit(1)
    passes = _Passes(trainer, pl_module, batch, loss_of, faults)
    passes.probed = set_probe(passes.mark_gradient) if set_probe is not None else False
    with _preserved(pl_module, passes.device):
        try:
            return _windows_planned_and_run(trainer, cfg, passes)
        finally:
            passes.finish()
            if set_probe is not None:
                set_probe(None)


def _skipped(cfg: DiagnosisConfig, reason: str, status: str = "skipped") -> dict[str, Any]:
    return {"status": status, "reason": reason, "steps": cfg.calibration_steps}


def _not_run(
    trainer: L.Trainer, cfg: DiagnosisConfig, pass_estimate_s: float | None
) -> dict[str, Any] | None:
    """The part of a calibration that does not run at all (nothing timed), or None."""
    from torch.nn.parallel import DistributedDataParallel

    if cfg.calibration_steps == 0:
        return _skipped(cfg, "diagnosis.calibration_steps=0", "off")
    model = trainer.strategy.model
    if trainer.world_size <= 1:
        return _skipped(cfg, SKIPPED_ONE_DEVICE)
    units = fsdp_modules(trainer.lightning_module)
    if units:
        if fsdp.sharded_params(units) is None:
            return _skipped(cfg, fsdp.NO_GRAD_STATE)
    elif not isinstance(model, DistributedDataParallel):
        return _skipped(cfg, f"not trained under DDP ({type(model).__name__})")
    too_long = pair_exceeds_budget(pass_estimate_s, cfg.calibration_budget_s)
    if too_long is not None:
        return {**_skipped(cfg, too_long), "budget_basis": BUDGET_FROM_STEPS}
    return None


class _Passes:
    """Forward+backward passes with the last training batch, and windows of them timed."""

    def __init__(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        loss_of: Callable[[Any], torch.Tensor] | str,
        faults: FaultsConfig | None,
    ) -> None:
        self.model: Any = trainer.strategy.model
        self.pl_module = pl_module
        self.batch = batch
        self.loss_of = loss_of
        self.device = trainer.strategy.root_device
        self.cuda = self.device.type == "cuda"
        self.precision = trainer.strategy.precision_plugin
        self.synced_passes = 0
        self.raises_in_window = (
            faults is not None and faults.window_error_rank == trainer.global_rank
        )
        self.grads: list[Any] = []
        """Marks at each pass's last gradient (see ``mark_gradient``)."""
        self.probed = False
        """Whether the last gradient of each pass is marked."""
        self.fsdp = fsdp_modules(pl_module)
        """Under FSDP2, its sharded units (empty under DDP)."""
        self._sharded = (fsdp.sharded_params(self.fsdp) or []) if self.fsdp else []
        """FSDP2's per-parameter state, whose unsharded gradients :meth:`zero_grad` drops."""
        self.isolates = fsdp.isolates(self.fsdp)

    def zero_grad(self) -> None:
        """No gradient left, under FSDP2 the unsharded ones a pass without sync left too."""
        self.pl_module.zero_grad(set_to_none=True)
        fsdp.discard_unsharded_grads(self._sharded)

    def finish(self) -> None:
        """After the passes, whatever came of them: no gradient left and, under FSDP2,
        gradient sync on again on every unit (as each optimizer step leaves it) and every
        unit resharded."""
        self.zero_grad()
        if self.fsdp:
            fsdp.set_gradient_sync(self.fsdp, True)
            fsdp.resharded(self.fsdp)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def between(self, a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) / 1000.0 if self.cuda else float(b - a)

    def mark_gradient(self) -> None:
        self.grads.append(self.mark())

    def one_pass(self, grad_sync: bool) -> None:
        loss_of, pl_module, model = self.loss_of, self.pl_module, self.model
        assert not isinstance(loss_of, str)
        self.zero_grad()
        self.synced_passes += grad_sync
        if self.raises_in_window and self.synced_passes == 2:
            raise RuntimeError("injected by faults.window_error_rank")
        if self.fsdp:
            self._fsdp_pass(grad_sync)
            return
        # As in a training step: the precision plugin's autocast around the forward.
        with (
            self.precision.train_step_context(),
            _forward_as(pl_module, lambda: loss_of(self.batch)),
        ):
            if grad_sync:
                loss = model()
            else:
                with model.no_sync():
                    loss = model()
        loss.backward()

    def _fsdp_pass(self, grad_sync: bool) -> None:
        """One pass as Lightning's training step runs it under FSDP2: the loss on the module
        itself (its sharded units gather as it runs), the reduce-scatters in backward only
        where ``grad_sync`` (switched on every unit before the pass: FSDP reads it then)."""
        loss_of = self.loss_of
        assert not isinstance(loss_of, str)
        fsdp.set_gradient_sync(self.fsdp, grad_sync)
        with self.precision.train_step_context(), _in_training_step(self.pl_module):
            loss = loss_of(self.batch)
        loss.backward()

    def trial_pass(self) -> None:
        """Forward and backward on the module itself: DDP's reducer expects no gradients
        (its forward was not called), so nothing is all-reduced. Under FSDP2 a synced pass
        (the longer kind, for the budget): its all-gathers cannot be left out."""
        loss_of, pl_module = self.loss_of, self.pl_module
        assert not isinstance(loss_of, str)
        self.zero_grad()
        if self.fsdp:
            self._fsdp_pass(True)
            return
        with (
            self.precision.train_step_context(),
            _forward_as(pl_module, lambda: loss_of(self.batch)),
        ):
            loss = pl_module()
        loss.backward()

    def window(self, grad_sync: bool, k: int) -> tuple[float, float | None]:
        """(seconds per pass, seconds per pass to its last gradient or None)."""
        starts: list[Any] = []
        self.grads.clear()
        self.sync()
        first = self.mark()
        for _ in range(k):
            starts.append(self.mark())
            self.one_pass(grad_sync)
        end = self.mark()
        if self.cuda:
            end.synchronize()
        per_pass = self.between(first, end) / k
        if not self.probed or len(self.grads) != k:
            return per_pass, None
        to_grad = sum(self.between(a, b) for a, b in zip(starts, self.grads, strict=True))
        return per_pass, to_grad / k


def _windows_planned_and_run(
    trainer: L.Trainer, cfg: DiagnosisConfig, passes: _Passes
) -> dict[str, Any]:
    """The trial pass agreed on, the windows planned from it within the budget, then run:
    this rank's part, measured, skipped or failed."""
    if passes.fsdp:
        pass_s, failed, status = _fsdp_trial_pass_agreed(trainer, passes)
    else:
        (pass_s, failed), status = _trial_pass_agreed(passes), "skipped"
    if failed:
        return _skipped(cfg, failed, status)
    k, windows = calibration_plan(
        pass_s, cfg.calibration_steps, cfg.calibration_windows, cfg.calibration_budget_s
    )
    if windows == 0:  # every rank decides alike: the same reduced pass time
        return {
            **_skipped(
                cfg,
                f"one pair of windows ({2 * pass_s:.2g} s) would exceed "
                f"diagnosis.calibration_budget_s ({cfg.calibration_budget_s:g} s)",
            ),
            "budget_basis": BUDGET_FROM_TRIAL,
        }
    times, failure = _timed_windows(trainer, passes, k, windows)
    if failure:
        return _skipped(cfg, failure, "failed")
    kernels, failure = _profiled_window(trainer, passes, k)
    if failure:
        return _skipped(cfg, failure, "failed")
    return {
        **_measured(k, windows, pass_s, times),
        "isolates": passes.isolates,
        "comm_kernels": kernels,
    }


def _profiled_window(trainer: L.Trainer, passes: _Passes, k: int) -> tuple[dict[str, Any], str]:
    """The window of ``k`` synced passes under the profiler, after a barrier: this rank's
    ``comm_kernels`` part, and the reason where a pass failed here or on a peer."""
    try:
        trainer.strategy.barrier("scalescope-calibration")
        return profiled_window(lambda: passes.one_pass(True), passes.sync, k, cuda=passes.cuda), ""
    except Exception as exc:
        where = "the profiled window of synced passes (the collectives' kernels)"
        return {}, _leave_after_failure(trainer, where, exc)


def _trial_pass_agreed(passes: _Passes) -> tuple[float, str]:
    """The trial pass, then one all-reduce (MAX) of whether it failed and how long it took:
    (the slowest rank's pass, why the calibration cannot run: '' where every rank can)."""
    failed = passes.loss_of if isinstance(passes.loss_of, str) else ""
    started = time.perf_counter()
    if not failed:
        try:
            passes.trial_pass()
            passes.sync()
        except Exception as exc:  # e.g. a user's training_step outside the loop
            failed = f"the calibration pass failed: {described(exc)}"
    return _agreed(passes, failed, time.perf_counter() - started)


def _agreed(passes: _Passes, failed: str, seconds: float) -> tuple[float, str]:
    """One all-reduce (MAX) of whether a rank failed and of ``seconds``: (the most seconds,
    this rank's ``failed``, or that another rank failed, or '')."""
    agreed = torch.tensor(
        [1.0 if failed else 0.0, seconds], dtype=torch.float64, device=passes.device
    )
    torch.distributed.all_reduce(agreed, op=torch.distributed.ReduceOp.MAX)
    failed_anywhere, most = agreed.tolist()
    if failed_anywhere > 0:
        return most, failed or f"the calibration pass failed {ANOTHER_RANK}"
    return most, ""


def _fsdp_trial_pass_agreed(trainer: L.Trainer, passes: _Passes) -> tuple[float, str, str]:
    """Under FSDP2 the trial pass gathers parameters: every rank first agrees that it can
    start one (one all-reduce), then runs it, leaving the process group where it fails as a
    window's pass does, then one all-reduce (MAX) of its time: (the slowest rank's pass,
    why the calibration cannot run or '', the part's status then)."""
    _, failed = _agreed(passes, passes.loss_of if isinstance(passes.loss_of, str) else "", 0.0)
    if failed:
        return 0.0, failed, "skipped"
    started = time.perf_counter()
    try:
        passes.trial_pass()
        passes.sync()
    except Exception as exc:  # e.g. a user's training_step outside the loop
        return 0.0, _leave_after_failure(trainer, "the calibration's trial pass", exc), "failed"
    pass_s, _ = _agreed(passes, "", time.perf_counter() - started)
    return pass_s, "", ""


def _timed_windows(
    trainer: L.Trainer, passes: _Passes, k: int, windows: int
) -> tuple[Windows, str]:
    """``windows`` pairs of ``k``-pass windows in ABBA order, each after a barrier: their
    times, and the reason where a window failed here or on a peer ('' where none did)."""
    # No untimed DDP pass: training has just run this very path, warm.
    times: Windows = {False: [], True: []}
    order = [s for w in range(windows) for s in ((False, True), (True, False))[w % 2]]
    for n, grad_sync in enumerate(order, 1):
        try:
            trainer.strategy.barrier("scalescope-calibration")
            times[grad_sync].append(passes.window(grad_sync, k))
        except Exception as exc:
            where = f"calibration window {n} of {len(order)} ({_KIND[grad_sync]})"
            return times, _leave_after_failure(trainer, where, exc)
    return times, ""


def _measured(k: int, windows: int, pass_s: float, times: Windows) -> dict[str, Any]:
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

    mine = f"{where} failed on rank {trainer.global_rank}: {described(exc)}"
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
        # The aborted group's backend threads still drop the collectives left in their queue,
        # each holding the Python context its backward stashed (torch.autograd.graph), whose
        # release takes the GIL. Lightning's teardown later destroys the group while holding
        # the GIL and joins those threads: if one is still dropping, neither moves (seen on a
        # loaded machine, rank 0 stuck in ~ProcessGroupGloo). Sleeping releases the GIL
        # while they drain, which takes milliseconds.
        time.sleep(DRAIN_S)
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
def _in_training_step(pl_module: L.LightningModule) -> Any:
    """``self.log`` allowed as in a training step."""
    previous_fx = getattr(pl_module, "_current_fx_name", None)
    pl_module._current_fx_name = "training_step"
    try:
        yield
    finally:
        pl_module._current_fx_name = previous_fx


@contextmanager
def _forward_as(pl_module: L.LightningModule, fn: Callable[[], torch.Tensor]) -> Any:
    """Route DDP's forward to ``fn`` (as Lightning's own forward redirection does), with
    ``self.log`` allowed as in a training step."""

    def outer(*args: Any, **kwargs: Any) -> torch.Tensor:
        del pl_module.forward  # only DDP's call is redirected; the loss calls the real one
        return fn()

    pl_module.forward = outer  # type: ignore[method-assign]
    try:
        with _in_training_step(pl_module):
            yield
    finally:
        if "forward" in vars(pl_module):
            del pl_module.forward


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
