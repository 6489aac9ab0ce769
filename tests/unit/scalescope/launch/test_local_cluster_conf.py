"""The local cluster's state directory and the slurm.conf written there, without starting it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalescope.launch import local_cluster_conf as lcc


def test_conf_describes_two_nodes_on_private_paths_and_ports(tmp_path: Path) -> None:
    paths = lcc.Paths(tmp_path)
    conf = lcc.render_conf(paths, "myhost", 18000)
    lines = set(conf.splitlines())
    assert "SlurmctldHost=myhost(127.0.0.1)" in lines
    assert "SlurmctldPort=18000" in lines
    assert "SelectType=select/cons_tres" in lines
    assert "SelectTypeParameters=CR_Core" in lines
    assert "ProctrackType=proctrack/linuxproc" in lines
    assert "TaskPlugin=task/none" in lines
    assert "AccountingStorageType=accounting_storage/none" in lines
    assert "MinJobAge=3600" in lines
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


def test_default_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lcc.ENV_DIR, "/somewhere/cluster")
    assert lcc.default_dir() == Path("/somewhere/cluster")
    monkeypatch.delenv(lcc.ENV_DIR)
    assert lcc.default_dir() == Path.home() / ".cache" / "scalescope" / "local-cluster"
