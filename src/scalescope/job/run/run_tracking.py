"""What a job tells Comet when it starts (rank 0 only): the experiment's name, tags,
parameters and others, from the config, the identity and the library versions."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ... import record
from ...config import TrainConfig
from .record_build import say
from .topology import Topology

if TYPE_CHECKING:
    from ..tracking.comet_log import Tracker


def start_run_tracking(
    cfg: TrainConfig, topo: Topology, ident: record.Identity, versions: Mapping[str, Any]
) -> Tracker:
    """Rank 0 starts the experiment and says how it tracks; the other ranks hold the no-op
    tracker."""
    from ..tracking.comet import start_tracking
    from ..tracking.comet_log import Tracker

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
        say(topo, line)
    return tracker


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
