"""Where the local cluster keeps everything, and the files it writes there.

One state directory, ``$SCALESCOPE_LOCAL_CLUSTER_DIR`` or ``~/.cache/scalescope/local-cluster``,
holds the cluster's slurm.conf (:func:`render_conf`), ``cluster.json`` (the pids ``up``
started, read back by ``down`` and ``status``), and the daemons' state, spool, logs and pid
files (:class:`Paths`). The ports are not Slurm's defaults, so a site's own Slurm on the same
machine is never touched.

Only the standard library is imported here (see :mod:`scalescope.launch.local_cluster`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from ..atomic import write_text_atomic
from ..errors import ScalescopeError

ENV_DIR = "SCALESCOPE_LOCAL_CLUSTER_DIR"
NODES = ("node1", "node2")
PARTITION = "debug"
# slurmctld listens on the base port, node i on base + i; Slurm's defaults are 6817/6818.
DEFAULT_PORT_BASE = 17000
CPUS_PER_NODE = 2
REAL_MEMORY_MB = 4000
# Finished jobs stay visible to `scontrol show job` this long (there is no accounting database).
# An hour: longer than any session of jobs on this cluster takes to look back at a job it
# submitted first (the Slurm tests check their earliest jobs last, after 10-16 minutes of others
# on a busy 2-core machine; at 600 s those jobs were already forgotten).
MIN_JOB_AGE_S = 3600
# A Unix socket path (slurmstepd's, under the spool dir) holds at most 107 bytes.
MAX_SPOOL_PATH = 70


class LocalClusterError(ScalescopeError):
    """The local cluster could not be started, queried or stopped."""


class LocalClusterUnavailable(LocalClusterError):
    """This machine cannot host the local cluster at all (not root, no apt-get)."""


class _Under:
    """A path in the state directory: ``paths.conf`` is ``paths.root / "slurm.conf"``."""

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, paths: None, owner: type) -> _Under: ...
    @overload
    def __get__(self, paths: Paths, owner: type) -> Path: ...
    def __get__(self, paths: Paths | None, owner: type) -> Path | _Under:
        return self if paths is None else paths.root / self.name


@dataclass(frozen=True)
class Paths:
    root: Path

    conf = _Under("slurm.conf")
    state = _Under("cluster.json")
    lock = _Under(".lock")
    ctld_state = _Under("ctld-state")
    spool = _Under("spool")
    logs = _Under("log")
    pids = _Under("run")

    def log(self, daemon: str) -> Path:
        return self.logs / f"{daemon}.log"

    def pid(self, daemon: str) -> Path:
        return self.pids / f"{daemon}.pid"


def default_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "scalescope" / "local-cluster"


def resolve(state_dir: str | os.PathLike[str] | None) -> Paths:
    return Paths(
        Path(state_dir).expanduser().resolve() if state_dir is not None else default_dir().resolve()
    )


def daemon_names() -> list[str]:
    return ["slurmctld", *(f"slurmd-{n}" for n in NODES)]


# --- state file -----------------------------------------------------------------------------


def load_state(paths: Paths) -> dict[str, Any]:
    try:
        data = json.loads(paths.state.read_text())
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as exc:
        raise LocalClusterError(f"{paths.state}: not valid JSON ({exc.msg}); remove it") from None
    return data if isinstance(data, dict) else {}


def save_state(paths: Paths, state: dict[str, Any]) -> None:
    write_text_atomic(paths.state, json.dumps(state, indent=2) + "\n")


@contextlib.contextmanager
def locked(paths: Paths) -> Iterator[None]:
    """One up/down at a time per directory (tests and a shell may race)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --- slurm.conf -----------------------------------------------------------------------------


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def ports(port_base: int) -> dict[str, int]:
    return {"slurmctld": port_base, **{n: port_base + i for i, n in enumerate(NODES, 1)}}


def _node_memory_mb() -> int:
    """RealMemory per node: 4000 MB, or half the machine when it has less than 8 GB."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return REAL_MEMORY_MB
    return max(500, min(REAL_MEMORY_MB, pages * page_size // 2**20 // len(NODES)))


def render_conf(paths: Paths, hostname: str, port_base: int) -> str:
    node_ports = ports(port_base)
    first, last = node_ports[NODES[0]], node_ports[NODES[-1]]
    return f"""\
# Written by `scalescope local-cluster up`; rewritten on every start, do not edit.
ClusterName=scalescope-local
SlurmctldHost={hostname}(127.0.0.1)
SlurmctldPort={port_base}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job waits cred_expire seconds (default 120) before it may start again; a local
# cluster has no slow prologs or paged-out daemons to allow for, so 20 s is plenty.
AuthInfo=cred_expire=20
CredType=cred/munge
MpiDefault=none
# No cgroups in a container: track processes by parent pid and bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
# Cores are the consumable resource: two 1-CPU jobs share a node; memory is not tracked.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# No slurmdbd: sacct does not work; `scontrol show job` keeps finished jobs for MinJobAge.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge={MIN_JOB_AGE_S}
ReturnToService=2
# Both nodes share this machine's cores: trust the CPU count below, not the hardware.
SlurmdParameters=config_overrides
KillWait=10
InactiveLimit=0
SlurmdTimeout=120
StateSaveLocation={paths.ctld_state}
SlurmdSpoolDir={paths.spool}/%n
SlurmctldPidFile={paths.pid("slurmctld")}
SlurmdPidFile={paths.pids}/slurmd-%n.pid
SlurmctldLogFile={paths.log("slurmctld")}
SlurmdLogFile={paths.logs}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName={NODES[0][:-1]}[1-{len(NODES)}] NodeHostname={hostname} NodeAddr=127.0.0.1 \
Port=[{first}-{last}] CPUs={CPUS_PER_NODE} Boards=1 SocketsPerBoard=1 \
CoresPerSocket={CPUS_PER_NODE} ThreadsPerCore=1 RealMemory={_node_memory_mb()} State=UNKNOWN
PartitionName={PARTITION} Nodes={NODES[0][:-1]}[1-{len(NODES)}] Default=YES \
MaxTime=INFINITE State=UP
"""


def check_ports_free(node_ports: dict[str, int]) -> None:
    for name, port in node_ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                raise LocalClusterError(
                    f"port {port} (for {name}) is in use: another local cluster (other --dir?) "
                    "or service holds it; stop it or pick other ports with --port-base"
                ) from None
