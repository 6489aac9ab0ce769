"""What one job of a sweep's shape asks the scheduler for: on Slurm, from the cluster
profile; with the local executor, from this machine (and the profile, when one is given).

The checks here refuse a shape the cluster or this machine cannot hold, and GPUs asked of a
machine without them, before anything is submitted (see
:func:`scalescope.launch.sweep_config.plan_sweep`). torch is imported only to count this
machine's GPUs, and only when a plan could use them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import TrainConfig
from ..errors import ConfigError
from ..schema import option, positive

if TYPE_CHECKING:
    from .cluster import ClusterProfile

DEFAULT_LOCAL_TIMEOUT_MIN = 60
"""Local jobs without a timeout_min anywhere get this, not submitit's 2-minute default."""


@dataclass(frozen=True)
class Shape:
    """A job's size: nodes times tasks per node (the sweep lists them, ``shapes:``)."""

    nodes: int = option(help="nodes of the job", check=positive)
    devices_per_node: int = option(
        help="tasks per node: GPUs, or CPU processes on a CPU cluster", check=positive
    )

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def label(self) -> str:
        return f"{self.nodes}x{self.devices_per_node}"


@dataclass(frozen=True)
class Resources:
    """What one job of a shape asks the scheduler for (units in the names)."""

    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    mem_gb: int | None
    timeout_min: int
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    setup: tuple[str, ...] = ()
    sbatch_extra: tuple[str, ...] = ()
    exclusive: bool = False
    """Whole nodes (``--exclusive``): no other job shares them."""


GpuCounter = Callable[[], int]


def local_gpu_count() -> int:
    """CUDA devices on this machine (imports torch: only asked when a plan could use GPUs)."""
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def slurm_resources(
    timeout_min: int | None, shape: Shape, cfg: TrainConfig, profile: ClusterProfile, where: str
) -> Resources:
    """``timeout_min``: the sweep's own, which wins over the profile's."""
    profile.check_shape(shape.nodes, shape.devices_per_node)
    accelerator = cfg.trainer.accelerator
    if accelerator == "gpu" and not profile.gpus_per_node:
        raise ConfigError(
            f"{where}: trainer.accelerator is gpu but the profile {profile.name!r} has "
            "gpus_per_node: 0 (a CPU cluster)"
        )
    # One GPU per task on a GPU site (auto picks them up); none for CPU runs.
    gpus = shape.devices_per_node if profile.gpus_per_node and accelerator != "cpu" else 0
    return Resources(
        nodes=shape.nodes,
        tasks_per_node=shape.devices_per_node,
        gpus_per_node=gpus,
        cpus_per_task=profile.cpus_per_task,
        mem_gb=profile.mem_gb,
        timeout_min=timeout_min or profile.timeout_min,
        partition=profile.partition,
        account=profile.account,
        qos=profile.qos,
        constraint=profile.constraint,
        setup=tuple(line for line in profile.setup.splitlines() if line.strip()),
        sbatch_extra=tuple(profile.sbatch_extra),
        exclusive=profile.exclusive,
    )


def may_use_gpus(cfg: TrainConfig, profile: ClusterProfile | None) -> bool:
    return cfg.trainer.accelerator != "cpu" or bool(profile and profile.gpus_per_node)


def local_resources(
    timeout_min: int | None,
    shape: Shape,
    cfg: TrainConfig,
    profile: ClusterProfile | None,
    where: str,
    gpus_here: int,
) -> Resources:
    if shape.nodes > 1:
        raise ConfigError(
            f"{where}: the local executor runs on this one machine; remove the shape or "
            "submit with --executor slurm"
        )
    accelerator = cfg.trainer.accelerator
    profile_gpus = accelerator != "cpu" and bool(profile and profile.gpus_per_node)
    if gpus_here == 0 and (accelerator == "gpu" or profile_gpus):
        why = "trainer.accelerator is gpu" if accelerator == "gpu" else "the profile has GPUs"
        raise ConfigError(
            f"{where}: {why} but this machine, where the local executor runs, has no CUDA "
            "device; submit with --executor slurm --cluster <profile>"
        )
    gpus = 0
    if gpus_here and accelerator != "cpu":
        if shape.devices_per_node > gpus_here:
            raise ConfigError(
                f"{where}: {shape.devices_per_node} GPUs per node asked, this machine has "
                f"{gpus_here}"
            )
        # LocalExecutor hides every GPU unless gpus_per_node is set.
        gpus = shape.devices_per_node
    default_timeout = profile.timeout_min if profile else DEFAULT_LOCAL_TIMEOUT_MIN
    return Resources(
        nodes=1,
        tasks_per_node=shape.devices_per_node,
        gpus_per_node=gpus,
        cpus_per_task=profile.cpus_per_task if profile else 1,
        mem_gb=None,
        timeout_min=timeout_min or default_timeout,
    )
