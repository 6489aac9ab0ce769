"""A real two-node Slurm cluster on this machine: ``scalescope local-cluster up|down|status``.

Two ``slurmd`` daemons (``node1``, ``node2``) and one ``slurmctld`` run from Debian's Slurm
packages with a slurm.conf of our own. Everything they write (config, state, spool, logs, pid
files) lives under one directory, ``$SCALESCOPE_LOCAL_CLUSTER_DIR`` or
``~/.cache/scalescope/local-cluster``; the ports are not Slurm's defaults, so a site's own Slurm
on the same machine is never touched. Clients find the cluster through ``SLURM_CONF``.

``down`` stops exactly the processes ``up`` started: their pids are kept in ``cluster.json`` and
each is checked against its command line before it is signalled (a recycled pid is left alone).

Library functions return data and raise :class:`LocalClusterError`; only :func:`run` prints.
Only the standard library and psutil are imported here, so the command starts fast on a
login node.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

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
MIN_JOB_AGE_S = 600
PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
_NEEDED_PROGRAMS = (
    "slurmctld",
    "slurmd",
    "sinfo",
    "sbatch",
    "srun",
    "scancel",
    "scontrol",
    "munged",
    "munge",
    "unmunge",
)
_SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")
# A Unix socket path (slurmstepd's, under the spool dir) holds at most 107 bytes.
_MAX_SPOOL_PATH = 70

Notify = Callable[[str], None]


class LocalClusterError(ScalescopeError):
    """The local cluster could not be started, queried or stopped."""


class LocalClusterUnavailable(LocalClusterError):
    """This machine cannot host the local cluster at all (not root, no apt-get)."""


@dataclass(frozen=True)
class ClusterInfo:
    """What ``up`` and ``status`` report. ``daemons`` holds live pids only."""

    dir: str
    conf: str
    running: bool
    hostname: str = ""
    partition: str = PARTITION
    ports: dict[str, int] = field(default_factory=dict)
    daemons: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    """Node name -> Slurm state (``idle``, ``mixed``, ``allocated``, ``down``...)."""
    started_munged: bool = False
    already_running: bool = False
    problem: str | None = None
    """Set by ``status`` when some daemons run and others do not."""

    @property
    def export_line(self) -> str:
        return f"export SLURM_CONF={shlex.quote(self.conf)}"


@dataclass(frozen=True)
class _Paths:
    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def state(self) -> Path:
        return self.root / "cluster.json"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    @property
    def ctld_state(self) -> Path:
        return self.root / "ctld-state"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def pids(self) -> Path:
        return self.root / "run"

    def log(self, daemon: str) -> Path:
        return self.logs / f"{daemon}.log"

    def pid(self, daemon: str) -> Path:
        return self.pids / f"{daemon}.pid"


def default_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "scalescope" / "local-cluster"


def _resolve(state_dir: str | os.PathLike[str] | None) -> _Paths:
    return _Paths(
        Path(state_dir).expanduser().resolve() if state_dir is not None else default_dir().resolve()
    )


def _quiet(_: str) -> None:
    pass


# --- processes ------------------------------------------------------------------------------


def _which(program: str) -> str | None:
    found = shutil.which(program)
    if found:
        return found
    for d in _SBIN_DIRS:
        candidate = Path(d) / program
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _need(program: str) -> str:
    path = _which(program)
    if path is None:
        raise LocalClusterError(f"{program} not found on PATH or in {', '.join(_SBIN_DIRS)}")
    return path


def _cmdline(pid: int) -> list[str] | None:
    """The argv of a live, non-zombie process; None when there is none."""
    try:
        proc = psutil.Process(pid)
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        argv = proc.cmdline()
    except psutil.Error:
        return None
    return argv or None


def _is_ours(pid: int | None, program: str, marker: str) -> bool:
    """pid runs ``program`` with ``marker`` (our conf or pid file) among its arguments."""
    if not pid:
        return False
    argv = _cmdline(pid)
    if not argv:
        return False
    return Path(argv[0]).name == program and any(marker in a for a in argv[1:])


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"  ({path} does not exist)"
    if not text:
        return f"  ({path} is empty)"
    return "\n".join(f"  {line}" for line in text[-lines:])


def _log_tails(paths: _Paths, daemons: list[str]) -> str:
    return "\n".join(f"--- {paths.log(d)} (last lines) ---\n{_tail(paths.log(d))}" for d in daemons)


def _slurm_env(conf: Path) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(conf)}


# --- state file -----------------------------------------------------------------------------


def _load_state(paths: _Paths) -> dict[str, Any]:
    try:
        data = json.loads(paths.state.read_text())
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as exc:
        raise LocalClusterError(f"{paths.state}: not valid JSON ({exc.msg}); remove it") from None
    return data if isinstance(data, dict) else {}


def _save_state(paths: _Paths, state: dict[str, Any]) -> None:
    write_text_atomic(paths.state, json.dumps(state, indent=2) + "\n")


@contextlib.contextmanager
def _locked(paths: _Paths) -> Iterator[None]:
    """One up/down at a time per directory (tests and a shell may race)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _daemon_names() -> list[str]:
    return ["slurmctld", *(f"slurmd-{n}" for n in NODES)]


def _live_daemons(paths: _Paths, state: dict[str, Any]) -> dict[str, int]:
    live: dict[str, int] = {}
    for name, pid in state.get("pids", {}).items():
        program = "munged" if name == "munged" else name.split("-")[0]
        marker = str(paths.pid("munged")) if name == "munged" else str(paths.conf)
        if _is_ours(pid, program, marker):
            live[name] = pid
    return live


# --- installation and munge ------------------------------------------------------------------


def missing_programs() -> list[str]:
    return [p for p in _NEEDED_PROGRAMS if _which(p) is None]


def install_packages(paths: _Paths, notify: Notify) -> None:
    """apt-get install Debian's Slurm and munge when any of their programs is missing."""
    missing = missing_programs()
    if not missing:
        return
    if os.geteuid() != 0:
        raise LocalClusterUnavailable(
            f"Slurm/munge programs missing ({', '.join(missing)}) and installing them needs root"
        )
    apt = _which("apt-get")
    if apt is None:
        raise LocalClusterUnavailable(
            f"Slurm/munge programs missing ({', '.join(missing)}) and there is no apt-get; "
            f"install {' '.join(PACKAGES)} (Slurm >= 22.05) yourself"
        )
    notify(
        f"Slurm/munge not installed (missing {', '.join(missing)}): running apt-get update and "
        f"apt-get install {' '.join(PACKAGES)} (log: {paths.log('apt')})"
    )
    paths.logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with open(paths.log("apt"), "a") as log:
        for cmd in ([apt, "update"], [apt, "install", "-y", "--no-install-recommends", *PACKAGES]):
            log.write(f"$ {' '.join(cmd)}\n")
            log.flush()
            rc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            ).returncode
            if rc != 0:
                raise LocalClusterError(
                    f"{' '.join(cmd[:2])} failed (exit {rc}):\n{_tail(paths.log('apt'))}"
                )
    still = missing_programs()
    if still:
        raise LocalClusterError(
            f"after installing {' '.join(PACKAGES)}, still missing: " + ", ".join(still)
        )


def munge_works() -> bool:
    munge, unmunge = _which("munge"), _which("unmunge")
    if not munge or not unmunge:
        return False
    try:
        cred = subprocess.run([munge, "-n"], capture_output=True, timeout=10)
        if cred.returncode != 0:
            return False
        check = subprocess.run([unmunge], input=cred.stdout, capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return check.returncode == 0


def _start_munged(paths: _Paths) -> int:
    """Start munged on its default socket (every munge client looks there), files under root.

    There is no init system to start it as the ``munge`` user, so it runs as root, which
    munged accepts only with ``--force`` (it otherwise refuses a key owned by ``munge``).
    """
    Path("/run/munge").mkdir(mode=0o755, parents=True, exist_ok=True)
    cmd = [
        _need("munged"),
        "--force",
        f"--pid-file={paths.pid('munged')}",
        f"--log-file={paths.log('munged')}",
        f"--seed-file={paths.root / 'munged.seed'}",
    ]
    out = subprocess.run(
        cmd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=30,
    )
    pid = _read_pid(paths.pid("munged"))
    if out.returncode != 0 or pid is None or not munge_works():
        raise LocalClusterError(
            f"could not start munged (exit {out.returncode}): {out.stderr.strip()}\n"
            + _log_tails(paths, ["munged"])
        )
    return pid


# --- slurm.conf -----------------------------------------------------------------------------


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def _ports(port_base: int) -> dict[str, int]:
    return {"slurmctld": port_base, **{n: port_base + i for i, n in enumerate(NODES, 1)}}


def _node_memory_mb() -> int:
    """RealMemory per node: 4000 MB, or half the machine when it has less than 8 GB."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return REAL_MEMORY_MB
    return max(500, min(REAL_MEMORY_MB, pages * page_size // 2**20 // len(NODES)))


def render_conf(paths: _Paths, hostname: str, port_base: int) -> str:
    ports = _ports(port_base)
    first, last = ports[NODES[0]], ports[NODES[-1]]
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
KillWait=5
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


def _check_ports_free(ports: dict[str, int]) -> None:
    for name, port in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                raise LocalClusterError(
                    f"port {port} (for {name}) is in use: another local cluster (other --dir?) "
                    "or service holds it; stop it or pick other ports with --port-base"
                ) from None


# --- queries --------------------------------------------------------------------------------


def node_states(conf: Path, timeout_s: float = 30.0) -> dict[str, str]:
    """Node -> state as sinfo shows it; raises LocalClusterError when slurmctld does not answer."""
    out = subprocess.run(
        [_need("sinfo"), "-h", "-N", "-o", "%N %T"],
        env=_slurm_env(conf),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if out.returncode != 0:
        raise LocalClusterError(f"sinfo failed: {out.stderr.strip() or out.stdout.strip()}")
    states: dict[str, str] = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1].lower()
    return states


def _info(
    paths: _Paths,
    state: dict[str, Any],
    live: dict[str, int],
    *,
    nodes: dict[str, str] | None = None,
    already_running: bool = False,
    problem: str | None = None,
) -> ClusterInfo:
    return ClusterInfo(
        dir=str(paths.root),
        conf=str(paths.conf),
        running=all(d in live for d in _daemon_names()),
        hostname=state.get("hostname", ""),
        ports=dict(state.get("ports", {})),
        daemons=live,
        nodes=nodes or {},
        started_munged=bool(state.get("started_munged")) and "munged" in live,
        already_running=already_running,
        problem=problem,
    )


def status(state_dir: str | os.PathLike[str] | None = None) -> ClusterInfo:
    """Which of our daemons are alive and what sinfo says about the nodes."""
    paths = _resolve(state_dir)
    state = _load_state(paths)
    live = _live_daemons(paths, state)
    nodes: dict[str, str] = {}
    problem = None
    if "slurmctld" in live:
        try:
            nodes = node_states(paths.conf)
        except (LocalClusterError, subprocess.TimeoutExpired) as exc:
            problem = f"slurmctld runs but does not answer: {exc}"
    partial = [d for d in _daemon_names() if d not in live]
    if live and partial and problem is None:
        problem = (
            f"not running: {', '.join(partial)}; run `scalescope local-cluster down` then `up`"
        )
    return _info(paths, state, live, nodes=nodes, problem=problem)


# --- up / down ------------------------------------------------------------------------------


def _start_daemon(paths: _Paths, name: str, cmd: list[str]) -> int:
    """Run a daemon that forks into the background; return its pid from its pid file."""
    pid_file = paths.pid(name)
    pid_file.unlink(missing_ok=True)
    with open(paths.log(f"{name}.stdout"), "a") as out:
        # A new session keeps the daemons alive when the shell or pytest that started them ends.
        rc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_slurm_env(paths.conf),
            start_new_session=True,
            timeout=60,
        ).returncode
    program = Path(cmd[0]).name
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pid = _read_pid(pid_file)
        if rc == 0 and pid is not None and _is_ours(pid, program, str(paths.conf)):
            return pid
        time.sleep(0.2)
    raise LocalClusterError(
        f"{name} did not start (exit {rc}); command: {shlex.join(cmd)}\n"
        + _log_tails(paths, [name, f"{name}.stdout"])
    )


def _resume_drained(paths: _Paths, states: dict[str, str]) -> None:
    """A drain (e.g. after a failed job kill) survives restarts in the saved state: lift it."""
    drained = [n for n, s in states.items() if s.startswith("drain")]
    if drained:
        subprocess.run(
            [_need("scontrol"), "update", f"NodeName={','.join(drained)}", "State=RESUME"],
            env=_slurm_env(paths.conf),
            capture_output=True,
            timeout=30,
        )


def _wait_idle(paths: _Paths, timeout_s: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    last_error = ""
    while True:
        try:
            remaining = deadline - time.monotonic()
            states = node_states(paths.conf, timeout_s=max(2.0, min(15.0, remaining)))
            last_error = ""
            if all(states.get(n) == "idle" for n in NODES):
                return states
            _resume_drained(paths, states)
        except (LocalClusterError, subprocess.TimeoutExpired) as exc:
            last_error = str(exc)
        if time.monotonic() > deadline:
            seen = ", ".join(f"{n}={s}" for n, s in states.items()) or "none"
            raise LocalClusterError(
                f"nodes not idle after {timeout_s:.0f} s (seen: {seen}"
                + (f"; {last_error}" if last_error else "")
                + ")\n"
                + _log_tails(paths, _daemon_names())
            )
        time.sleep(0.5)


def up(
    state_dir: str | os.PathLike[str] | None = None,
    *,
    port_base: int = DEFAULT_PORT_BASE,
    timeout_s: float = 60.0,
    notify: Notify | None = None,
) -> ClusterInfo:
    """Start the cluster (installing Slurm if needed) and wait until both nodes are idle.

    Already running: nothing is started; the result has ``already_running=True``. If ``up``
    fails halfway, what it started is stopped again and the error carries the log tails.
    """
    notify = notify or _quiet
    paths = _resolve(state_dir)
    with _locked(paths):
        state = _load_state(paths)
        live = _live_daemons(paths, state)
        if all(d in live for d in _daemon_names()):
            return _info(paths, state, live, nodes=node_states(paths.conf), already_running=True)
        leftovers = {k: v for k, v in live.items() if k != "munged"}
        if leftovers:
            notify(
                f"some daemons of a previous start still run ({', '.join(leftovers)}): "
                "stopping them first"
            )
            _stop(paths, state, leftovers, notify=notify)
        if os.geteuid() != 0:
            raise LocalClusterUnavailable(
                "starting the local cluster needs root (slurmd launches jobs as their user)"
            )
        if len(str(paths.spool / NODES[0])) > _MAX_SPOOL_PATH:
            raise LocalClusterError(
                f"{paths.root} is too deep: slurmstepd puts Unix sockets under {paths.spool} "
                f"(at most {_MAX_SPOOL_PATH} characters); pick a shorter --dir"
            )
        install_packages(paths, notify)

        for d in (paths.ctld_state, paths.logs, paths.pids, *(paths.spool / n for n in NODES)):
            d.mkdir(parents=True, exist_ok=True)
        # Job scripts are executed from the spool directory.
        paths.spool.chmod(0o755)
        hostname = _short_hostname()
        ports = _ports(port_base)
        previous = state
        state = {
            "hostname": hostname,
            "ports": ports,
            "port_base": port_base,
            "pids": {},
            "started_munged": False,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if "munged" in live and previous.get("started_munged") and munge_works():
            # A munged from an earlier `up` still serves: keep owning it.
            state["pids"]["munged"] = live["munged"]
            state["started_munged"] = True
        elif not munge_works():
            notify("munge is not running (munge -n | unmunge failed): starting munged")
            state["pids"]["munged"] = _start_munged(paths)
            state["started_munged"] = True
        _save_state(paths, state)
        try:
            _check_ports_free(ports)
            paths.conf.write_text(render_conf(paths, hostname, port_base))
            # -i: recover the saved state but ignore errors in it. The job-id counter survives
            # a restart, so outputs/slurm-<id>.out of earlier jobs are never overwritten
            # (-c would start again at job 1).
            commands = {"slurmctld": [_need("slurmctld"), "-i", "-f", str(paths.conf)]}
            for n in NODES:
                commands[f"slurmd-{n}"] = [_need("slurmd"), "-f", str(paths.conf), "-N", n]
            for name, cmd in commands.items():
                state["pids"][name] = _start_daemon(paths, name, cmd)
                _save_state(paths, state)
            nodes = _wait_idle(paths, timeout_s)
        except BaseException:
            _stop(paths, state, _live_daemons(paths, state), notify=_quiet)
            raise
        return _info(paths, state, _live_daemons(paths, state), nodes=nodes)


def _stop(
    paths: _Paths,
    state: dict[str, Any],
    live: dict[str, int],
    *,
    notify: Notify,
    timeout_s: float = 20.0,
) -> list[str]:
    """SIGTERM the given daemons (munged last), SIGKILL what outlives timeout_s."""
    if "slurmctld" in live:
        # Running jobs would otherwise leave slurmstepd processes behind.
        with contextlib.suppress(subprocess.TimeoutExpired, LocalClusterError):
            subprocess.run(
                [_need("scancel"), f"--partition={PARTITION}"],
                env=_slurm_env(paths.conf),
                capture_output=True,
                timeout=15,
            )
    order = [d for d in [*(f"slurmd-{n}" for n in NODES), "slurmctld", "munged"] if d in live]
    stopped: list[str] = []
    for group in ([d for d in order if d != "munged"], [d for d in order if d == "munged"]):
        for name in group:
            with contextlib.suppress(ProcessLookupError):
                os.kill(live[name], signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        pending = list(group)
        while pending and time.monotonic() < deadline:
            time.sleep(0.2)
            pending = [n for n in pending if _cmdline(live[n]) is not None]
        for name in pending:
            notify(f"{name} (pid {live[name]}) ignored SIGTERM for {timeout_s:.0f} s: SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(live[name], signal.SIGKILL)
        stopped += group
    state["pids"] = {k: v for k, v in state.get("pids", {}).items() if k not in stopped}
    if "munged" in stopped:
        state["started_munged"] = False
    _save_state(paths, state)
    return stopped


def down(
    state_dir: str | os.PathLike[str] | None = None, *, notify: Notify | None = None
) -> list[str]:
    """Stop the daemons ``up`` started (munged only if ``up`` started it). Safe to repeat.

    Returns the names of the daemons that were stopped (empty when nothing ran).
    """
    paths = _resolve(state_dir)
    if not paths.root.exists():
        return []
    with _locked(paths):
        state = _load_state(paths)
        live = _live_daemons(paths, state)
        if not state.get("started_munged"):
            live.pop("munged", None)
        if not live:
            return []
        return _stop(paths, state, live, notify=notify or _quiet)


# --- command line ---------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument(
        "--dir",
        default=None,
        help=f"state directory (config, spool, logs, pids); default ${ENV_DIR} or "
        "~/.cache/scalescope/local-cluster",
    )
    parser.add_argument(
        "--port-base",
        type=int,
        default=DEFAULT_PORT_BASE,
        help="slurmctld port; node i listens on base+i (up only)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        help="how long `up` waits for both nodes to be idle",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only the `export SLURM_CONF=...` line (for eval)",
    )


def _describe(info: ClusterInfo) -> list[str]:
    nodes = ", ".join(f"{n} {s}" for n, s in sorted(info.nodes.items())) or "no answer"
    lines = [
        f"nodes: {nodes} (partition {info.partition})",
        "daemons: " + ", ".join(f"{n} pid {p}" for n, p in info.daemons.items()),
        f"state dir: {info.dir} (logs in {info.dir}/log)",
    ]
    if info.ports:
        lines.append("ports: " + ", ".join(f"{n} {p}" for n, p in info.ports.items()))
    return lines


def run(args: argparse.Namespace) -> int:
    import sys

    def say(msg: str) -> None:
        print(msg, file=sys.stderr if args.quiet else sys.stdout, flush=True)

    if args.action == "up":
        info = up(args.dir, port_base=args.port_base, timeout_s=args.timeout_s, notify=say)
        if args.quiet:
            print(info.export_line)
            return 0
        say(
            "local cluster already running: nothing started"
            if info.already_running
            else "local cluster up"
        )
        for line in _describe(info):
            say(f"  {line}")
        say("clients find it through SLURM_CONF; run this in your shell:")
        print(info.export_line)
        return 0
    if args.action == "down":
        stopped = down(args.dir, notify=say)
        if not args.quiet:
            say(
                f"stopped: {', '.join(stopped)}"
                if stopped
                else "local cluster not running: nothing to stop"
            )
        return 0
    info = status(args.dir)
    if args.quiet:
        if info.running:
            print(info.export_line)
        return 0 if info.running else 1
    if not info.daemons:
        say(f"local cluster not running (state dir {info.dir})")
        return 1
    say(
        "local cluster running"
        if info.running and not info.problem
        else "local cluster partly running"
    )
    for line in _describe(info):
        say(f"  {line}")
    if info.problem:
        say(f"  problem: {info.problem}")
    print(info.export_line)
    return 0 if info.running and not info.problem else 1
