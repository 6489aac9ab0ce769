"""A real two-node Slurm cluster on this machine: ``scalescope local-cluster up|down|status``.

Two ``slurmd`` daemons (``node1``, ``node2``) and one ``slurmctld`` run from Debian's Slurm
packages with a slurm.conf of our own. Everything they write (config, state, spool, logs, pid
files) lives under one directory, ``$SCALESCOPE_LOCAL_CLUSTER_DIR`` or
``~/.cache/scalescope/local-cluster``; the ports are not Slurm's defaults, so a site's own Slurm
on the same machine is never touched. Clients find the cluster through ``SLURM_CONF``.

``down`` stops exactly the processes ``up`` started: their pids are kept in ``cluster.json`` and
each is checked against its command line before it is signalled (a recycled pid is left alone).

This module is the command and its three actions; the state directory and the files written
there are in :mod:`.local_cluster_conf`, the daemons' processes in :mod:`.local_cluster_daemons`.
Library functions return data and raise :class:`LocalClusterError`; only :func:`run` prints.
Only the standard library and psutil are imported here, so the command starts fast on a
login node.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from .local_cluster_conf import (
    DEFAULT_PORT_BASE,
    ENV_DIR,
    MAX_SPOOL_PATH,
    NODES,
    PARTITION,
    LocalClusterError,
    LocalClusterUnavailable,
    Paths,
    check_ports_free,
    daemon_names,
    load_state,
    locked,
    ports,
    render_conf,
    resolve,
    save_state,
    short_hostname,
)
from .local_cluster_daemons import (
    Notify,
    install_packages,
    live_daemons,
    munge_works,
    need,
    node_states,
    quiet,
    start_daemon,
    start_munged,
    stop,
    wait_idle,
)


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


def _info(
    paths: Paths,
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
        running=all(d in live for d in daemon_names()),
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
    paths = resolve(state_dir)
    state = load_state(paths)
    live = live_daemons(paths, state)
    nodes: dict[str, str] = {}
    problem = None
    if "slurmctld" in live:
        try:
            nodes = node_states(paths.conf)
        except (LocalClusterError, subprocess.TimeoutExpired) as exc:
            problem = f"slurmctld runs but does not answer: {exc}"
    partial = [d for d in daemon_names() if d not in live]
    if live and partial and problem is None:
        problem = (
            f"not running: {', '.join(partial)}; run `scalescope local-cluster down` then `up`"
        )
    return _info(paths, state, live, nodes=nodes, problem=problem)


# --- up / down ------------------------------------------------------------------------------


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
    notify = notify or quiet
    paths = resolve(state_dir)
    with locked(paths):
        state = load_state(paths)
        live = live_daemons(paths, state)
        if all(d in live for d in daemon_names()):
            return _info(paths, state, live, nodes=node_states(paths.conf), already_running=True)
        _stop_leftovers(paths, state, live, notify)
        _check_can_start(paths)
        install_packages(paths, notify)
        _make_dirs(paths)
        previous = state
        state = _new_state(port_base)
        _own_munged(paths, state, previous, live, notify)
        save_state(paths, state)
        try:
            nodes = _start_slurm(paths, state, port_base, timeout_s)
        except BaseException:
            stop(paths, state, live_daemons(paths, state), notify=quiet)
            raise
        return _info(paths, state, live_daemons(paths, state), nodes=nodes)


def _stop_leftovers(
    paths: Paths, state: dict[str, Any], live: dict[str, int], notify: Notify
) -> None:
    """Stop the Slurm daemons of a previous start that still run (not all of them do)."""
    leftovers = {k: v for k, v in live.items() if k != "munged"}
    if leftovers:
        notify(
            f"some daemons of a previous start still run ({', '.join(leftovers)}): "
            "stopping them first"
        )
        stop(paths, state, leftovers, notify=notify)


def _check_can_start(paths: Paths) -> None:
    if os.geteuid() != 0:
        raise LocalClusterUnavailable(
            "starting the local cluster needs root (slurmd launches jobs as their user)"
        )
    if len(str(paths.spool / NODES[0])) > MAX_SPOOL_PATH:
        raise LocalClusterError(
            f"{paths.root} is too deep: slurmstepd puts Unix sockets under {paths.spool} "
            f"(at most {MAX_SPOOL_PATH} characters); pick a shorter --dir"
        )


def _make_dirs(paths: Paths) -> None:
    for d in (paths.ctld_state, paths.logs, paths.pids, *(paths.spool / n for n in NODES)):
        d.mkdir(parents=True, exist_ok=True)
    # Job scripts are executed from the spool directory.
    paths.spool.chmod(0o755)


def _new_state(port_base: int) -> dict[str, Any]:
    """``cluster.json`` of a start: where the daemons listen, no pids yet."""
    return {
        "hostname": short_hostname(),
        "ports": ports(port_base),
        "port_base": port_base,
        "pids": {},
        "started_munged": False,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _own_munged(
    paths: Paths,
    state: dict[str, Any],
    previous: dict[str, Any],
    live: dict[str, int],
    notify: Notify,
) -> None:
    """Keep owning the munged an earlier ``up`` started, or start one when none serves."""
    if "munged" in live and previous.get("started_munged") and munge_works():
        # A munged from an earlier `up` still serves: keep owning it.
        state["pids"]["munged"] = live["munged"]
        state["started_munged"] = True
    elif not munge_works():
        notify("munge is not running (munge -n | unmunge failed): starting munged")
        state["pids"]["munged"] = start_munged(paths)
        state["started_munged"] = True


def _start_slurm(
    paths: Paths, state: dict[str, Any], port_base: int, timeout_s: float
) -> dict[str, str]:
    """Write slurm.conf, start slurmctld and the slurmds (each pid saved as it starts) and
    wait until the nodes are idle; returns their states."""
    check_ports_free(state["ports"])
    paths.conf.write_text(render_conf(paths, state["hostname"], port_base))
    # -i: recover the saved state but ignore errors in it. The job-id counter survives
    # a restart, so outputs/slurm-<id>.out of earlier jobs are never overwritten
    # (-c would start again at job 1).
    commands = {"slurmctld": [need("slurmctld"), "-i", "-f", str(paths.conf)]}
    for n in NODES:
        commands[f"slurmd-{n}"] = [need("slurmd"), "-f", str(paths.conf), "-N", n]
    for name, cmd in commands.items():
        state["pids"][name] = start_daemon(paths, name, cmd)
        save_state(paths, state)
    return wait_idle(paths, timeout_s)


def down(
    state_dir: str | os.PathLike[str] | None = None, *, notify: Notify | None = None
) -> list[str]:
    """Stop the daemons ``up`` started (munged only if ``up`` started it). Safe to repeat.

    Returns the names of the daemons that were stopped (empty when nothing ran).
    """
    paths = resolve(state_dir)
    if not paths.root.exists():
        return []
    with locked(paths):
        state = load_state(paths)
        live = live_daemons(paths, state)
        if not state.get("started_munged"):
            live.pop("munged", None)
        if not live:
            return []
        return stop(paths, state, live, notify=notify or quiet)


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
        return _run_up(args, say)
    if args.action == "down":
        return _run_down(args, say)
    return _run_status(args, say)


def _run_up(args: argparse.Namespace, say: Notify) -> int:
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


def _run_down(args: argparse.Namespace, say: Notify) -> int:
    stopped = down(args.dir, notify=say)
    if not args.quiet:
        say(
            f"stopped: {', '.join(stopped)}"
            if stopped
            else "local cluster not running: nothing to stop"
        )
    return 0


def _run_status(args: argparse.Namespace, say: Notify) -> int:
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
