"""Rank 0 of a local multi-process run: its child ranks, started early and ended when every
rank stops on purpose.

Lightning's local launcher re-executes the command for ranks 1..N-1 when ``fit`` starts and
watches them from a thread in rank 0 (``_ChildProcessObserver``, every 5 s). Two things here:

* :func:`start_local_ranks` starts those ranks as soon as rank 0 has checked its input and
  imported torch, before it imports Lightning and builds the model, with the variables
  Lightning would give them; :func:`adopting_ddp` hands them to Lightning's launcher, which
  then watches them exactly as if it had started them. The ranks' start-up (importing torch
  and Lightning, about 5 s of one core each) then overlaps rank 0's instead of following it.
  Children not yet handed over when rank 0 exits (a refused Comet key, an error while
  building the model) are ended with it.
* :func:`take_over_from_observer`: when a child has exited non-zero, the observer SIGKILLs
  every child *and rank 0 itself*. When every rank exits non-zero on purpose (130 after
  Ctrl-C, 143 after SIGTERM, 2 for a check every rank fails alike), a rank 0 still tearing
  down when the observer wakes (atexit handlers, a busy machine) died with -9 instead of its
  own status. This disarms the observer and does its useful part: wait for the children,
  kill the ones that do not end.

Under srun or submitit every rank is started by the launcher, and nothing here runs.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

OBSERVER_CLASS = "_ChildProcessObserver"


def _observers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if type(t).__name__ == OBSERVER_CLASS]


def take_over_from_observer(grace_s: float = 10.0) -> int:
    """Disarm Lightning's child observer; wait up to ``grace_s`` for the children it watched,
    then SIGKILL the ones still running. Returns how many had to be killed."""
    children: list[Any] = []
    for observer in _observers():
        # Instance attributes shadow the methods its loop calls: a call already under way
        # finds a no-op kill, and its next wake-up ends the loop without signalling anyone.
        observer._terminate_all = lambda: None  # type: ignore[attr-defined]
        observer._run = lambda: True  # type: ignore[attr-defined]
        children += list(getattr(observer, "_child_processes", []))
    return _wait_or_kill([p for p in children if isinstance(p, subprocess.Popen)], grace_s)


def _wait_or_kill(procs: list[subprocess.Popen[bytes]], grace_s: float) -> int:
    """Wait up to ``grace_s`` for ``procs`` to end, SIGKILL the rest; how many were killed."""
    deadline = time.monotonic() + grace_s
    killed = 0
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            killed += 1
    return killed


@dataclass
class StartedRanks:
    """Ranks 1..N-1 of a local run, started by rank 0 before Lightning's launcher runs."""

    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    adopted: bool = False
    """Handed to Lightning's launcher: from then on its observer and teardown own them."""

    def end_unadopted(self, grace_s: float = 5.0) -> None:
        """End children rank 0 never handed over (it is exiting before ``fit``)."""
        if self.adopted:
            return
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
        _wait_or_kill(self.procs, grace_s)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _this_command() -> list[str]:
    """The command this process runs, as Lightning's launcher re-executes it."""
    import __main__

    spec = getattr(__main__, "__spec__", None)
    if spec is None:
        return [sys.executable, os.path.abspath(sys.argv[0]), *sys.argv[1:]]
    return [sys.executable, "-m", spec.name, *sys.argv[1:]]


def start_local_ranks(
    world_size: int, env: MutableMapping[str, str] | None = None
) -> StartedRanks | None:
    """On rank 0 of a plain local run of ``world_size`` > 1 processes (no launcher set
    LOCAL_RANK), start ranks 1..N-1 now, each with LOCAL_RANK, NODE_RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT as Lightning's launcher sets them; this process gets the same
    address and port. Returns None where there is nothing to start."""
    env = os.environ if env is None else env
    if world_size < 2 or "LOCAL_RANK" in env:
        return None
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(_free_port()))
    started = StartedRanks()
    atexit.register(started.end_unadopted)
    command = _this_command()
    for local_rank in range(1, world_size):
        child_env = {
            **env,
            "NODE_RANK": "0",
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(world_size),
        }
        started.procs.append(subprocess.Popen(command, env=child_env))
    return started


def adopting_ddp(started: StartedRanks, **ddp_kwargs: Any) -> Any:
    """A DDPStrategy whose launcher takes ``started``'s ranks instead of starting its own
    (everything else, its process observer included, is Lightning's)."""
    from lightning.pytorch.strategies import DDPStrategy

    return adopting(DDPStrategy, started, **ddp_kwargs)


def adopting(strategy_cls: type, started: StartedRanks, **kwargs: Any) -> Any:
    """``strategy_cls`` (DDPStrategy, or a ModelParallelStrategy under FSDP: both start the
    extra ranks with Lightning's subprocess-script launcher) built with ``kwargs``, its
    launcher taking ``started``'s ranks instead of starting its own."""
    from lightning.pytorch.strategies.launchers.subprocess_script import (
        _SubprocessScriptLauncher,
    )

    class _AdoptingLauncher(_SubprocessScriptLauncher):
        def _call_children_scripts(self) -> None:
            self._check_can_spawn_children()
            os.environ["MASTER_ADDR"] = self.cluster_environment.main_address
            os.environ["MASTER_PORT"] = str(self.cluster_environment.main_port)
            os.environ["NODE_RANK"] = str(self.cluster_environment.node_rank())
            os.environ["LOCAL_RANK"] = str(self.cluster_environment.local_rank())
            os.environ["WORLD_SIZE"] = f"{self.num_processes * self.num_nodes}"
            if len(started.procs) != self.num_processes - 1:
                raise RuntimeError(
                    f"{len(started.procs) + 1} ranks were started for {self.num_processes} devices"
                )
            self.procs = list(started.procs)
            started.adopted = True

    class _Adopting(strategy_cls):  # type: ignore[valid-type, misc]
        def _configure_launcher(self) -> None:
            super()._configure_launcher()
            if type(self._launcher) is _SubprocessScriptLauncher:
                self._launcher = _AdoptingLauncher(
                    self.cluster_environment, self.num_processes, self.num_nodes
                )

    _Adopting.__name__ = _Adopting.__qualname__ = f"_Adopting{strategy_cls.__name__}"
    return _Adopting(**kwargs)
