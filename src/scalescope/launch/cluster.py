"""Cluster profiles (configs/clusters/*.yaml): what a site looks like and how a job sets up.

Both launch paths read the same profile: the sbatch scripts in slurm_jobs/ take the
``setup`` block (module loads, venv activation) and run it before ``srun``; the submitit
sweep passes the same lines as ``slurm_setup`` and checks every shape against the limits.

``setup`` must be a YAML literal block (``setup: |``) so that the sbatch scripts can extract
it with awk, without Python or PyYAML on the compute node before the venv is active.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..config.files import read_yaml
from ..errors import ConfigError
from ..schema import build, non_negative, option, positive


@dataclass(frozen=True, kw_only=True)
class ClusterProfile:
    name: str = option(help="short name of the site, shown in reports")
    partition: str | None = option(None, help="Slurm partition (null = the site default)")
    account: str | None = option(None, help="Slurm account to charge (null = none)")
    qos: str | None = option(None, help="Slurm QOS (null = none)")
    gpus_per_node: int = option(
        0,
        help="GPUs per node to request; 0 = CPU tasks (the local test cluster)",
        check=non_negative,
    )
    cpus_per_task: int = option(1, help="CPU cores per task (per device)", check=positive)
    mem_gb: int | None = option(
        None, help="memory per node in GiB (null = site default)", check=positive
    )
    max_nodes: int = option(help="largest node count a sweep may ask for", check=positive)
    max_devices_per_node: int = option(
        help="largest tasks (GPUs, or CPU processes) per node", check=positive
    )
    timeout_min: int = option(30, help="job time limit in minutes", check=positive)
    constraint: str | None = option(None, help="Slurm --constraint (e.g. a100)")
    setup: str = option("", help="shell lines run in the job before training (literal block)")
    sbatch_extra: list[str] = option([], help="extra `#SBATCH` options, e.g. ['--reservation=x']")
    exclusive: bool = option(
        False,
        help="ask Slurm for whole nodes (--exclusive): no other job shares a run's nodes, so "
        "its times are its own; whole nodes are charged and may queue longer",
    )
    max_parallel: int | None = option(
        None,
        help="jobs of a sweep running at once, by Slurm dependencies (null = no limit); 1 "
        "where the nodes share one machine; --max-parallel overrides it",
        check=positive,
    )

    def validate(self, where: str) -> None:
        if self.gpus_per_node and self.gpus_per_node > self.max_devices_per_node:
            raise ConfigError(
                f"gpus_per_node ({self.gpus_per_node}) exceeds max_devices_per_node "
                f"({self.max_devices_per_node})"
            )

    def check_shape(self, nodes: int, devices_per_node: int) -> None:
        """Refuse a sweep shape this cluster cannot hold, before anything is submitted."""
        if nodes > self.max_nodes:
            raise ConfigError(
                f"shape {nodes}x{devices_per_node}: {nodes} nodes exceeds the profile "
                f"{self.name!r} max_nodes={self.max_nodes}: drop the shape from the sweep, or "
                f"raise max_nodes in the profile if the partition holds {nodes} nodes "
                "(sinfo -o '%P %D %l' shows each partition's nodes and time limit)"
            )
        limit = self.gpus_per_node or self.max_devices_per_node
        if devices_per_node > limit:
            what = "gpus_per_node" if self.gpus_per_node else "max_devices_per_node"
            raise ConfigError(
                f"shape {nodes}x{devices_per_node}: {devices_per_node} devices per node exceeds "
                f"the profile {self.name!r} {what}={limit}: drop the shape, or correct {what} "
                "in the profile if the nodes have more"
            )


_SETUP_BLOCK = re.compile(r"^setup:\s*\|[-+]?\s*$", re.MULTILINE)


def load_profile(path: str | os.PathLike[str]) -> ClusterProfile:
    data = read_yaml(path, what="cluster profile")
    try:
        profile = build(ClusterProfile, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if profile.setup and not _SETUP_BLOCK.search(Path(path).read_text(encoding="utf-8")):
        raise ConfigError(
            f"{path}: setup must be a literal block (`setup: |` followed by indented lines), "
            "so that sbatch scripts can read it without Python"
        )
    return profile
