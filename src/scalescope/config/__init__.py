"""Training config: file -> overrides -> validated :class:`TrainConfig`.

Precedence is command line over file over defaults. Every field documents itself (see
``scalescope config-reference``) and every problem is reported as one line naming the key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Literal

from .. import workloads
from ..errors import ConfigError
from ..faults_config import FaultsConfig
from ..run_length import WARMUP_AUTO_MAX_STEPS
from ..schema import (
    build,
    non_negative,
    option,
    positive,
    to_dict,
)
from .files import OverrideLayers, merge, name_route, parse_overrides, read_yaml

DEFAULT_WORKLOAD = "spiral"
Precision = Literal["32", "bf16-mixed", "16-mixed"]
Strategy = Literal["ddp", "fsdp", "hsdp"]
SHARDED = ("fsdp", "hsdp")
"""The strategies that shard the module with FSDP2's ``fully_shard`` (hsdp: on a 2-D mesh)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ProfileConfig:
    """A torch.profiler trace of a few steps, on the ranks that matter (docs/diagnosis.md,
    "Profiling"). The profiled steps are added to the warm-up, so no timed figure holds them."""

    steps: int = option(
        0,
        help="optimizer steps to capture (at least: whole training calls) after the warm-up "
        "and a short measurement, added to the warm-up so that no timed figure holds them; "
        "one trace per profiled rank in the run directory's traces/; 0 = off",
        check=non_negative,
    )
    ranks: Literal["auto", "node"] = option(
        "auto",
        help="auto = rank 0 and the slowest rank, chosen from a short measurement of every "
        "rank's busy time before the capture (every rank of the first node where it cannot "
        "be measured: diagnosis.enabled=false); node = every rank of the first node",
    )
    record_shapes: bool = option(False, help="record the input shapes of each operator")
    profile_memory: bool = option(False, help="record the memory each operator allocates")


@dataclass(frozen=True)
class TrainerConfig:
    scaling: Literal["strong", "weak"] = option(
        "strong",
        help="strong: batch_size is the global batch, split across ranks (must divide); "
        "weak: batch_size is per device, the global batch grows with the world size",
    )
    batch_size: int = option(256, help="see scaling", check=positive)
    max_epochs: int = option(10, help="epochs to train", check=positive)
    max_steps: int | None = option(
        None,
        help="stop after this many optimizer steps (null = run all epochs); Lightning's count, "
        "in which a module stepping several optimizers by hand (a GAN) takes one per optimizer",
        check=positive,
    )
    limit_train_batches: int | None = option(
        None,
        help="training batches per epoch (Lightning's name; null = the whole loader); with "
        "max_steps, what bounds a training loader that has no length (a streaming data set)",
        check=positive,
    )
    accumulate_grad_batches: int = option(
        1,
        help="micro-batches per optimizer step (Lightning's name): each device's batch (see "
        "scaling) is split into this many micro-batches, gradients summed over them, DDP "
        "synchronising on the last only; it must divide a built-in workload's per-device "
        "batch. A user's module gets Lightning's own accumulation over its loader's batches",
        check=positive,
    )
    gradient_clip_val: float | None = option(
        None,
        help="clip the gradients before each optimizer step (Lightning's name; null = off): "
        "their global norm down to this value (gradient_clip_algorithm: norm), or each "
        "element into [-value, value] (value). Under fsdp and hsdp the norm is of the whole "
        "model's gradients: one more all-reduce a step, of a single number. A user's module "
        "that optimizes by hand clips in its own training_step (self.clip_gradients)",
        check=positive,
    )
    gradient_clip_algorithm: Literal["norm", "value"] = option(
        "norm", help="how trainer.gradient_clip_val clips: norm or value"
    )
    precision: Precision = option(
        "32",
        help="32, bf16-mixed or 16-mixed (16-mixed needs a GPU and DDP); under fsdp, "
        "bf16-mixed also gathers parameters in bf16 and reduces gradients in fp32",
    )
    strategy: Strategy = option(
        "ddp",
        help="ddp: every rank holds the whole model, gradients all-reduced (Lightning's "
        "DDPStrategy); fsdp: FSDP2, parameters, gradients and optimizer state sharded over "
        "the ranks (torch's fully_shard through Lightning's ModelParallelStrategy: each "
        "block, then the root; see the fsdp section); hsdp: FSDP2 on a 2-D mesh, sharded "
        "within a group of fsdp.shard_size ranks (a node's by default) and replicated "
        "across the groups, whose gradient shards are all-reduced",
    )
    find_unused_parameters: bool = option(
        False,
        help="ddp: let a backward leave some parameters without a gradient (a GAN's "
        "alternating passes, a branch not taken), which DDP otherwise refuses; it walks the "
        "graph every step to find them and keeps the buckets it built at construction. fsdp "
        "and hsdp take such a backward as it is and leave this unused (a sweep may cross "
        "strategies with it on)",
    )
    compile: bool = option(
        False,
        help="torch.compile the module's forward when training starts (after the FLOPs "
        "probe, which measures the eager module); compiling happens in the first steps, "
        "inside the warm-up, and the record's compile section says what it cost",
    )
    compile_backend: str = option(
        "inductor",
        help="torch.compile backend with trainer.compile (inductor needs a C++ compiler on "
        "the CPU; aot_eager traces without generating code)",
    )
    seed: int = option(42, help="seed of model initialisation and shuffling")
    accelerator: Literal["auto", "cpu", "gpu"] = option(
        "auto", help="auto picks the GPU when CUDA is available, else the CPU"
    )
    devices: int | Literal["auto"] = option(
        "auto",
        help="processes (devices) per node; auto = from the Slurm allocation, else 1",
        check=positive,
    )
    num_nodes: int | Literal["auto"] = option(
        "auto", help="nodes; auto = from the Slurm allocation, else 1", check=positive
    )
    threads_per_process: int | Literal["auto"] = option(
        "auto",
        help="CPU threads per process; auto = SLURM_CPUS_PER_TASK, else 1 on the CPU (a CPU "
        "device is one core, so scales compare equal resources) and cores / local processes "
        "on GPUs",
        check=positive,
    )
    steps_per_call: int = option(
        8,
        help="optimizer steps per Lightning training_step call (one group of batches); "
        "amortises Lightning's fixed per-call cost, training is identical (built-in workloads "
        "only: a user's module is called once per batch)",
        check=positive,
    )
    log_every_n_steps: int = option(
        50, help="training loss is read (a host sync) and logged every N steps", check=positive
    )
    logger: Literal["auto", "csv", "tensorboard"] = option(
        "auto",
        help="the logger a user's module trains with (the built-in workloads train without "
        "one): auto = Lightning's own default, TensorBoard's where the tensorboard or "
        "tensorboardX package is installed (so that self.logger.experiment.add_histogram "
        "and the like work as under the module's own Trainer), else a CSV file; tensorboard "
        "= TensorBoard's (refused where neither package is installed); csv = the CSV file "
        "alone. The CSV file (module_logs/metrics.csv) is written either way",
    )
    val_every_n_epochs: int = option(1, help="validate every N epochs", check=positive)
    warmup_steps: int | Literal["auto"] = option(
        "auto",
        help="optimizer steps left out of the steady-state (headline) figures; auto = the "
        f"first epoch, or the first {WARMUP_AUTO_MAX_STEPS} steps where an epoch is longer; "
        "0 = none",
        check=non_negative,
    )
    profile: ProfileConfig = option(
        ProfileConfig, help="capture a profiler trace of a few steps (off by default)"
    )
    collective_timeout_s: float = option(
        300.0,
        help="a collective (gradient all-reduce, barrier) that waits longer than this fails "
        "the job: when one rank dies or hangs, the others stop within it instead of "
        "PyTorch's 30 min (10 min for NCCL). The wait for all ranks at start-up is this or "
        "120 s, whichever is longer",
        check=positive,
    )

    def validate(self, where: str) -> None:
        if self.precision == "16-mixed" and self.strategy in SHARDED:
            raise ConfigError(
                f"{where}.precision: 16-mixed is not run with strategy {self.strategy} (it needs a "
                "gradient scaler FSDP2 does not take here); use bf16-mixed or 32"
            )
        if self.precision == "16-mixed" and self.accelerator == "cpu":
            raise ConfigError(
                f"{where}.precision: 16-mixed needs a GPU; use bf16-mixed or 32 on the CPU"
            )


@dataclass(frozen=True)
class FsdpConfig:
    """How ``trainer.strategy: fsdp`` shards the module (FSDP2's ``fully_shard``)."""

    wrap: list[str] | None = option(
        None,
        help="for your own module without a configure_model: the block classes to shard "
        "one by one, as import paths (package.module.Block, torch.nn.Linear: imported, "
        "subclasses match) or class names; every module of those classes is sharded, then "
        "the root. Null = the module's own "
        "configure_model (built-in workloads bring theirs)",
    )
    shard_size: int | None = option(
        None,
        help="under trainer.strategy: hsdp, the ranks that share one shard of the model "
        "(the rest replicate it): null = the devices of a node, so that no shard group spans "
        "nodes; it must divide the world size",
        check=positive,
    )
    reshard_after_forward: bool = option(
        True,
        help="free each block's gathered parameters after its forward and gather them again "
        "before its backward (less memory, one more all-gather per block); false keeps "
        "them until the backward (the root's are kept either way)",
    )


@dataclass(frozen=True)
class TrackingConfig:
    mode: Literal["auto", "online", "offline", "off"] = option(
        "auto",
        help="auto: online when COMET_API_KEY is set, else off; online: like auto, but say so "
        "when the key is missing; offline: write an archive to offline_dir for a later "
        "`comet upload`; off: nothing. COMET_START_ONLINE=false in the environment turns "
        "auto/online into offline. The key is read from the environment only (COMET_API_KEY)",
    )
    project: str = option("scalescope", help="Comet project (one per sweep family)")
    workspace: str | None = option(None, help="Comet workspace (null = the key's default)")
    offline_dir: str | None = option(None, help="offline archives; null = <output_dir>/comet")
    fallback_offline: bool = option(
        True, help="online requested but server unreachable: write an offline archive instead"
    )
    on_rejected_key: Literal["continue", "stop"] = option(
        "continue",
        help="the server rejects the API key: continue = one error line, train untracked; "
        "stop = the job stops before training",
    )
    connect_timeout_s: float = option(
        10.0, help="bound on any wait for the Comet server at start-up", check=positive
    )
    end_timeout_s: float = option(
        60.0,
        help="bound on finishing the experiment at the end (sending queued data online, "
        "writing the archive offline)",
        check=positive,
    )


@dataclass(frozen=True)
class DiagnosisConfig:
    """Where the lost efficiency goes: the step-time breakdown of every rank, the calibration
    windows, the all-reduce baseline and GPU sampling (see docs/diagnosis.md)."""

    enabled: bool = option(
        True,
        help="measure each rank's input wait, compute and communication wait over the "
        "steady-state steps and gather them into the record; false = none of this section",
    )
    calibration_steps: int = option(
        8,
        help="forward+backward passes per calibration window (after training and its "
        "end-of-run gather, outside every timed interval: windows with and without gradient "
        "sync, interleaved; no optimizer step, gradients discarded): a cross-check of the "
        "exposed communication the training steps give; 0 = no calibration",
        check=non_negative,
    )
    calibration_windows: int = option(
        4,
        help="pairs of windows (no_sync, sync), in ABBA order; the cross-check is the median "
        "of the paired differences",
        check=positive,
    )
    calibration_budget_s: float = option(
        3.0,
        help="upper bound on the timed calibration windows: where one forward+backward pass "
        "is slow, fewer passes per window (then fewer pairs) are run; where not even one "
        "pair of one-pass windows fits, the cross-check is skipped with that reason",
        check=positive,
    )
    allreduce_baseline: bool = option(
        True,
        help="before training, time all-reduces (nccl-tests style) from 4 KiB up to the "
        "model's gradient size or 8 MiB, whichever is larger, on the job's own allocation, "
        "and fit latency and bus bandwidth to them (multi-device jobs only)",
    )
    allreduce_budget_s: float = option(
        3.0, help="upper bound on the all-reduce baseline's duration", check=positive
    )
    nvml: bool = option(
        True,
        help="sample each GPU through NVML (utilisation, memory, power, throttle reasons) about "
        "every nvml_interval_s, one sampler per node; null fields with a reason without NVML",
    )
    nvml_interval_s: float = option(1.0, help="NVML sampling interval", check=positive)


@dataclass(frozen=True)
class TrainConfig:
    name: str = option(
        "spiral",
        help="configuration name, used in run directories and reports; where no file or "
        "override sets it, the workload's (your own module's: its class name)",
    )
    workload: dict[str, Any] = option(
        {"name": DEFAULT_WORKLOAD},
        help="`name` of a registered workload plus that workload's parameters, or `name` "
        "the import path package.module:ClassName of your own LightningModule with "
        "`datamodule`, `init_args` and `datamodule_init_args` (see docs/your-module.md)",
    )
    trainer: TrainerConfig = option(TrainerConfig, help="how training runs")
    tracking: TrackingConfig = option(TrackingConfig, help="Comet experiment tracking")
    diagnosis: DiagnosisConfig = option(
        DiagnosisConfig, help="where the lost efficiency goes (step-time breakdown)"
    )
    faults: FaultsConfig = option(FaultsConfig, help="deliberate faults for testing; off")
    fsdp: FsdpConfig = option(FsdpConfig, help="sharding under trainer.strategy: fsdp")
    output_dir: str = option("outputs", help="where run directories, logs and archives go")
    sweep_id: str | None = option(None, help="set by `scalescope sweep`; groups a sweep's runs")
    cluster: str | None = option(
        None,
        help="cluster profile name, set by `scalescope sweep` and the sbatch scripts; null = "
        "Slurm's cluster name, else local",
    )
    repeat_index: int | None = option(
        None, help="set by `scalescope sweep`: which repeat of its shape this run is (0-based)"
    )

    def validate(self, where: str) -> None:
        if not _NAME.match(self.name):
            raise ConfigError(
                f"name: use letters, digits, '.', '_' and '-' only (it names folders), got "
                f"{self.name!r}"
            )
        if "name" not in self.workload:
            raise ConfigError(
                "workload.name: missing; registered: " + ", ".join(sorted(workloads.REGISTRY))
            )

    @property
    def workload_name(self) -> str:
        return str(self.workload["name"])

    def workload_params(self) -> Any:
        params = {k: v for k, v in self.workload.items() if k != "name"}
        return workloads.validate_params(self.workload_name, params)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = to_dict(self)
        # The resolved config carries every workload parameter, defaults included.
        out["workload"] = {"name": self.workload_name, **to_dict(self.workload_params())}
        return out


def default_name(workload: Any) -> str:
    """A configuration's name where none is given: its workload's, a class's name for an
    import path (``pkg.model:Net`` -> ``Net``), as a folder may be named."""
    name = workload.get("name") if isinstance(workload, Mapping) else None
    label = name.rpartition(":")[2] if isinstance(name, str) else ""
    label = re.sub(r"[^A-Za-z0-9_.-]", "-", label).lstrip("._-")
    return label or DEFAULT_WORKLOAD


def load_train_config(
    path: str | os.PathLike[str] | None,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    *,
    overrides_route: str = "the command line",
    layers: OverrideLayers = (),
    routes: OverrideLayers | None = None,
) -> TrainConfig:
    """Defaults <- file <- ``layers`` <- overrides, validated. Errors name the key and where it
    came from (the file, or the override layer that set it), with the closest valid key.
    ``routes``: the layers the overrides were merged from, where they were (a sweep's file
    and command line), to name in place of ``layers`` and the overrides themselves."""
    data = read_yaml(path) if path is not None else {}
    extra = parse_overrides(overrides) if not isinstance(overrides, Mapping) else overrides
    data = merge({"workload": {"name": DEFAULT_WORKLOAD}}, data)
    for _, layer in layers:
        data = merge(data, layer)
    data = merge(data, extra)
    if "name" not in data:
        data = {**data, "name": default_name(data.get("workload"))}
    try:
        cfg = build(TrainConfig, data)
        cfg.workload_params()
    except ConfigError as exc:
        came_by = [*layers, (overrides_route, extra)] if routes is None else routes
        raise name_route(exc, came_by, str(path) if path is not None else None) from None
    return cfg


@dataclass(frozen=True)
class Resolved:
    """Batch sizes for one world size, derived from the scaling mode."""

    per_device_batch_size: int
    """Samples per optimizer step on one device."""
    global_batch_size: int
    accumulate_grad_batches: int = 1

    @property
    def micro_batch_size(self) -> int | None:
        """Samples of one forward/backward pass on one device; None where the accumulation
        does not divide the per-device batch (see :meth:`check_micro_batch`)."""
        k = self.accumulate_grad_batches
        return None if self.per_device_batch_size % k else self.per_device_batch_size // k

    def micro_batch_error(self) -> str:
        return (
            f"trainer.accumulate_grad_batches: {self.accumulate_grad_batches} micro-batches do "
            f"not divide the per-device batch of {self.per_device_batch_size}; pick a divisor "
            "of it (or another trainer.batch_size)"
        )

    def check_micro_batch(self) -> int:
        """The micro-batch a built-in workload splits its batch into; ConfigError where the
        accumulation does not divide it."""
        micro = self.micro_batch_size
        if micro is None:
            raise ConfigError(self.micro_batch_error())
        return micro


def resolve_batch(trainer: TrainerConfig, world_size: int) -> Resolved:
    k = trainer.accumulate_grad_batches
    if trainer.scaling == "weak":
        return Resolved(trainer.batch_size, trainer.batch_size * world_size, k)
    if trainer.batch_size % world_size:
        raise ConfigError(
            f"trainer.batch_size: strong scaling splits the global batch {trainer.batch_size} "
            f"across {world_size} ranks, which does not divide; pick a multiple of {world_size}"
        )
    return Resolved(trainer.batch_size // world_size, trainer.batch_size, k)


def check_workload(cfg: TrainConfig, batch: Resolved) -> Any:
    """Check what the workload is given before anything starts; ConfigError names the key.

    An import-path workload's classes and constructor arguments are imported and checked
    (imports lightning): what :func:`scalescope.workloads.user_import.check` resolved is returned.
    Its constructor that takes a ``batch_size`` is given the micro-batch (Lightning
    accumulates the loader's batches), which the accumulation must then divide; under
    ``trainer.strategy: fsdp`` it brings a ``configure_model`` or a wrap rule that matches
    (:func:`scalescope.workloads.user_sharding.check`); a module that may optimize manually
    (:func:`~scalescope.workloads.user_import.may_optimize_manually`), built on the meta device,
    is not asked to accumulate or clip (:func:`automatic_asks`). A built-in
    workload splits each device's batch into the micro-batches itself: it must divide.
    """
    if workloads.is_user(cfg.workload_name):
        from ..workloads import user_import

        micro = batch.micro_batch_size
        resolved = user_import.check(
            cfg.workload_name,
            cfg.workload_params(),
            batch_size=micro,
            batch_error=None if micro else batch.micro_batch_error(),
        )
        if cfg.trainer.strategy in SHARDED:
            from ..workloads import user_sharding

            user_sharding.check(resolved, cfg.workload_name, cfg.fsdp.wrap, cfg.trainer.strategy)
        check_logger(cfg.trainer.logger)
        asked = automatic_asks(cfg.trainer, batch.accumulate_grad_batches)
        if asked and user_import.may_optimize_manually(resolved.module_cls):
            module = user_import.on_meta(resolved.module_cls, resolved.module_kwargs)
            refusal = None if module is None else user_import.manual_refusal(module, asked)
            if refusal:  # a module not buildable on the meta device: the job checks it
                raise ConfigError(refusal)
        return resolved
    if cfg.fsdp.wrap:
        raise ConfigError(
            f"fsdp.wrap: {cfg.workload_name} is a built-in workload, which names its own "
            "blocks to shard; leave fsdp.wrap unset"
        )
    batch.check_micro_batch()
    return None


def tensorboard_installed() -> bool:
    """Whether Lightning's TensorBoardLogger can write here: the ``tensorboard`` or the
    ``tensorboardX`` package is installed (Lightning's own test for its default logger)."""
    from importlib.util import find_spec

    return any(find_spec(name) is not None for name in ("tensorboard", "tensorboardX"))


def check_logger(choice: str, installed: bool | None = None) -> None:
    """Refuse ``trainer.logger: tensorboard`` where neither package it writes with is
    ``installed`` (looked up where not given), before anything starts."""
    if choice == "tensorboard" and not (
        tensorboard_installed() if installed is None else installed
    ):
        raise ConfigError(
            "trainer.logger: tensorboard needs the tensorboard or tensorboardX package, which "
            "this Python lacks; install one (pip install tensorboardX), or use "
            "trainer.logger=auto or csv"
        )


def automatic_asks(trainer: TrainerConfig, accumulate_grad_batches: int) -> dict[str, Any]:
    """What the config asks of Lightning's automatic optimization for a user's module (keys of
    :data:`scalescope.workloads.user_import.AUTOMATIC_ONLY`, with the values set)."""
    asked: dict[str, Any] = {}
    if accumulate_grad_batches > 1:
        asked["trainer.accumulate_grad_batches"] = accumulate_grad_batches
    if trainer.gradient_clip_val is not None:
        asked["trainer.gradient_clip_val"] = trainer.gradient_clip_val
    return asked


def shard_size(cfg: TrainConfig, num_nodes: int, devices_per_node: int) -> int | None:
    """The ranks that share a shard under ``trainer.strategy: hsdp`` on ``num_nodes`` nodes of
    ``devices_per_node`` (None under another strategy): ``fsdp.shard_size``, else a node's
    devices. ConfigError where it does not divide the world size, or is larger."""
    if cfg.trainer.strategy != "hsdp":
        return None
    world = num_nodes * devices_per_node
    size = cfg.fsdp.shard_size or devices_per_node
    if size > world or world % size:
        raise ConfigError(
            f"fsdp.shard_size: {size} ranks per shard group does not divide the world of "
            f"{world} ranks ({num_nodes} node(s) x {devices_per_node}); pick a divisor of "
            f"{world}, e.g. {devices_per_node}, a node's devices"
        )
    return size


def check_one_step(params: Any, global_batch: int) -> None:
    """Refuse a data set that holds less than one global batch: zero steps measure nothing."""
    train = getattr(params, "train_samples", None)
    if train is not None and train < global_batch:
        names = {f.name for f in fields(params)} if is_dataclass(params) else set()
        key = next(
            (k for k in ("train_samples", "train_sequences", "num_samples") if k in names),
            "num_samples",
        )
        raise ConfigError(
            f"workload.{key}: {train} training samples hold no full global batch of "
            f"{global_batch} (trainer.batch_size); use more samples or a smaller batch"
        )
