"""What a job trains and with what: the workload's module (:func:`build_module`) and the
Lightning Trainer, with its strategy, plugins and every callback in its place
(:func:`job_trainer`, on :func:`build_trainer`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config import (
    SHARDED,
    TrainConfig,
    TrainerConfig,
    automatic_asks,
    check_logger,
    shard_size,
    tensorboard_installed,
)
from ...errors import SameOnEveryRankError
from .children import StartedRanks, adopting_ddp
from .topology import Topology

if TYPE_CHECKING:
    from .measure import Measures
    from .startup import Job

STARTUP_TIMEOUT_S = 120.0
"""The least the start-up rendezvous waits for every rank, whatever the collective timeout."""


def build_module(cfg: TrainConfig, job: Job) -> tuple[Any, Any]:
    """The workload's module and data module, seeded. A user's module that optimizes
    manually, asked to accumulate or clip, is refused here, before training."""
    import lightning as L

    from ...workloads import build_workload

    L.seed_everything(cfg.trainer.seed, workers=False, verbose=False)
    model, datamodule = build_workload(
        cfg.workload_name,
        job.params,
        batch_size=job.batch.per_device_batch_size,
        seed=cfg.trainer.seed,
        steps_per_call=cfg.trainer.steps_per_call,
        accumulate_grad_batches=job.batch.accumulate_grad_batches,
        gradient_clip=_gradient_clip(cfg.trainer),
    )
    if job.user_workload:
        from ...workloads.user_import import manual_refusal

        asked = automatic_asks(cfg.trainer, job.batch.accumulate_grad_batches)
        refusal = manual_refusal(model, asked)
        if refusal:  # the check before start-up could not build it on the meta device
            raise SameOnEveryRankError(refusal, rank=job.topo.global_rank)
    if cfg.trainer.strategy in SHARDED:
        _ask_to_shard(model, cfg, job)
    return model, datamodule


def _ask_to_shard(model: Any, cfg: TrainConfig, job: Job) -> None:
    """Under FSDP: a built-in module shards itself in its ``configure_model`` with this
    setting (:class:`~scalescope.workloads.base.WorkloadModule`); a user's module with a wrap
    rule is given a ``configure_model`` that applies it, a rule matching none of its real
    submodules refused in one line (the check before start-up built it on the meta device,
    where some modules cannot be built); a user's own ``configure_model`` shards as it is."""
    from ...workloads import user_sharding
    from ...workloads.sharding import FsdpSetting

    setting = FsdpSetting(
        reshard_after_forward=cfg.fsdp.reshard_after_forward,
        precision=cfg.trainer.precision,
        shard_size=shard_size(cfg, job.topo.num_nodes, job.topo.devices_per_node),
    )
    if not job.user_workload:
        model.fsdp = setting
        return
    rules = cfg.fsdp.wrap
    if not rules:
        return
    missing = user_sharding.unmatched(model, rules)
    if missing:
        raise SameOnEveryRankError(
            "fsdp.wrap: " + user_sharding.missing_text(missing, model, cfg.workload_name),
            rank=job.topo.global_rank,
        )
    root = user_sharding.left_in_root(model, rules)
    if root and user_sharding.calls_forward(type(model)) is False:
        raise SameOnEveryRankError(
            "fsdp.wrap: " + user_sharding.bypass_text(root, cfg.workload_name),
            rank=job.topo.global_rank,
        )
    user_sharding.install_wrap_rule(model, rules, setting)


def _gradient_clip(trainer_cfg: TrainerConfig) -> tuple[float, str] | None:
    """(value, algorithm) where ``trainer.gradient_clip_val`` is set, else None."""
    value = trainer_cfg.gradient_clip_val
    return None if value is None else (float(value), trainer_cfg.gradient_clip_algorithm)


def job_trainer(cfg: TrainConfig, job: Job, run_dir: Path, measures: Measures) -> Any:
    """This job's Trainer. Callbacks run in list order: the stop at SIGTERM first, what must
    not be timed (the diagnosis' baseline and sampler, the FLOPs probe, compilation) before
    the TimingCallback, what reads its stamps after it. The stop's check (an all-reduce in
    ``on_before_optimizer_step``) meets the ranks as the gradient sync leaves them, before any
    other callback's hook there: a rank that a later hook delays (the faults' sleeps, a
    user's callback) is waited for in the next step's timed collective, where the diagnosis
    counts the wait, never in the check, whose time is compute's. The profiler's capture comes
    just before the TimingCallback: its trace is written before the warm-up may end at the
    same step boundary."""
    from ..clocks.compiling import CompileForward
    from ..faults.injection import fault_callbacks

    diag, user = measures.diag, measures.user
    return build_trainer(
        cfg.trainer,
        job.topo,
        accelerator=job.accelerator,
        run_dir=run_dir,
        callbacks=[
            measures.stop,
            *(diag.before_timing() if diag else []),
            *(user.before_timing() if user else []),
            *([CompileForward(cfg.trainer.compile_backend)] if cfg.trainer.compile else []),
            *fault_callbacks(cfg.faults),
            *([measures.profile] if measures.profile is not None else []),
            measures.timing,
            measures.compile_clock,
            *(user.after_timing() if user else []),
            *(diag.after_timing() if diag else []),
        ],
        started=job.started,
        # A user's module brings plain DataLoaders: Lightning gives each rank its shard,
        # and accumulates its gradients (built-ins accumulate in their own step loop). It may
        # need a logger (self.logger, a LearningRateMonitor of its configure_callbacks): what
        # it logs is kept beside the record (MODULE_LOGS).
        **(
            {
                "logger": module_loggers(run_dir, cfg.trainer.logger),
                "log_every_n_steps": cfg.trainer.log_every_n_steps,
                "use_distributed_sampler": True,
                "accumulate_grad_batches": job.batch.accumulate_grad_batches,
                "gradient_clip_val": cfg.trainer.gradient_clip_val,
                "gradient_clip_algorithm": cfg.trainer.gradient_clip_algorithm,
            }
            if job.user_workload
            else {}
        ),
    )


MODULE_LOGS = "module_logs"
"""Where a user's module's CSV logger writes, in its run directory: ``metrics.csv`` (what it
logs with ``self.log``, every ``log_every_n_steps`` of Lightning's, and what its callbacks
log) and ``hparams.yaml`` (its ``save_hyperparameters``)."""
TENSORBOARD_LOGS = "tensorboard"
"""Where TensorBoard's logger writes its event files and ``hparams.yaml``, in the run
directory, where the module has one: beside :data:`MODULE_LOGS`, not in it (the CSV logger
warns that it will delete what it finds in its own folder)."""


def module_loggers(run_dir: Path, choice: str, installed: bool | None = None) -> list[Any]:
    """The loggers a user's module trains with (``trainer.logger``; rank 0 writes): a module
    that reaches for ``self.logger`` or logs through a callback finds the one it would
    under its own Trainer. Lightning's default is TensorBoard's logger where the
    tensorboard or tensorboardX package is ``installed`` (looked up where not given), so
    ``auto`` puts it first there, into ``run_dir/``:data:`TENSORBOARD_LOGS`
    (``self.logger.experiment`` is then its SummaryWriter, as a module written under that
    default expects); the CSVLogger into ``run_dir/``:data:`MODULE_LOGS` comes after it,
    or alone (``csv``, or ``auto`` without either package)."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    installed = tensorboard_installed() if installed is None else installed
    check_logger(choice, installed)
    csv = CSVLogger(save_dir=str(run_dir), name=MODULE_LOGS, version="")
    if choice == "csv" or (choice == "auto" and not installed):
        return [csv]
    board = TensorBoardLogger(save_dir=str(run_dir), name=TENSORBOARD_LOGS, version="")
    return [board, csv]


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

    Everything that costs per step and measures nothing is off: logger (a user's module gets
    one, :func:`module_loggers`), progress bar, checkpointing, model summary, sanity
    validation, the distributed sampler (each rank's slice comes from the data module).
    """
    import lightning as L
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    from ..clocks.preemption import StopOnSignal

    # Requeue has one owner: submitit or the sbatch script, never Lightning's USR1 handler.
    plugins: Any = [SLURMEnvironment(auto_requeue=False)] if topo.launcher == "slurm" else None
    strategy, callbacks = _strategy(trainer_cfg, topo, callbacks, started)
    # The stop at SIGTERM first, whoever built the list (its check must meet the ranks before
    # any other callback's on_before_optimizer_step: see job_trainer); one where none is given.
    stops = [cb for cb in callbacks if isinstance(cb, StopOnSignal)] or [StopOnSignal()]
    callbacks = [*stops, *(cb for cb in callbacks if not isinstance(cb, StopOnSignal))]
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


def _strategy(
    trainer_cfg: TrainerConfig,
    topo: Topology,
    callbacks: list[Any],
    started: StartedRanks | None,
) -> tuple[Any, list[Any]]:
    """DDP on several processes (Lightning's "auto" on one), FSDP2 through Lightning's
    ModelParallelStrategy under ``strategy: fsdp`` at any world size, and ``callbacks`` with the one
    that sets the process group's collective timeout once the group exists, where needed.

    The process group's timeout bounds every collective (gloo and NCCL): a dead or hung
    rank fails the others within it, not after 30 min. The start-up rendezvous waits at
    least STARTUP_TIMEOUT_S (processes import torch slowly on a loaded node), then the
    group's timeout is set to the collective one before training.
    """
    import lightning as L
    from lightning.pytorch.strategies import DDPStrategy

    collective = dt.timedelta(seconds=trainer_cfg.collective_timeout_s)
    startup = max(collective, dt.timedelta(seconds=STARTUP_TIMEOUT_S))
    ddp = {
        "gradient_as_bucket_view": True,
        "timeout": startup,
        "find_unused_parameters": trainer_cfg.find_unused_parameters,
    }
    strategy: Any = "auto"
    if trainer_cfg.strategy in SHARDED:  # on one rank too: the same sharding code runs
        from .sharded_strategy import fsdp_strategy

        strategy = fsdp_strategy(topo.world_size, startup, started)
    elif started is not None:  # ranks 1..N-1 already running (children.start_local_ranks)
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
    return strategy, callbacks
