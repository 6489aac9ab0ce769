"""Where a process runs: launcher, nodes, devices per node, its ranks and the job's identity.

The only module that reads SLURM_*, SUBMITIT_LOCAL_* and torch-elastic style variables.
Three launchers are recognised:

* ``slurm``          -- tasks started by ``srun`` (sbatch scripts, submitit's Slurm executor);
* ``submitit-local`` -- tasks started by submitit's LocalExecutor: their SUBMITIT_LOCAL_*
  ranks are mapped onto LOCAL_RANK / NODE_RANK / MASTER_ADDR / MASTER_PORT so that Lightning
  runs them as one DDP group without re-launching anything;
* ``local``          -- a plain ``scalescope train``: rank 0 starts the extra ranks early and
  Lightning's launcher adopts them (``children.start_local_ranks``; they see LOCAL_RANK).

Kept free of torch: the sweep launcher validates shapes with it on a login node.
"""

from __future__ import annotations

import datetime as dt
import os
import zlib
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from ...errors import TopologyError

_INTERACTIVE_JOB_NAMES = {"bash", "interactive"}


@dataclass(frozen=True)
class Topology:
    launcher: str
    num_nodes: int
    devices_per_node: int
    global_rank: int
    local_rank: int
    node_rank: int
    job_id: str
    array_job_id: str | None
    array_task_id: int | None
    restart_count: int
    cluster_name: str | None = None
    """Slurm's name of the cluster (SLURM_CLUSTER_NAME); None outside Slurm."""

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.devices_per_node

    @property
    def is_rank_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def job_label(self) -> str:
        """The job as Slurm names it: ``<array job>_<task>`` for array tasks, else the id."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id

    @property
    def run_id(self) -> str:
        """Unique per run: array tasks and requeued restarts each get their own."""
        return f"{self.job_label}.r{self.restart_count}"


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        if default is None:
            raise TopologyError(f"environment variable {key} is missing")
        return default
    try:
        return int(raw)
    except ValueError:
        raise TopologyError(f"environment variable {key}={raw!r} is not an integer") from None


def under_slurm(env: Mapping[str, str]) -> bool:
    """What Lightning calls 'running under Slurm' (FACTS: SLURM_NTASKS set, not interactive)."""
    return "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME", "") not in _INTERACTIVE_JOB_NAMES


def _check_requested(what: str, requested: int | str, actual: int, hint: str) -> None:
    if requested != "auto" and requested != actual:
        raise TopologyError(f"trainer.{what}={requested} but {hint}")


def _slurm(env: Mapping[str, str], devices: int | str, num_nodes: int | str) -> Topology:
    ntasks = _int(env, "SLURM_NTASKS")
    nnodes = _int(env, "SLURM_NNODES", _int(env, "SLURM_JOB_NUM_NODES", 1))
    if "SLURM_STEP_ID" not in env and "SLURM_STEPID" not in env and ntasks > 1:
        raise TopologyError(
            f"the job has {ntasks} tasks but this process was not started by srun; "
            "run `srun python -m scalescope.train ...` (one task per device)"
        )
    if ntasks % nnodes:
        raise TopologyError(
            f"{ntasks} tasks over {nnodes} nodes is uneven; use --ntasks-per-node so every "
            "node runs the same number of tasks"
        )
    per_node = ntasks // nnodes
    _check_requested(
        "devices",
        devices,
        per_node,
        f"the allocation runs {per_node} task(s) per node; submit with "
        f"--ntasks-per-node={devices} or leave trainer.devices=auto",
    )
    _check_requested(
        "num_nodes",
        num_nodes,
        nnodes,
        f"the allocation has {nnodes} node(s); submit with --nodes={num_nodes} "
        "or leave trainer.num_nodes=auto",
    )
    array_job = env.get("SLURM_ARRAY_JOB_ID")
    return Topology(
        launcher="slurm",
        num_nodes=nnodes,
        devices_per_node=per_node,
        global_rank=_int(env, "SLURM_PROCID", 0),
        local_rank=_int(env, "SLURM_LOCALID", 0),
        node_rank=_int(env, "SLURM_NODEID", 0),
        job_id=env.get("SLURM_JOB_ID", "unknown"),
        array_job_id=array_job,
        array_task_id=_int(env, "SLURM_ARRAY_TASK_ID") if array_job else None,
        restart_count=_int(env, "SLURM_RESTART_COUNT", 0),
        cluster_name=env.get("SLURM_CLUSTER_NAME") or None,
    )


def _submitit_local(env: Mapping[str, str], devices: int | str, num_nodes: int | str) -> Topology:
    ntasks = _int(env, "SUBMITIT_LOCAL_NTASKS", 1)
    _check_requested(
        "devices",
        devices,
        ntasks,
        f"submitit started {ntasks} local task(s); set tasks_per_node to match",
    )
    _check_requested("num_nodes", num_nodes, 1, "local runs use one node")
    return Topology(
        launcher="submitit-local",
        num_nodes=1,
        devices_per_node=ntasks,
        global_rank=_int(env, "SUBMITIT_LOCAL_GLOBALID", 0),
        local_rank=_int(env, "SUBMITIT_LOCAL_LOCALID", 0),
        node_rank=0,
        job_id=f"local-{env.get('SUBMITIT_LOCAL_JOB_ID', '0')}",
        array_job_id=None,
        array_task_id=None,
        restart_count=0,
    )


def _plain(env: Mapping[str, str], devices: int | str, num_nodes: int | str) -> Topology:
    if num_nodes not in ("auto", 1):
        raise TopologyError(
            f"trainer.num_nodes={num_nodes} needs Slurm: submit with sbatch or `scalescope sweep`"
        )
    per_node = 1 if devices == "auto" else int(devices)
    job_id = env.get("SCALESCOPE_JOB_ID") or (
        f"local-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%S}-{os.getpid()}"
    )
    return Topology(
        launcher="local",
        num_nodes=1,
        devices_per_node=per_node,
        global_rank=_int(env, "LOCAL_RANK", 0),  # Lightning's children carry LOCAL_RANK
        local_rank=_int(env, "LOCAL_RANK", 0),
        node_rank=0,
        job_id=job_id,
        array_job_id=None,
        array_task_id=None,
        restart_count=0,
    )


def detect(
    devices: int | str = "auto",
    num_nodes: int | str = "auto",
    env: Mapping[str, str] | None = None,
) -> Topology:
    """The topology of this process; refuses a config that contradicts the allocation."""
    env = os.environ if env is None else env
    if env.get("SUBMITIT_EXECUTOR") == "local" and "SUBMITIT_LOCAL_NTASKS" in env:
        return _submitit_local(env, devices, num_nodes)
    if under_slurm(env):
        return _slurm(env, devices, num_nodes)
    return _plain(env, devices, num_nodes)


def master_port_for(job_id: str) -> int:
    """A port in 20000-39999 derived from the job id.

    Lightning's Slurm default (15000 + last four digits of the job id) collides for job ids
    that share them; a hash of the whole id spreads them out.
    """
    return 20000 + zlib.crc32(job_id.encode()) % 20000


def export_for_lightning(topo: Topology, env: MutableMapping[str, str] | None = None) -> None:
    """Set the variables Lightning reads to join this process into the DDP group.

    Slurm tasks are read by Lightning's SLURMEnvironment (only the port is set here) and
    plain runs by Lightning's own launcher (nothing to set).
    """
    if env is None:
        env = os.environ
    if topo.launcher == "slurm":
        env.setdefault("MASTER_PORT", str(master_port_for(topo.job_id)))
    if topo.launcher != "submitit-local":
        return
    env["LOCAL_RANK"] = str(topo.local_rank)
    env["NODE_RANK"] = "0"
    env["WORLD_SIZE"] = str(topo.world_size)
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(master_port_for(topo.job_id)))
