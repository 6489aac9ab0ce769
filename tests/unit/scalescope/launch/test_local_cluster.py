"""The local cluster without starting it: its slurm.conf, its state folder, its command line,
and the rule that a recycled pid is never signalled."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from scalescope.launch import local_cluster as lc


def test_conf_describes_two_nodes_on_private_paths_and_ports(tmp_path: Path) -> None:
    paths = lc._Paths(tmp_path)
    conf = lc.render_conf(paths, "myhost", 18000)
    lines = set(conf.splitlines())
    assert "SlurmctldHost=myhost(127.0.0.1)" in lines
    assert "SlurmctldPort=18000" in lines
    assert "SelectType=select/cons_tres" in lines
    assert "SelectTypeParameters=CR_Core" in lines
    assert "ProctrackType=proctrack/linuxproc" in lines
    assert "TaskPlugin=task/none" in lines
    assert "AccountingStorageType=accounting_storage/none" in lines
    assert "MinJobAge=600" in lines
    node_line = next(line for line in lines if line.startswith("NodeName="))
    assert node_line.startswith("NodeName=node[1-2] NodeHostname=myhost NodeAddr=127.0.0.1")
    assert "Port=[18001-18002]" in node_line
    assert "CPUs=2" in node_line
    assert any(line.startswith("PartitionName=debug ") and "Default=YES" in line for line in lines)
    # Every file the daemons write is under the one directory.
    for line in lines:
        key, _, value = line.partition("=")
        if key.endswith(("File", "Dir", "Location")):
            assert value.startswith(str(tmp_path)), line


def test_down_and_status_without_a_cluster_do_nothing(tmp_path: Path) -> None:
    assert lc.down(tmp_path / "never-started") == []
    info = lc.status(tmp_path / "never-started")
    assert not info.running and info.daemons == {}
    assert info.export_line == f"export SLURM_CONF={tmp_path / 'never-started' / 'slurm.conf'}"


def test_a_recycled_pid_is_never_signalled(tmp_path: Path) -> None:
    """The state file names this test process: it is not a slurmd of ours, so down skips it."""
    tmp_path.joinpath("cluster.json").write_text(
        json.dumps({"pids": {"slurmctld": os.getpid(), "slurmd-node1": os.getpid()}})
    )
    assert lc.down(tmp_path) == []
    assert not lc.status(tmp_path).daemons


def test_default_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lc.ENV_DIR, "/somewhere/cluster")
    assert lc.default_dir() == Path("/somewhere/cluster")
    monkeypatch.delenv(lc.ENV_DIR)
    assert lc.default_dir() == Path.home() / ".cache" / "scalescope" / "local-cluster"


def test_parser_accepts_the_three_actions() -> None:
    p = argparse.ArgumentParser()
    lc.add_arguments(p)
    for action in ("up", "down", "status"):
        assert p.parse_args([action]).action == action
