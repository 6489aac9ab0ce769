"""The local cluster's processes: installing Slurm and munge, starting, asking and stopping
the daemons.

Two ``slurmd`` daemons (``node1``, ``node2``) and one ``slurmctld`` run from Debian's Slurm
packages, and munged when none serves yet. A daemon is ours when it runs our program with our
slurm.conf (munged: our pid file) among its arguments: every pid from ``cluster.json`` is
checked against its command line before it is signalled (a recycled pid is left alone).

Only the standard library and psutil are imported here (see
:mod:`scalescope.launch.local_cluster`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from .local_cluster_conf import (
    NODES,
    PARTITION,
    LocalClusterError,
    LocalClusterUnavailable,
    Paths,
    daemon_names,
    save_state,
)

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

Notify = Callable[[str], None]


def quiet(_: str) -> None:
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


def need(program: str) -> str:
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


def _log_tails(paths: Paths, daemons: list[str]) -> str:
    return "\n".join(f"--- {paths.log(d)} (last lines) ---\n{_tail(paths.log(d))}" for d in daemons)


def _slurm_env(conf: Path) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(conf)}


def live_daemons(paths: Paths, state: dict[str, Any]) -> dict[str, int]:
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


def install_packages(paths: Paths, notify: Notify) -> None:
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


def start_munged(paths: Paths) -> int:
    """Start munged on its default socket (every munge client looks there), files under root.

    There is no init system to start it as the ``munge`` user, so it runs as root, which
    munged accepts only with ``--force`` (it otherwise refuses a key owned by ``munge``).
    """
    Path("/run/munge").mkdir(mode=0o755, parents=True, exist_ok=True)
    cmd = [
        need("munged"),
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


# --- queries --------------------------------------------------------------------------------


def node_states(conf: Path, timeout_s: float = 30.0) -> dict[str, str]:
    """Node -> state as sinfo shows it; raises LocalClusterError when slurmctld does not answer."""
    out = subprocess.run(
        [need("sinfo"), "-h", "-N", "-o", "%N %T"],
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


# --- start / stop ---------------------------------------------------------------------------


def start_daemon(paths: Paths, name: str, cmd: list[str]) -> int:
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


def _resume_drained(paths: Paths, states: dict[str, str]) -> None:
    """A drain (e.g. after a failed job kill) survives restarts in the saved state: lift it."""
    drained = [n for n, s in states.items() if s.startswith("drain")]
    if drained:
        subprocess.run(
            [need("scontrol"), "update", f"NodeName={','.join(drained)}", "State=RESUME"],
            env=_slurm_env(paths.conf),
            capture_output=True,
            timeout=30,
        )


def wait_idle(paths: Paths, timeout_s: float) -> dict[str, str]:
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
                + _log_tails(paths, daemon_names())
            )
        time.sleep(0.5)


def stop(
    paths: Paths,
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
                [need("scancel"), f"--partition={PARTITION}"],
                env=_slurm_env(paths.conf),
                capture_output=True,
                timeout=15,
            )
    order = [d for d in [*(f"slurmd-{n}" for n in NODES), "slurmctld", "munged"] if d in live]
    stopped: list[str] = []
    for group in ([d for d in order if d != "munged"], [d for d in order if d == "munged"]):
        _terminate(group, live, notify=notify, timeout_s=timeout_s)
        stopped += group
    state["pids"] = {k: v for k, v in state.get("pids", {}).items() if k not in stopped}
    if "munged" in stopped:
        state["started_munged"] = False
    save_state(paths, state)
    return stopped


def _terminate(group: list[str], live: dict[str, int], *, notify: Notify, timeout_s: float) -> None:
    """SIGTERM every daemon of ``group``, wait for them together, SIGKILL what outlives it."""
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
