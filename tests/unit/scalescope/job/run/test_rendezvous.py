"""The rendezvous check before the process group starts (scalescope.job.run.rendezvous): on
loopback sockets and a name under the reserved .invalid domain only."""

from __future__ import annotations

import socket

import pytest

from scalescope.job.run.rendezvous import Rendezvous, RendezvousError, check, target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_host_comes_from_master_addr_else_the_first_node_of_the_node_list() -> None:
    env = {"MASTER_PORT": "25050", "SLURM_NODELIST": "node[2-3]"}
    assert target("slurm", env) == Rendezvous(
        "node2", 25050, "the first node of the Slurm node list (MASTER_ADDR unset)"
    )
    assert target("slurm", {**env, "MASTER_ADDR": "10.0.0.7"}) == Rendezvous(
        "10.0.0.7", 25050, "MASTER_ADDR"
    )
    assert target("local", env) is None  # ranks started here, on loopback


def test_a_host_that_does_not_resolve_is_one_line_with_the_fix() -> None:
    rv = Rendezvous("node2.invalid", 25050, "MASTER_ADDR")
    with pytest.raises(RendezvousError) as info:
        check(rv, rank=1, node="node1", resolve_s=10)
    message = str(info.value)
    assert message.startswith("rendezvous host 'node2.invalid' (MASTER_ADDR), port 25050: ")
    assert "does not resolve on node1 (rank 1:" in message
    assert "set MASTER_ADDR to an address every compute node resolves" in message
    assert "\n" not in message


def test_rank_zero_cannot_bind_a_port_another_process_holds() -> None:
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(RendezvousError) as info:
            check(Rendezvous("127.0.0.1", port, "MASTER_ADDR"), rank=0, node="n")
    assert "rank 0 cannot bind the port" in str(info.value)
    assert "set MASTER_PORT to a free port" in str(info.value)
    check(Rendezvous("127.0.0.1", _free_port(), "MASTER_ADDR"), rank=0, node="n")  # free: fine


def test_a_host_that_refuses_or_accepts_is_reachable() -> None:
    """Rank 0's store may not be up yet: a refused connection proves the host answers."""
    check(Rendezvous("127.0.0.1", _free_port(), "MASTER_ADDR"), rank=1, node="n", reach_s=2)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        rv = Rendezvous("127.0.0.1", server.getsockname()[1], "MASTER_ADDR")
        check(rv, rank=1, node="n", reach_s=2)


def test_the_error_and_the_docs_give_one_hint_and_it_is_not_loopback() -> None:
    """The job's error and docs/cluster.md spell the same MASTER_ADDR line (defined once),
    and it takes the node's address, not what its own name resolves to (``hostname -i``:
    127.0.0.1 on many machines)."""
    from pathlib import Path

    from scalescope.job.run.rendezvous import MASTER_ADDR_HINT

    repo = Path(__file__).resolve().parents[5]
    with pytest.raises(RendezvousError) as info:
        check(Rendezvous("node2.invalid", 25050, "MASTER_ADDR"), rank=1, node="n", resolve_s=10)
    assert MASTER_ADDR_HINT in str(info.value)
    docs = (repo / "docs" / "cluster.md").read_text(encoding="utf-8")
    assert f"`{MASTER_ADDR_HINT}`" in docs
    example = (repo / "configs" / "clusters" / "example_a100.yaml").read_text(encoding="utf-8")
    assert MASTER_ADDR_HINT in example
    assert "hostname -I" in MASTER_ADDR_HINT and "hostname -i" not in MASTER_ADDR_HINT
