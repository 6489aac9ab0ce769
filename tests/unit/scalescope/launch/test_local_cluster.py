"""The local cluster without starting it: its state folder, its command line, and the rule
that a recycled pid is never signalled."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from scalescope.launch import local_cluster as lc


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


def test_parser_accepts_the_three_actions() -> None:
    p = argparse.ArgumentParser()
    lc.add_arguments(p)
    for action in ("up", "down", "status"):
        assert p.parse_args([action]).action == action
