"""A job's start, before anything trains: where this rank runs and what it trains, checked
(:func:`plan_job`), then the process it trains in (:func:`settle_process`).

Light to import: torch and Lightning are imported inside the functions, so ``--help`` and
config errors answer at once.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from ...config import (
    Resolved,
    TrainConfig,
    check_one_step,
    check_workload,
    resolve_batch,
    shard_size,
)
from ...errors import TopologyError
from ...procinfo import core_sharing, usable_cores
from ...workloads import is_user
from . import topology
from .children import StartedRanks, start_local_ranks
from .topology import Topology


@dataclass(frozen=True)
class Job:
    """What this rank trains, and where."""

    topo: Topology
    batch: Resolved
    params: Any
    """The workload's validated parameters."""
    user_workload: bool
    """An import-path workload: a user's own module."""
    resolved: Any
    """What checking the workload resolved (:func:`scalescope.config.check_workload`)."""
    accelerator: str
    started: StartedRanks | None
    """A plain local run's other ranks, started by this one (rank 0)."""


def plan_job(cfg: TrainConfig) -> Job:
    """Where this rank runs and what it trains, checked before anything starts; a plain local
    run's other ranks started (they import Lightning while this one does)."""
    topo = topology.detect(cfg.trainer.devices, cfg.trainer.num_nodes)
    batch = resolve_batch(cfg.trainer, topo.world_size)
    params = cfg.workload_params()
    check_one_step(params, batch.global_batch_size)
    user_workload = is_user(cfg.workload_name)
    # Before anything starts: an import-path workload's classes imported and checked, an
    # accumulation that must divide the per-device batch.
    resolved = check_workload(cfg, batch)
    shard_size(cfg, topo.num_nodes, topo.devices_per_node)
    topology.export_for_lightning(topo)
    if topo.world_size > 1:  # seconds to a line that says what to set, not a silent hang
        from .rendezvous import check, target

        rv = target(topo.launcher)
        if rv is not None:
            node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
            check(rv, rank=topo.global_rank, node=node)
    accelerator = _accelerator(cfg.trainer.accelerator, topo)  # imports torch
    warn_core_sharing(topo, accelerator)
    # Every rank names the same run: ranks 1..N-1 inherit the job id.
    os.environ.setdefault("SCALESCOPE_JOB_ID", topo.job_id)
    # A plain local run's other ranks start now, and import Lightning while this one does.
    started = start_local_ranks(topo.world_size) if topo.launcher == "local" else None
    return Job(topo, batch, params, user_workload, resolved, accelerator, started)


def settle_process(setting: int | str, topo: Topology, accelerator: str) -> int:
    """Lightning imported, the messages that say nothing about this run silenced, and this
    process's intra-op threads set (``setting``: ``trainer.threads_per_process``); returns
    them."""
    import lightning  # noqa: F401  -- its import sets its loggers' level: quieted after it
    import torch

    _quiet_known_noise(topo)
    threads = _threads(setting, topo, accelerator)
    torch.set_num_threads(threads)
    return threads


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
    return max(1, usable_cores() // topo.devices_per_node)


def warn_core_sharing(topo: Topology, accelerator: str) -> None:
    """One line on stderr, from rank 0, when a CPU run puts more processes on a node than it
    has cores: the report would otherwise blame the lost efficiency on compute."""
    if accelerator != "cpu" or not topo.is_rank_zero:
        return
    note = core_sharing(topo.devices_per_node, _node_cores(topo))
    if note is not None:
        print(
            f"scalescope: warning: trainer.devices={topo.devices_per_node}: {note}",
            file=sys.stderr,
            flush=True,
        )


def _node_cores(topo: Topology) -> int:
    """Cores the node's ranks share: under Slurm the job's on this node (a task bound to its
    own cores sees only those), else this process's, which a plain run's ranks inherit."""
    on_node = os.environ.get("SLURM_CPUS_ON_NODE", "")
    if topo.launcher == "slurm" and on_node.isdigit():
        return int(on_node)
    return usable_cores()


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
