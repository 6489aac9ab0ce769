"""What a job's training is measured with (:class:`Measures`): the TimingCallback (the
clock, :mod:`..clocks.timing`), the measures of a user's module, the diagnosis' callbacks, the
compile clock, the profiler's capture (:mod:`..profile.capture`) and the stop at SIGTERM, and the
end-of-run gather of what they measured.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import record
from ...config import TrainConfig, resolve_batch
from .topology import Topology

if TYPE_CHECKING:
    from ..tracking.comet_log import Tracker
    from .startup import Job


class Measures:
    """Every callback that measures this rank's training, and what they measured gathered
    from every rank at the end."""

    def __init__(
        self,
        cfg: TrainConfig,
        *,
        timing: Any,
        stop: Any,
        user: UserMeasures | None,
        node: str,
        diag: DiagnosisCallbacks | None,
        compile_clock: Any,
        profile: Any = None,
    ) -> None:
        self.cfg = cfg
        self.timing = timing
        """The TimingCallback."""
        self.stop = stop
        """The StopOnSignal: why training stopped early, if it did (the record says)."""
        self.user = user
        """The measures of a user's module; None for a built-in workload."""
        self.node = node
        self.diag = diag
        """The diagnosis' callbacks; None with ``diagnosis.enabled=false``."""
        self.compile_clock = compile_clock
        self.profile = profile
        """The profiler's capture (a :class:`~..profile.capture.ProfileCapture`); None when
        ``trainer.profile.steps`` is 0."""

    @classmethod
    def create(
        cls,
        cfg: TrainConfig,
        job: Job,
        model: Any,
        process_start: float,
        tracker: Tracker,
        run_dir: Path,
    ) -> Measures:
        """The callbacks, the TimingCallback's loss and epoch figures going to ``tracker``."""
        from ..clocks.compiling import CompileClock
        from ..clocks.preemption import StopOnSignal
        from ..clocks.timing import TimingCallback

        batch = job.batch
        user: UserMeasures | None = None  # set below: the epoch's figures read it at its end

        def epoch_rate(metrics: Mapping[str, float]) -> float:
            """The epoch's samples per second: a built-in workload's steps x its global
            batch; a user's module's samples its loader yielded (rank 0's, times the ranks:
            the sampler gives each its share), since its steps and batches are its own."""
            if user is None:
                return _epoch_rate(metrics, batch.global_batch_size)
            samples = user.counter.epoch_so_far() * job.topo.world_size
            return record.rate(samples, metrics["epoch_time_s"])

        timing = TimingCallback(
            process_start=process_start,
            log_every_n_steps=cfg.trainer.log_every_n_steps,
            warmup_steps=cfg.trainer.warmup_steps,
            on_loss=lambda v, step, ep: tracker.log_metrics({"train_loss": v}, step=step, epoch=ep),
            on_epoch=lambda m, step, ep: tracker.log_metrics(
                {**m, "samples_per_s": epoch_rate(m)}, step=step, epoch=ep
            ),
        )
        stop = StopOnSignal()
        user = (
            UserMeasures.create(model, timing, job.resolved.batch_size_passed_to, cfg.trainer)
            if job.user_workload
            else None
        )
        node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        diag = DiagnosisCallbacks.create(cfg, timing, job.topo, node)
        compile_clock = CompileClock(
            timing.t, backend=cfg.trainer.compile_backend if cfg.trainer.compile else None
        )
        measures = cls(
            cfg,
            timing=timing,
            stop=stop,
            user=user,
            node=node,
            diag=diag,
            compile_clock=compile_clock,
            profile=_profile_capture(cfg, job, timing, diag, run_dir),
        )
        if diag is not None:
            diag.breakdown.gather = measures.gather
        return measures

    def gather(self, trainer: Any) -> Any:
        """The end-of-run gather of every rank's timings and the user-module measures'
        counts (collectives), before the calibration, which may leave the group."""
        from ..clocks.timing import agree

        faults = self.cfg.faults
        if faults.exit_rank == trainer.global_rank and faults.exit_at == "gather":
            os._exit(1)
        from ..clocks.model_state import rank_memory

        diag = self.diag
        extra = diag.mine(trainer) if diag else {}
        extra["model_state"] = rank_memory(trainer)
        if self.profile is not None:
            extra["profile"] = self.profile.mine()
        agreed = agree(trainer, self.timing.t, self.node, extra)
        if self.user is not None:
            self.user.counted = self.user.counter.agree(trainer)
        return agreed

    def end_of_training(self, trainer: Any) -> Any:
        """Every rank's timings, agreed: gathered at training's end (before the diagnosis'
        calibration) when training ended there; here when it stopped early."""
        if self.diag is not None:
            self.diag.before.stop_sampler()  # a run stopped early never reached on_train_end
        return (self.diag.breakdown.gathered if self.diag is not None else None) or self.gather(
            trainer
        )


def _profile_capture(
    cfg: TrainConfig, job: Job, timing: Any, diag: DiagnosisCallbacks | None, run_dir: Path
) -> Any:
    """The profiler's capture, holding the TimingCallback's warm-up open; None when off."""
    if cfg.trainer.profile.steps <= 0:
        return None
    from ..profile.capture import ProfileCapture

    capture = ProfileCapture(
        cfg.trainer.profile,
        run_dir=run_dir,
        breakdown=diag.breakdown if diag is not None else None,
        steps_per_call=1 if job.user_workload else cfg.trainer.steps_per_call,
    )
    timing.hold = capture
    return capture


def _epoch_rate(metrics: Mapping[str, float], global_batch: int) -> float:
    return record.rate(metrics["epoch_steps"] * global_batch, metrics["epoch_time_s"])


class UserMeasures:
    """What a user's module is measured with, since it keeps no books for scalescope:
    samples counted from its loader, validation metrics from what it logs, and (without its
    own ``flops_per_sample()``) FLOPs measured once before the clock starts."""

    def __init__(self, counter: Any, history: Any, probe: Any, passed_to: str | None) -> None:
        self.counter, self.history, self.probe = counter, history, probe
        self.passed_to = passed_to
        """The class scalescope gave ``batch_size`` to, or None."""
        self.counted: Any = None  # set on every rank after training (counter.agree)

    @classmethod
    def create(
        cls, model: Any, timing: Any, passed_to: str | None, trainer_cfg: Any
    ) -> UserMeasures:
        from ...workloads.flops_probe import FlopsProbe
        from ...workloads.user_measurement import SampleCounter, ValHistory

        def first_step() -> str | None:
            """Why the first real step may not be counted where the copy cannot run: it must
            be warm-up (outside the steady state: the clock has resolved it by then, and set
            0 where there is none), with nothing compiled under the counter."""
            if trainer_cfg.compile:
                return "trainer.compile is on"
            if timing.t.warmup_steps == 0:
                return "it is timed (no warm-up)"
            return None

        probe = None if hasattr(model, "flops_per_sample") else FlopsProbe(first_step)
        return cls(SampleCounter(lambda: timing.t.warmup_steps), ValHistory(), probe, passed_to)

    def before_timing(self) -> list[Any]:
        # Hooks run in list order: the probe measures before the TimingCallback's clock starts
        # (same on_train_start hook), and the history's host read stays in validation time.
        return [c for c in (self.probe, self.history) if c is not None]

    def after_timing(self) -> list[Any]:
        return [self.counter]  # reads the warm-up stamp the TimingCallback just made


class DiagnosisCallbacks:
    """The diagnosis' callbacks (see :mod:`..diagnosis.section`): the all-reduce baseline and NVML
    sampler before the training clock starts, the step-time breakdown after it."""

    def __init__(self, before: Any, breakdown: Any, cfg: TrainConfig) -> None:
        self.before, self.breakdown, self.cfg = before, breakdown, cfg

    @classmethod
    def create(
        cls, cfg: TrainConfig, timing: Any, topo: Topology, node: str
    ) -> DiagnosisCallbacks | None:
        if not cfg.diagnosis.enabled:
            return None
        from ..diagnosis.section import BeforeTiming
        from ..diagnosis.step_breakdown import StepBreakdown

        before = BeforeTiming(
            cfg.diagnosis,
            local_rank=topo.local_rank,
            node=node,
            timings=timing.t,
            faults=cfg.faults,
        )
        breakdown = StepBreakdown(
            cfg.diagnosis,
            timing.t,
            cfg.faults,
            passes_per_step=resolve_batch(cfg.trainer, topo.world_size).accumulate_grad_batches,
        )
        return cls(before, breakdown, cfg)

    def before_timing(self) -> list[Any]:
        return [self.before]

    def after_timing(self) -> list[Any]:
        return [self.breakdown]

    def mine(self, trainer: Any) -> dict[str, Any]:
        from ..clocks.timing import rank_steady_s

        t = self.breakdown.t
        # Steps of the complete epochs after the warm-up: what rank_steady_s covers (a run
        # stopped by SIGTERM ends inside an epoch that no figure counts).
        done = sum(t.epoch_steps)
        steady_steps = done - t.warmup_steps if t.warmup_steps is not None else None
        out: dict[str, Any] = {
            "diagnosis": self.breakdown.mine(rank_steady_s(t), steady_steps),
            "nvml": self.before.nvml,
        }
        return out

    def section(
        self, agreed: Any, steady_steps: int | None, per_device_batch_size: int
    ) -> dict[str, Any]:
        from ..diagnosis.section import assemble, merge_nvml

        return assemble(
            per_rank=agreed.per_rank,
            steady_steps=steady_steps,
            per_device_batch_size=per_device_batch_size,
            allreduce=self.before.allreduce,
            nvml=merge_nvml([p.get("nvml") for p in agreed.per_rank]),
            calibration=self.breakdown.calibration,
            calibration_steps=self.cfg.diagnosis.calibration_steps,
            fsdp_collectives=self.before.baselines.get("fsdp_collectives"),
        )


def diagnosis_off() -> dict[str, Any]:
    from ..diagnosis.section import off

    return off("diagnosis.enabled=false")
