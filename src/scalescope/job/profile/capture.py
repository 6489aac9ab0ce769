"""A ``torch.profiler`` trace of a few steps, on the ranks that matter (``trainer.profile``).

The capture is part of the warm-up, so no timed figure (throughput, the breakdown, the steady
state) holds a profiled step: :class:`ProfileCapture` holds the TimingCallback's warm-up open
(:class:`~..clocks.timing.WarmupHold`) until the profiled steps are done. In order, at the step
boundaries (the ends of Lightning's training calls) every rank agrees on:

1. the warm-up as resolved (``trainer.warmup_steps``);
2. with ``ranks: auto`` on several ranks, :data:`~.plan.MEASURE_STEPS` steps in which
   every rank measures the time it was busy, not waiting in a collective, with the
   diagnosis' own hooks (a *window* of
   :class:`~..diagnosis.step_breakdown.StepBreakdown`); one small gather then names the
   busiest rank (the slowest, the one that waits least), and rank 0 and it are profiled
   (:func:`~.plan.choose_ranks`). Without the diagnosis the
   waits are not measured: every rank of the first node is profiled, and the record says so;
3. at least ``trainer.profile.steps`` optimizer steps under the profiler on the chosen ranks,
   in whole training calls, from the next epoch's start where the current one has fewer
   steps left (validation stays out of the trace), stopped early only by an epoch shorter
   than the capture. One ``ProfilerStep#<n>`` marker per call, named after the first
   optimizer step it holds: one per optimizer step where a call is one step, and where a call
   holds several (``trainer.steps_per_call``) its steps are its ``Optimizer.step``
   annotations. Markers sit at call boundaries, outside every other annotation, so the
   trace's events nest (Perfetto drops events that overlap). Each profiled rank writes
   ``traces/rank<r>.json`` in the run directory (a Chrome trace: Perfetto and Holistic Trace
   Analysis open it as it is) and summarises it (:func:`scalescope.traces.top_operations`);
4. the steady state, from that boundary on: the capture stops and its trace is written
   before the TimingCallback ends the warm-up there (this callback comes first in the list).

A run too short for all of it trains as it would unprofiled, and its record says "not
captured" and why (:func:`~.plan.why_not`); a rank's failure to profile is its part's
reason, never the job's failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L

from ...config import WARMUP_AUTO_MAX_STEPS, ProfileConfig
from ...errors import described
from ..clocks.timing import loader_steps
from ..diagnosis.step_breakdown import StepBreakdown
from . import plan
from .stderr_filter import dropping_lines


def _record_every_step(step: int) -> Any:
    from torch.profiler import ProfilerAction

    return ProfilerAction.RECORD  # a schedule, so that step() makes ProfilerStep# markers


class ProfileCapture(L.Callback):
    """The capture (see the module): just before the TimingCallback in the callback list, so
    that at a step boundary its work (the choice, the trace) is done before the warm-up may
    end, and at training's end its part is ready before the end-of-run gather."""

    def __init__(
        self,
        cfg: ProfileConfig,
        *,
        run_dir: Path,
        breakdown: StepBreakdown | None,
        steps_per_call: int,
    ) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        """Rank 0's run directory (every rank learns it at the choice)."""
        self.breakdown = breakdown
        self.steps_per_call = steps_per_call
        self.phase = "pending"
        """pending -> waiting -> (measuring) -> armed -> capturing -> done."""
        self.base = 0
        self._first_epoch_done = False
        self.shared: dict[str, Any] = {"status": "pending", "settings": self._settings(False)}
        """What every rank agrees on: the status, the settings, the choice."""
        self.part: dict[str, Any] | None = None
        """This rank's capture, where it is profiled."""
        self.first = 0
        self.capture_end = 0
        self._profiled = False
        self._next_epoch = False
        """Armed, but the capture waits for the next epoch (this one has too few steps left)."""
        self._measure_from = 0
        self._window_start: Any = None
        self._val_start: Any = None
        self._prof: Any = None
        self._marked = 0
        """The optimizer step the trace's current ``ProfilerStep#`` marker is named after."""
        self._t0 = 0.0
        self._rank = 0
        self._sync: Callable[[], None] = lambda: None

    def _settings(self, cuda: bool) -> dict[str, Any]:
        return {
            "requested_steps": self.cfg.steps,
            "ranks_setting": self.cfg.ranks,
            "activities": ["cpu", "cuda"] if cuda else ["cpu"],
            "record_shapes": self.cfg.record_shapes,
            "profile_memory": self.cfg.profile_memory,
        }

    # -- the warm-up hold (TimingCallback) --------------------------------------------------
    def resolve(self, trainer: L.Trainer, target: int | None) -> None:
        """At train start: where the warm-up as resolved ends, and whether a capture fits."""
        import torch

        device = trainer.strategy.root_device
        if device.type == "cuda":
            self._sync = lambda: torch.cuda.synchronize(device)
        self.shared["settings"] = self._settings(device.type == "cuda")
        self._rank = trainer.global_rank
        self.base = WARMUP_AUTO_MAX_STEPS if target is None else target
        reason = self._does_not_fit(trainer, target)
        if reason is None:
            self.phase = "waiting"
            return
        self.phase = "done"
        self.shared.update(status="not captured", reason=reason)
        if trainer.global_rank == 0:
            print(f"scalescope: warning: trainer.profile: not captured: {reason}", flush=True)

    def holds(self, step: int) -> bool:
        if self.phase == "capturing":
            return step < self.capture_end
        return self.phase != "done"

    def _measures(self, trainer: L.Trainer) -> bool:
        return self.cfg.ranks == "auto" and trainer.world_size > 1 and self.breakdown is not None

    def _does_not_fit(self, trainer: L.Trainer, target: int | None) -> str | None:
        """Why the run cannot take the capture and keep a steady state; None where it can or
        where its length is not known before it runs (the record says if it ended first)."""
        per_epoch = loader_steps(trainer)
        if target is None or per_epoch <= 0:
            return None
        limit = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        run = plan.RunLength(
            steps_per_epoch=per_epoch,
            epochs=max(1, trainer.max_epochs or 1),
            max_steps=limit,
            steps_per_call=self._call_steps(trainer),
            warmup_steps=self.base,
            measures=self._measures(trainer),
        )
        return plan.capture_misfit(run, self.cfg.steps)

    def _call_steps(self, trainer: L.Trainer) -> int:
        """Optimizer steps in one training call: a built-in loader's group, else one."""
        loader = trainer.train_dataloader
        return self.steps_per_call if getattr(loader, "num_steps", None) else 1

    # -- the phases, at step boundaries ------------------------------------------------------
    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, i: int
    ) -> None:
        step = trainer.global_step
        if self.phase == "waiting" and (step >= self.base or self._first_epoch_done):
            if self._measures(trainer):
                self._open_window(trainer, step)
            else:
                self._choose(trainer, None, 0)
        elif self.phase == "measuring" and step >= self._measure_from + plan.MEASURE_STEPS:
            busy = self._close_window(step)
            self._choose(trainer, busy, step - self._measure_from)
        elif self.phase == "capturing" and step >= self.capture_end:
            self._end_capture(trainer, None)
        elif self.phase == "capturing" and step > self._marked:
            self._mark(step)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, i: int
    ) -> None:
        if self.phase == "measuring" and self._window_start is None:
            assert self.breakdown is not None
            self._window_start = self.breakdown.clock.mark()
        elif self.phase == "armed" and not self._next_epoch:
            self._start_capture(trainer)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._next_epoch = False

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # only validation inside the window: the one before its first call is outside it
        if self.phase == "measuring" and self._window_start is not None:
            assert self.breakdown is not None
            self._val_start = self.breakdown.clock.mark()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        bd = self.breakdown
        if self.phase == "measuring" and bd is not None and bd.window is not None:
            if self._val_start is not None:  # validation is no rank's busy time
                bd.window.add("validation_s", self._val_start, bd.clock.mark())
        self._val_start = None

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._first_epoch_done = True
        if self.phase == "capturing":  # the epoch's end ends the capture (validation follows)
            done = trainer.global_step - self.first
            self._end_capture(
                trainer,
                f"the capture ended at the epoch's end, after {done} of {self.cfg.steps} steps",
            )

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.phase == "capturing":
            done = trainer.global_step - self.first
            self._end_capture(
                trainer,
                f"training ended in the capture, after {done} of {self.cfg.steps} steps",
                meet=False,  # nothing timed follows; a rank that stopped early may not come
            )
        elif self.phase != "done":
            if self.breakdown is not None:
                self.breakdown.window = None
            self.phase = "done"
            self.shared.update(
                status="not captured",
                reason=f"training ended (at step {trainer.global_step}) before the capture",
            )

    # -- measuring, choosing ----------------------------------------------------------------
    def _open_window(self, trainer: L.Trainer, step: int) -> None:
        from ..diagnosis.step_clock import clock_for

        assert self.breakdown is not None
        self.breakdown.window = clock_for(trainer.strategy.root_device, ())
        self._measure_from, self._window_start = step, None
        self.phase = "measuring"

    def _close_window(self, step: int) -> float | None:
        """This rank's busy seconds per step over the window: its time less its waits in
        the collectives (and less validation)."""
        bd = self.breakdown
        assert bd is not None
        window, bd.window = bd.window, None
        if window is None or self._window_start is None or step <= self._measure_from:
            return None
        window.add("window_s", self._window_start, bd.clock.mark())
        window.settle()
        t = window.totals
        busy = t["window_s"] - t.get("validation_s", 0.0) - t.get("comm_wait_s", 0.0)
        return busy / (step - self._measure_from)

    def _choose(self, trainer: L.Trainer, busy: float | None, steps: int) -> None:
        """Every rank: one gather of each rank's busy time, its node and rank 0's run
        directory; the same choice everywhere."""
        import torch.distributed as dist

        mine = {"busy": busy, "node_rank": trainer.node_rank, "run_dir": str(self.run_dir)}
        if dist.is_available() and dist.is_initialized() and trainer.world_size > 1:
            everyone: list[Any] = [None] * trainer.world_size
            dist.all_gather_object(everyone, mine)
        else:
            everyone = [mine]
        self.run_dir = Path(everyone[0]["run_dir"])
        unmeasured = None
        if self.cfg.ranks == "auto" and self.breakdown is None:
            unmeasured = "the diagnosis measures the waits, and diagnosis.enabled=false"
        choice = plan.choose_ranks(
            self.cfg.ranks,
            [e["busy"] for e in everyone],
            [e["node_rank"] for e in everyone],
            steps=steps,
            unmeasured=unmeasured,
        )
        self.shared.update(
            status="chosen",
            chosen_by=choice.chosen_by,
            slowest_rank=choice.slowest,
            measured=choice.measured,
        )
        self._profiled = trainer.global_rank in choice.ranks
        self.phase = "armed"
        step, per_epoch = trainer.global_step, loader_steps(trainer)
        left = per_epoch - step % per_epoch if per_epoch > 0 else self.cfg.steps
        self._next_epoch = left < self.cfg.steps <= per_epoch
        if trainer.global_rank == 0:
            ranks = ", ".join(str(r) for r in choice.ranks)
            start = step + left if self._next_epoch else step
            print(
                f"scalescope: profiling {self.cfg.steps} steps from step {start} on rank(s) "
                f"{ranks} ({choice.chosen_by})",
                flush=True,
            )

    # -- capturing --------------------------------------------------------------------------
    def _start_capture(self, trainer: L.Trainer) -> None:
        self.first = self._marked = trainer.global_step
        self.capture_end = self.first + self.cfg.steps
        self.phase = "capturing"
        if not self._profiled:
            return
        try:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU]
            if trainer.strategy.root_device.type == "cuda":
                activities.append(ProfilerActivity.CUDA)
            prof = profile(
                activities=activities,
                record_shapes=self.cfg.record_shapes,
                profile_memory=self.cfg.profile_memory,
                with_stack=False,
                schedule=_record_every_step,
            )
            prof.step_num = self.first  # markers named after the optimizer steps they hold
            self._sync()
            self._t0 = time.perf_counter()
            with dropping_lines():  # libkineto's USDT marker line
                prof.start()
            self._prof = prof
        except Exception as exc:  # a profiler that cannot start: the part says why
            self.part = {"status": "failed", "reason": described(exc)}

    def _mark(self, step: int) -> None:
        """A call boundary inside the capture where optimizer steps were taken: the next
        marker, named after the next step (a call that only accumulated takes none)."""
        self._marked = step
        if self._prof is not None:
            self._prof.step_num = step - 1  # step() names the next marker step_num + 1
            self._prof.step()

    def _end_capture(self, trainer: L.Trainer, truncated: str | None, *, meet: bool = True) -> None:
        """Every rank, at the boundary (or the epoch's end) that closes the capture. Then
        every rank meets (``meet``): the steady state may start at this boundary, and a rank
        that went on while the profiled ones wrote their traces would wait for them in its
        first steady step."""
        if self._prof is not None:
            self._finish(trainer.global_step - 1)
            if self.part is not None and truncated and self.part.get("status") == "captured":
                self.part["reason"] = truncated
        if truncated:
            self.shared["truncated"] = truncated
        self.phase = "done"
        if meet and trainer.world_size > 1:
            trainer.strategy.barrier("scalescope-profile-end")

    def _finish(self, last: int) -> None:
        """Stop the profiler, write this rank's trace and summarise it (still in the
        warm-up: whatever this costs is no timed figure's)."""
        from ...traces import read_trace, top_operations

        prof, self._prof = self._prof, None
        self._sync()
        window = time.perf_counter() - self._t0
        started = time.perf_counter()
        name = plan.trace_name(self._rank)
        try:
            with dropping_lines():
                prof.stop()
            if last < self.first:
                raise RuntimeError("no optimizer step ran in the capture")
            path = self.run_dir / name
            path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(path))
            table = top_operations(read_trace(path))
        except Exception as exc:  # a failed capture is this part's reason, not the job's end
            self.part = {"status": "failed", "reason": described(exc)}
            return
        self.part = {
            "status": "captured",
            "reason": None,
            "steps": [self.first, last],
            "trace": name,
            "window_s": window,
            "overhead_s": time.perf_counter() - started,
            "top_ops": table,
        }

    # -- the record ---------------------------------------------------------------------------
    def mine(self) -> dict[str, Any] | None:
        """This rank's part of the end-of-run gather: its capture, where it is profiled."""
        return self.part

    def section(
        self, per_rank: list[dict[str, Any]], steady_step_s: float | None
    ) -> dict[str, Any]:
        """The record's ``profile`` section (rank 0, from the gathered parts)."""
        parts = [p.get("profile") for p in per_rank]
        return plan.section(self.shared, parts, steady_step_s=steady_step_s)
