"""``scalescope train`` / ``python -m scalescope.train``: one job, one result record.

Data flow: validated config -> topology (from the launcher's environment) -> Lightning
Trainer + TimingCallback -> timings agreed by all ranks -> one ResultRecord, printed by
rank 0 behind the record marker and written atomically to the run directory.

torch and lightning are imported inside :func:`run_training`, so ``--help`` and config
errors answer at once.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import math
import os
import platform
import socket
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .. import __version__, record
from ..config import (
    TrainConfig,
    TrainerConfig,
    check_one_step,
    check_workload,
    load_train_config,
    parse_overrides,
    resolve_batch,
)
from ..errors import SameOnEveryRankError, TopologyError
from ..procinfo import process_start_unix
from ..workloads import is_user
from . import topology
from .children import StartedRanks, adopting_ddp, start_local_ranks, take_over_from_observer
from .topology import Topology


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", help="train config YAML (default: built-in defaults)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="override config keys, e.g. trainer.max_epochs=3 workload.hidden_sizes=[128,64]",
    )
    parser.add_argument(
        "--env-overrides",
        metavar="VAR",
        help="also apply the key=value pairs (space-separated) of this environment variable, "
        "before the command line's, and name it in errors (the sbatch scripts pass "
        "SCALESCOPE_OVERRIDES)",
    )


def run(args: argparse.Namespace) -> int:
    layers = []
    if args.env_overrides:
        words = os.environ.get(args.env_overrides, "").split()
        layers.append((args.env_overrides, parse_overrides(words)))
    cfg = load_train_config(args.config, args.overrides, layers=layers)
    try:
        run_training(cfg)
    except (KeyboardInterrupt, SameOnEveryRankError):
        # Every rank exits non-zero on purpose (Ctrl-C 130, SIGTERM 143, a check that every
        # rank fails alike 2): rank 0 of a local run ends its child ranks itself, or
        # Lightning's observer, seeing a child's non-zero exit, would SIGKILL this process
        # while it still tears down (see children.py).
        take_over_from_observer()
        raise
    return 0


EXIT_STOPPED = 143
"""Exit status of a run stopped early by SIGTERM (128 + 15, what the signal itself gives):
it did not train what it was asked to, so it never exits 0, and its record says why."""


class TrainingStopped(SameOnEveryRankError):
    """Training stopped before the end (Slurm's SIGTERM) at a step every rank agreed on; the
    record, if any, was written. Rank 0 says it for all."""

    exit_code = EXIT_STOPPED


def _say(topo: Topology, message: str) -> None:
    """Human-readable log lines: rank 0 only, flushed so they interleave in order."""
    if topo.is_rank_zero:
        print(f"scalescope: {message}", flush=True)


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


def _unique_dir(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``...: never reuse an earlier run's directory."""
    candidate, n = base, 1
    while True:
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base.with_name(f"{base.name}-{n}")


def _code_version() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        commit = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{__version__}+g{commit}" if commit else __version__


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _threads(setting: int | str, topo: Topology, accelerator: str) -> int:
    """Intra-op threads per process.

    On the CPU a "device" is one core: a 1-process baseline given every core would not be
    comparable with N processes of one core each, and on a shared machine idle OpenMP
    threads spinning against other jobs made 1-process runs up to 20x slower.
    """
    if setting != "auto":
        return int(setting)
    if os.environ.get("SLURM_CPUS_PER_TASK"):
        return max(1, int(os.environ["SLURM_CPUS_PER_TASK"]))
    if accelerator == "cpu":
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // topo.devices_per_node)


def _accelerator(requested: str, topo: Topology) -> str:
    import torch

    has_cuda = torch.cuda.is_available()
    if requested == "gpu" and not has_cuda:
        raise TopologyError(
            "trainer.accelerator=gpu but no CUDA GPU is visible (torch.cuda.is_available() is "
            "False); use trainer.accelerator=cpu or request GPUs (--gpus-per-node)"
        )
    accelerator = "gpu" if requested == "gpu" or (requested == "auto" and has_cuda) else "cpu"
    if accelerator == "gpu" and topo.launcher != "slurm":
        visible = torch.cuda.device_count()
        if topo.devices_per_node > visible:
            raise TopologyError(
                f"trainer.devices={topo.devices_per_node} but only {visible} GPU(s) are visible"
            )
    return accelerator


def _versions() -> dict[str, str | None]:
    import lightning
    import torch

    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            nccl = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "scalescope": _code_version(),
    }


def _experiment_name(cfg: TrainConfig, topo: Topology) -> str:
    suffix = f"-r{topo.restart_count}" if topo.restart_count else ""
    return f"{cfg.name}-{topo.num_nodes}n{topo.devices_per_node}d-{topo.job_label}{suffix}"


def _tracking_inputs(
    cfg: TrainConfig,
    topo: Topology,
    ident: record.Identity,
    versions: Mapping[str, Any],
    node_list: str,
) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    tags = [
        f"world{topo.world_size}",
        f"nodes{topo.num_nodes}",
        cfg.trainer.precision,
        cfg.trainer.scaling,
        cfg.workload_name,
    ]
    if cfg.sweep_id:
        tags.append(f"sweep:{cfg.sweep_id}")
    resolved = cfg.to_dict()
    params: dict[str, Any] = {
        "world_size": topo.world_size,
        "nodes": topo.num_nodes,
        "devices_per_node": topo.devices_per_node,
        "per_device_batch_size": ident.per_device_batch_size,
        "global_batch_size": ident.global_batch_size,
        "precision": cfg.trainer.precision,
        "scaling_mode": cfg.trainer.scaling,
        "max_epochs": cfg.trainer.max_epochs,
        "max_steps": cfg.trainer.max_steps,
        "seed": cfg.trainer.seed,
        "accelerator": ident.accelerator,
        "workload": cfg.workload_name,
        "code_version": versions.get("scalescope"),
    }
    params.update({f"workload.{k}": v for k, v in resolved["workload"].items() if k != "name"})
    others = {
        "run_id": ident.run_id,
        "job_id": ident.job_id,
        "launcher": ident.launcher,
        "node_list": node_list,
        "sweep_id": cfg.sweep_id,
        "run_dir": ident.run_dir,
        **{f"version.{k}": v for k, v in versions.items()},
    }
    return tags, params, others


def run_training(cfg: TrainConfig) -> record.ResultRecord | None:
    """Train ``cfg`` in this process (one rank). Returns the record on rank 0, else None."""
    process_start = process_start_unix()
    topo = topology.detect(cfg.trainer.devices, cfg.trainer.num_nodes)
    batch = resolve_batch(cfg.trainer, topo.world_size)
    params = cfg.workload_params()
    check_one_step(params, batch.global_batch_size)
    user_workload = is_user(cfg.workload_name)
    # Before anything starts: an import-path workload's classes imported and checked, an
    # accumulation that must divide the per-device batch.
    resolved = check_workload(cfg, batch)
    topology.export_for_lightning(topo)
    if topo.world_size > 1:  # seconds to a line that says what to set, not a silent hang
        from .rendezvous import check, target

        rv = target(topo.launcher)
        if rv is not None:
            node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
            check(rv, rank=topo.global_rank, node=node)
    accelerator = _accelerator(cfg.trainer.accelerator, topo)  # imports torch
    # Every rank names the same run: ranks 1..N-1 inherit the job id.
    os.environ.setdefault("SCALESCOPE_JOB_ID", topo.job_id)
    # A plain local run's other ranks start now, and import Lightning while this one does.
    started = start_local_ranks(topo.world_size) if topo.launcher == "local" else None

    import lightning as L
    import torch
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from ..workloads import build_workload
    from .faults import fault_callbacks
    from .preemption import StopOnSignal
    from .timing import TimingCallback, agree
    from .tracking import Tracker, start_tracking

    _quiet_known_noise(topo)
    threads = _threads(cfg.trainer.threads_per_process, topo, accelerator)
    torch.set_num_threads(threads)

    run_dir = Path(cfg.output_dir) / "runs" / cfg.name / topo.run_id
    if topo.is_rank_zero:
        run_dir = _unique_dir(run_dir)
    ident = record.Identity(
        run_id=topo.run_id,
        job_id=topo.job_id,
        array_job_id=topo.array_job_id,
        array_task_id=topo.array_task_id,
        restart_count=topo.restart_count,
        launcher=topo.launcher,
        config_name=cfg.name,
        workload=cfg.workload_name,
        scaling_mode=cfg.trainer.scaling,
        precision=cfg.trainer.precision,
        accelerator=accelerator,
        nodes=topo.num_nodes,
        devices_per_node=topo.devices_per_node,
        world_size=topo.world_size,
        per_device_batch_size=batch.per_device_batch_size,
        global_batch_size=batch.global_batch_size,
        sweep_id=cfg.sweep_id,
        run_dir=str(run_dir),
        started_at=_utc(process_start),
        cluster=cfg.cluster or topo.cluster_name or "local",
        repeat_index=cfg.repeat_index,
        run_uuid=uuid.uuid4().hex,
        accumulate_grad_batches=batch.accumulate_grad_batches,
    )
    if topo.is_rank_zero:
        print(record.encode(record.StartEvent(ident)), flush=True)
    _say(
        topo,
        f"run {ident.run_id}: {cfg.name} on {topo.num_nodes} node(s) x "
        f"{topo.devices_per_node} {accelerator} device(s) = world {topo.world_size}, "
        f"batch {batch.per_device_batch_size}/device {batch.global_batch_size} global "
        f"({cfg.trainer.scaling} scaling)"
        + (
            f" in {batch.accumulate_grad_batches} micro-batches of {batch.micro_batch_size}"
            if batch.accumulate_grad_batches > 1
            else ""
        )
        + f", precision {cfg.trainer.precision}, "
        f"run dir {run_dir}",
    )

    versions = _versions()
    tracker = Tracker("not rank 0")  # only rank 0 tracks; the others hold the no-op tracker
    if topo.is_rank_zero:
        tags, tparams, others = _tracking_inputs(
            cfg, topo, ident, versions, os.environ.get("SLURM_JOB_NODELIST", socket.gethostname())
        )
        tracker, line = start_tracking(
            cfg.tracking,
            output_dir=cfg.output_dir,
            experiment_name=_experiment_name(cfg, topo),
            tags=tags,
            params=tparams,
            others=others,
        )
        _say(topo, line)

    try:
        L.seed_everything(cfg.trainer.seed, workers=False, verbose=False)
        model, datamodule = build_workload(
            cfg.workload_name,
            params,
            batch_size=batch.per_device_batch_size,
            seed=cfg.trainer.seed,
            steps_per_call=cfg.trainer.steps_per_call,
            accumulate_grad_batches=batch.accumulate_grad_batches,
        )
        if user_workload and batch.accumulate_grad_batches > 1:
            _check_accumulates(model, batch.accumulate_grad_batches, topo.global_rank)
        timing = TimingCallback(
            process_start=process_start,
            log_every_n_steps=cfg.trainer.log_every_n_steps,
            warmup_steps=cfg.trainer.warmup_steps,
            on_loss=lambda v, step, ep: tracker.log_metrics({"train_loss": v}, step=step, epoch=ep),
            on_epoch=lambda m, step, ep: tracker.log_metrics(
                {**m, "samples_per_s": _epoch_rate(m, batch.global_batch_size)},
                step=step,
                epoch=ep,
            ),
        )
        stop = StopOnSignal()
        measures = (
            _UserMeasures.create(model, timing, resolved.batch_size_passed_to)
            if user_workload
            else None
        )
        node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        diag = _Diagnosis.create(cfg, timing, topo, node)
        from .compiling import CompileClock, CompileForward

        compile_clock = CompileClock(
            timing.t, backend=cfg.trainer.compile_backend if cfg.trainer.compile else None
        )

        def gather(trainer: Any) -> Any:
            """The end-of-run gather of every rank's timings and the user-module measures'
            counts (collectives), before the calibration, which may leave the group."""
            if cfg.faults.exit_rank == trainer.global_rank and cfg.faults.exit_at == "gather":
                os._exit(1)
            agreed = agree(trainer, timing.t, node, diag.mine(trainer) if diag else None)
            if measures is not None:
                measures.counted = measures.counter.agree(trainer)
            return agreed

        if diag is not None:
            diag.breakdown.gather = gather
        trainer = build_trainer(
            cfg.trainer,
            topo,
            accelerator=accelerator,
            run_dir=run_dir,
            callbacks=[
                *(diag.before_timing() if diag else []),
                *(measures.before_timing() if measures else []),
                *([CompileForward(cfg.trainer.compile_backend)] if cfg.trainer.compile else []),
                *fault_callbacks(cfg.faults),
                timing,
                compile_clock,
                *(measures.after_timing() if measures else []),
                *(diag.after_timing() if diag else []),
                stop,
            ],
            started=started,
            # A user's module brings plain DataLoaders: Lightning gives each rank its shard,
            # and accumulates its gradients (built-ins accumulate in their own step loop).
            **(
                {
                    "use_distributed_sampler": True,
                    "accumulate_grad_batches": batch.accumulate_grad_batches,
                }
                if user_workload
                else {}
            ),
        )
        try:
            trainer.fit(model, datamodule=datamodule)
        except SIGTERMException:  # a SystemExit: caught first
            # Every rank stopped at the same step (StopOnSignal): they can still agree on
            # the timings of the epochs they completed and write a record that says why.
            if stop.reason is None:
                raise
            if timing.t.train_end_unix != timing.t.train_end_unix:  # NaN: never reached
                timing.t.train_end_unix = time.time()
        except SystemExit:
            # Lightning answers Ctrl-C with a graceful shutdown and sys.exit(1); report it as
            # what it is (the CLI prints one line and exits 130). No record is written.
            if trainer.interrupted:
                raise KeyboardInterrupt from None
            raise
        if trainer.global_step == 0 and stop.reason is None:  # a stream that yielded nothing
            raise SameOnEveryRankError(
                f"the training loader of {_loader_owner(trainer)} yielded no "
                "batch: nothing was trained",
                rank=trainer.global_rank,
            )
        if diag is not None:
            diag.before.stop_sampler()  # a run stopped early never reached on_train_end
        # Gathered at training's end (before the diagnosis' calibration) when training
        # ended there; here when it stopped early.
        agreed = (diag.breakdown.gathered if diag is not None else None) or gather(trainer)
        result = None
        if topo.is_rank_zero:
            if measures is not None and measures.probe is not None and measures.probe.problem:
                _say(topo, f"FLOPs per sample not measured ({measures.probe.problem})")
            result = _result(
                cfg, ident, agreed, timing.t, datamodule, model, versions, trainer, measures
            )
            result = replace(
                result,
                diagnosis=(
                    diag.section(agreed, result.steady_steps, result.identity.per_device_batch_size)
                    if diag
                    else _diagnosis_off()
                ),
            )
            tracker.log_result(result.to_dict())
            tracker.end()  # before info(): whether the archive was completed belongs in it
            result = replace(
                result,
                tracking=tracker.info(),
                threads_per_process=threads,
                stop_reason=stop.reason,
                compile=compile_clock.section(cfg.trainer.compile),
            )
            record.write_json_atomic(run_dir / "result.json", result.to_dict())
            print(record.encode(result), flush=True)
            for warning in [
                *(result.batch or {}).get("warnings", []),
                *(result.compile or {}).get("warnings", []),
            ]:
                _say(topo, f"warning: {warning}")
            _say(topo, _summary_line(result))
        _leave_process_group()
        if stop.reason is not None:
            raise TrainingStopped(
                f"stopped early ({stop.reason}) at step {stop.stopped_at_step}; the record "
                f"covers the {len(agreed.epoch_times_s)} complete epoch(s) before it and says "
                f"stop_reason={stop.reason}",
                rank=topo.global_rank,
            )
        return result
    finally:
        tracker.end()  # no-op when already ended; bounded by tracking.end_timeout_s


def _check_accumulates(model: Any, accumulate: int, rank: int) -> None:
    """Lightning accumulates a user's module's gradients for automatic optimization only: say
    so in one line, before training, instead of its traceback from inside ``fit``."""
    if not model.automatic_optimization:
        raise SameOnEveryRankError(
            f"trainer.accumulate_grad_batches: {type(model).__name__} optimizes manually "
            "(automatic_optimization = False), and Lightning accumulates gradients for "
            "automatic optimization only; accumulate in its training_step and leave "
            f"trainer.accumulate_grad_batches at 1 (got {accumulate})",
            rank=rank,
        )


def _leave_process_group() -> None:
    """All ranks meet, then tear the process group down before the interpreter exits.

    Left to interpreter shutdown, a non-zero rank could abort in the communicator's
    destructor ("terminate called without an active exception") while rank 0 was still
    finishing its Comet archive; srun --kill-on-bad-exit then killed rank 0 too. The
    barrier also keeps the other ranks alive until rank 0 has written its record.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _loader_owner(trainer: Any) -> str:
    """Whose training loader this is: the data module's, else the module's."""
    datamodule = getattr(trainer, "datamodule", None)
    owner = datamodule if datamodule is not None else trainer.lightning_module
    return type(owner).__name__


def _quiet_known_noise(topo: Topology) -> None:
    """Silence messages that say nothing about this run, so real warnings stand out."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # An empty training loader: the run stops with one line that names whose it is.
    warnings.filterwarnings("ignore", message=r".*Total length of .* across ranks is zero.*")
    # Lightning's own all_gather (the user-module measures' agreement) calls a torch function
    # that torch deprecates: nothing the user can act on.
    warnings.filterwarnings(
        "ignore", message=r".*torch\.distributed\.nn\.functional\.all_gather is deprecated.*"
    )
    if topo.launcher != "slurm":
        # Slurm's client tools being installed does not mean this run is a Slurm job.
        warnings.filterwarnings("ignore", message=r".*`srun` command is available.*")


STARTUP_TIMEOUT_S = 120.0
"""The least the start-up rendezvous waits for every rank, whatever the collective timeout."""


def build_trainer(
    trainer_cfg: TrainerConfig,
    topo: Topology,
    *,
    accelerator: str,
    run_dir: Path,
    callbacks: list[Any],
    started: StartedRanks | None = None,
    **overrides: Any,
) -> Any:
    """The Lightning Trainer scalescope trains with (also timed by benchmarks/overhead.py).

    Everything that costs per step and measures nothing is off: logger, progress bar,
    checkpointing, model summary, sanity validation, the distributed sampler (each rank's
    slice comes from the data module).
    """
    import lightning as L
    from lightning.pytorch.plugins.environments import SLURMEnvironment
    from lightning.pytorch.strategies import DDPStrategy

    from .preemption import StopOnSignal

    # Requeue has one owner: submitit or the sbatch script, never Lightning's USR1 handler.
    plugins: Any = [SLURMEnvironment(auto_requeue=False)] if topo.launcher == "slurm" else None
    # The process group's timeout bounds every collective (gloo and NCCL): a dead or hung
    # rank fails the others within it, not after 30 min. The start-up rendezvous waits at
    # least STARTUP_TIMEOUT_S (processes import torch slowly on a loaded node), then the
    # group's timeout is set to the collective one before training.
    collective = dt.timedelta(seconds=trainer_cfg.collective_timeout_s)
    startup = max(collective, dt.timedelta(seconds=STARTUP_TIMEOUT_S))
    ddp = {"gradient_as_bucket_view": True, "timeout": startup}
    strategy: Any = "auto"
    if started is not None:  # ranks 1..N-1 already running (children.start_local_ranks)
        strategy = adopting_ddp(started, **ddp)
    elif topo.world_size > 1:
        strategy = DDPStrategy(**ddp)
    if topo.world_size > 1 and startup != collective:

        class CollectiveTimeout(L.Callback):
            """The group's timeout set to the collective one once the group exists."""

            def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
                import torch.distributed as dist
                from torch.distributed import distributed_c10d

                if dist.is_available() and dist.is_initialized():
                    distributed_c10d._set_pg_timeout(collective)

        callbacks = [CollectiveTimeout(), *callbacks]
    if not any(isinstance(cb, StopOnSignal) for cb in callbacks):
        callbacks = [*callbacks, StopOnSignal()]
    precision = trainer_cfg.precision
    kwargs: dict[str, Any] = {
        "accelerator": accelerator,
        "devices": topo.devices_per_node,
        "num_nodes": topo.num_nodes,
        "strategy": strategy,
        "plugins": plugins,
        "precision": "32-true" if precision == "32" else precision,
        "max_epochs": trainer_cfg.max_epochs,
        "max_steps": trainer_cfg.max_steps or -1,
        "limit_train_batches": trainer_cfg.limit_train_batches,
        "check_val_every_n_epoch": trainer_cfg.val_every_n_epochs,
        "num_sanity_val_steps": 0,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "use_distributed_sampler": False,
        "default_root_dir": str(run_dir),
        "callbacks": callbacks,
    }
    kwargs.update(overrides)
    return L.Trainer(**kwargs)


class _UserMeasures:
    """What a user's module is measured with, since it keeps no books for scalescope:
    samples counted from its loader, validation metrics from what it logs, and (without its
    own ``flops_per_sample()``) FLOPs measured once before the clock starts."""

    def __init__(self, counter: Any, history: Any, probe: Any, passed_to: str | None) -> None:
        self.counter, self.history, self.probe = counter, history, probe
        self.passed_to = passed_to
        """The class scalescope gave ``batch_size`` to, or None."""
        self.counted: Any = None  # set on every rank after training (counter.agree)

    @classmethod
    def create(cls, model: Any, timing: Any, passed_to: str | None) -> _UserMeasures:
        from ..workloads.user_job import FlopsProbe, SampleCounter, ValHistory

        probe = None if hasattr(model, "flops_per_sample") else FlopsProbe()
        return cls(SampleCounter(lambda: timing.t.warmup_steps), ValHistory(), probe, passed_to)

    def before_timing(self) -> list[Any]:
        # Hooks run in list order: the probe measures before the TimingCallback's clock starts
        # (same on_train_start hook), and the history's host read stays in validation time.
        return [c for c in (self.probe, self.history) if c is not None]

    def after_timing(self) -> list[Any]:
        return [self.counter]  # reads the warm-up stamp the TimingCallback just made


class _Diagnosis:
    """The diagnosis' callbacks (see :mod:`.diagnosis`): the all-reduce baseline and NVML
    sampler before the training clock starts, the step-time breakdown after it."""

    def __init__(self, before: Any, breakdown: Any, cfg: TrainConfig) -> None:
        self.before, self.breakdown, self.cfg = before, breakdown, cfg

    @classmethod
    def create(cls, cfg: TrainConfig, timing: Any, topo: Topology, node: str) -> _Diagnosis | None:
        if not cfg.diagnosis.enabled:
            return None
        from .diagnosis import BeforeTiming
        from .step_breakdown import StepBreakdown

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
        from .timing import rank_steady_s

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
        from .diagnosis import assemble, merge_nvml

        return assemble(
            per_rank=agreed.per_rank,
            steady_steps=steady_steps,
            per_device_batch_size=per_device_batch_size,
            allreduce=self.before.allreduce,
            nvml=merge_nvml([p.get("nvml") for p in agreed.per_rank]),
            calibration=self.breakdown.calibration,
            calibration_steps=self.cfg.diagnosis.calibration_steps,
        )


def _diagnosis_off() -> dict[str, Any]:
    from .diagnosis import off

    return off("diagnosis.enabled=false")


def _epoch_rate(metrics: Mapping[str, float], global_batch: int) -> float:
    return record.rate(metrics["epoch_steps"] * global_batch, metrics["epoch_time_s"])


def _result(
    cfg: TrainConfig,
    ident: record.Identity,
    agreed: Any,
    timings: Any,
    datamodule: Any,
    model: Any,
    versions: Mapping[str, str | None],
    trainer: Any,
    measures: _UserMeasures | None = None,
) -> record.ResultRecord:
    """Rank 0's record from the agreed timings (called after torch is imported).

    A built-in workload's samples are steps x global batch (its batches are all full); a
    user's module's are the samples its loaders yielded, counted on every rank and summed.
    """
    import torch

    from ..workloads.user_job import measured_batch
    from .hardware import mfu, peak_entry_label, peak_flops
    from .timing import loader_steps, median_step_time

    steps = int(trainer.global_step)
    train_time = sum(agreed.epoch_times_s)
    counted = measures.counted if measures is not None else None
    batch_section = None
    if measures is not None and counted is not None:
        ident, batch_section = measured_batch(
            ident, counted, measures.passed_to, trainer.train_dataloader
        )
    samples = counted.train_samples if counted is not None else steps * ident.global_batch_size
    rate = record.rate(samples, train_time)
    per_device = rate / ident.world_size
    # Known before the epoch ran (a length, limit_train_batches), else what the longest
    # epoch ran: a stream without a length ends its epochs where it ends.
    steps_per_epoch = loader_steps(trainer) or max(agreed.epoch_steps, default=0)
    # Mean epoch times over complete epochs only (max_steps may cut the last one short).
    full = [
        t
        for t, n in zip(agreed.epoch_times_s, agreed.epoch_steps, strict=True)
        if n == steps_per_epoch
    ] or agreed.epoch_times_s
    # A run stopped in its first epoch has no complete epoch: its times are NaN, not zero.
    mean_epoch = sum(full) / len(full) if full else math.nan
    warmup = agreed.warmup_steps
    step_time = median_step_time(timings.step_windows, warmup) if warmup is not None else None
    steady_s = agreed.steady_time_s
    steady_steps = steps - warmup if steady_s is not None and warmup is not None else None
    steady_samples: int | None = None
    if steady_s is not None and steady_steps is not None:
        steady_samples = steady_steps * ident.global_batch_size
        if counted is not None:
            warm = counted.warmup_samples
            steady_samples = counted.train_samples - warm if warm is not None else None
    steady_rate = (
        record.rate(steady_samples, steady_s)
        if steady_s is not None and steady_samples is not None
        else None
    )
    steady_per_device = steady_rate / ident.world_size if steady_rate is not None else None
    history = measures.history.history if measures is not None else model.val_history
    losses = [h[1] for h in history if h[1] is not None]
    accs = [h[2] for h in history if h[2] is not None]
    device = trainer.strategy.root_device
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    flops: float | None = None
    flops_source: str | None = None
    if hasattr(model, "flops_per_sample"):
        flops, flops_source = float(model.flops_per_sample()), "module"
    elif measures is not None and measures.probe is not None:
        flops = measures.probe.flops_per_sample
        flops_source = "measured" if flops is not None else None
    return record.ResultRecord(
        identity=ident,
        node_names=agreed.node_names,
        device_name=device_name,
        train_samples=counted.first_epoch_samples if counted else datamodule.num_train,
        val_samples=counted.val_samples if counted else datamodule.num_val,
        epochs=len(agreed.epoch_times_s),
        steps=steps,
        steps_per_epoch=steps_per_epoch,
        setup_time_s=agreed.setup_time_s,
        train_time_s=train_time,
        val_time_s=agreed.val_time_s,
        job_time_s=agreed.job_time_s,
        epoch_times_s=agreed.epoch_times_s,
        mean_epoch_time_s=mean_epoch,
        mean_epoch_time_excl_first_s=record.mean_excluding_first(full),
        samples_per_s=rate,
        samples_per_s_per_device=per_device,
        step_time_s=step_time,
        predicted_epoch_time_s=step_time * steps_per_epoch if step_time else None,
        val_loss_final=history[-1][1] if history else None,
        val_acc_final=history[-1][2] if history else None,
        val_loss_best=min(losses) if losses else None,
        val_acc_best=max(accs) if accs else None,
        peak_mem_gib=agreed.peak_mem_gib,
        peak_host_rss_gib=agreed.peak_host_rss_gib,
        model_flops_per_sample=flops,
        flops_source=flops_source,  # type: ignore[arg-type]
        mfu=mfu(flops, per_device, device_name, ident.precision),
        warmup_steps=warmup if warmup is not None else steps,
        steady_steps=steady_steps,
        steady_time_s=steady_s,
        steady_samples_per_s=steady_rate,
        steady_samples_per_s_per_device=steady_per_device,
        steady_mfu=(
            mfu(flops, steady_per_device, device_name, ident.precision)
            if steady_per_device is not None
            else None
        ),
        peak_flops_per_s=peak_flops(device_name, ident.precision),
        peak_flops_entry=peak_entry_label(device_name, ident.precision),
        versions=dict(versions),
        config=cfg.to_dict(),
        finished_at=_utc(time.time()),
        batch=batch_section,
    )


def _summary_line(r: record.ResultRecord) -> str:
    excl = (
        f", {r.mean_epoch_time_excl_first_s:.3f} s excl. first"
        if r.mean_epoch_time_excl_first_s is not None
        else ""
    )
    val = f"; val loss {r.val_loss_final:.4f}" if r.val_loss_final is not None else ""
    if val and r.val_acc_final is not None:
        val += f" acc {r.val_acc_final:.4f}"
    mem = f"; peak mem {max(r.peak_mem_gib):.2f} GiB" if r.peak_mem_gib else ""
    steady = (
        f"; steady state {r.steady_samples_per_s:,.0f} samples/s after {r.warmup_steps} "
        "warm-up steps"
        if r.steady_samples_per_s is not None
        else f"; no steady state (warm-up {r.warmup_steps} steps covered all training)"
    )
    stopped = f"STOPPED EARLY ({r.stop_reason}) after {r.steps} steps: " if r.stop_reason else ""
    return (
        f"{stopped}trained {r.epochs} epoch(s), {r.steps} steps in {r.train_time_s:.3f} s "
        f"(mean epoch {r.mean_epoch_time_s:.3f} s{excl}); {r.samples_per_s:,.0f} samples/s "
        f"({r.samples_per_s_per_device:,.0f} per device); setup {r.setup_time_s:.2f} s, "
        f"job {r.job_time_s:.2f} s{steady}{val}{mem}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    from ..cli import main as cli_main

    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
