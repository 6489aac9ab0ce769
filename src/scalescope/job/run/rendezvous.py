"""Fail fast at the rendezvous: before the process group starts, check the host every rank
will meet at.

A multi-rank job's ranks meet at one host and port (``MASTER_ADDR``/``MASTER_PORT``; under
Slurm, Lightning takes the first node of the job's node list when ``MASTER_ADDR`` is unset).
Where the compute nodes cannot resolve or reach that host, torch.distributed retries quietly
until its start-up timeout, printing at most "The IPv6 network addresses of (node2, 25050)
cannot be retrieved": minutes of silence. This check takes seconds:

* every rank resolves the host (bounded: a DNS lookup that hangs counts as a failure);
* global rank 0 binds the port (something else holding it would stop the store);
* the other ranks reach the host: a TCP connection to the port that is accepted or refused
  (rank 0's store may not be up yet: a refusal still proves the host answers), retried until
  ``reach_s`` has passed; only silence (no route, a firewall) fails.

A failure raises :class:`RendezvousError`: one line naming the host, where it came from,
what failed and the setting that fixes it.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import TopologyError

RESOLVE_S = 10.0
REACH_S = 20.0


class RendezvousError(TopologyError):
    """The rendezvous host cannot be resolved, bound or reached from this rank."""


@dataclass(frozen=True)
class Rendezvous:
    host: str
    port: int
    source: str
    """Where the host came from: ``MASTER_ADDR``, or the Slurm node list."""


def target(launcher: str, env: Mapping[str, str] | None = None) -> Rendezvous | None:
    """The host and port this rank will meet its peers at, as Lightning will pick them;
    None where the launcher starts the ranks on this machine itself (nothing to resolve)."""
    env = os.environ if env is None else env
    if launcher != "slurm":
        return None
    port = int(env.get("MASTER_PORT") or 0)
    if env.get("MASTER_ADDR"):
        return Rendezvous(env["MASTER_ADDR"], port, "MASTER_ADDR")
    from lightning.fabric.plugins.environments import SLURMEnvironment

    nodelist = env.get("SLURM_NODELIST") or env.get("SLURM_JOB_NODELIST") or ""
    host = SLURMEnvironment.resolve_root_node_address(nodelist)
    return Rendezvous(host, port, "the first node of the Slurm node list (MASTER_ADDR unset)")


def _within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()`` in a thread, or TimeoutError after ``seconds`` (getaddrinfo cannot be
    interrupted; the thread is left to finish on its own)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=run, name="scalescope-rendezvous-check", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


MASTER_ADDR_HINT = "export MASTER_ADDR=$(hostname -I | awk '{print $1}')"
"""The line that names the rendezvous host by address, for a cluster profile's ``setup:``. The
batch script runs that block on the job's first node, where rank 0 listens, before ``srun``
starts the ranks with its environment: this gives that node's first address that is not
loopback (``hostname -I`` leaves loopback out). ``hostname -i`` resolves the node's own name
instead, which is 127.0.0.1 or 127.0.1.1 on many machines: an address no other node reaches.
The one spelling of it: the job's error says it and docs/cluster.md quotes it (a test holds
them equal)."""

FIX = (
    "set MASTER_ADDR to an address every compute node resolves and reaches, in the cluster "
    f"profile's setup: {MASTER_ADDR_HINT} (the first node's first address that is not "
    "loopback; where the nodes have several networks, its address on the one they share)"
)


def check(
    rv: Rendezvous,
    *,
    rank: int,
    node: str,
    resolve_s: float = RESOLVE_S,
    reach_s: float = REACH_S,
) -> None:
    """Raise :class:`RendezvousError` where this rank cannot use ``rv`` (see the module doc)."""
    where = f"rendezvous host {rv.host!r} ({rv.source}), port {rv.port}"
    try:
        addresses = _within(
            resolve_s, lambda: socket.getaddrinfo(rv.host, rv.port, type=socket.SOCK_STREAM)
        )
    except (OSError, TimeoutError) as exc:
        raise RendezvousError(
            f"{where}: does not resolve on {node} (rank {rank}: {exc}); {FIX}"
        ) from None
    if rank == 0:
        _bind(rv, where, addresses)
        return
    _reach(rv, where, addresses, node, rank, reach_s)


def _bind(rv: Rendezvous, where: str, addresses: list[Any]) -> None:
    family = addresses[0][0] if addresses else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", rv.port))
        except OSError as exc:
            hint = (
                "another process holds it: set MASTER_PORT to a free port"
                if exc.errno == errno.EADDRINUSE
                else "set MASTER_PORT to a port this node may bind"
            )
            raise RendezvousError(f"{where}: rank 0 cannot bind the port ({exc}); {hint}") from None


def _reach(
    rv: Rendezvous, where: str, addresses: list[Any], node: str, rank: int, reach_s: float
) -> None:
    deadline = time.monotonic() + reach_s
    last: str = "no answer"
    while True:
        for family, kind, proto, _, address in addresses:
            with socket.socket(family, kind, proto) as s:
                s.settimeout(max(0.5, min(3.0, deadline - time.monotonic())))
                try:
                    s.connect(address)
                    return  # accepted: rank 0's store is up
                except ConnectionRefusedError:
                    return  # the host answered; its store is not up yet
                except OSError as exc:
                    last = str(exc) or type(exc).__name__
        if time.monotonic() >= deadline:
            raise RendezvousError(
                f"{where}: not reachable from {node} (rank {rank}) within {reach_s:g} s "
                f"({last}); {FIX}, and check that the nodes' firewall lets the port through "
                "(or set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME to the interface they share)"
            )
        time.sleep(0.5)
