"""What a sweep reads from Slurm's clients: a shape larger than its partition is refused
before anything is submitted (sinfo), and a job pending for a reason that will not clear is
shown with that reason and its scancel in the live view (squeue's %r). The clients' output
is given as text: the Slurm tier runs them for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import submitit
from rich.console import Console
from sweep_helpers import expect_error, write_profile, write_sweep

from scalescope.errors import ConfigError
from scalescope.launch import executor, monitor, slurm_info
from scalescope.launch import sweep as sweep_module
from scalescope.launch.cluster import load_profile
from scalescope.launch.executor import Launcher
from scalescope.launch.monitor import SweepWatch, parse_squeue
from scalescope.launch.slurm_info import (
    Partition,
    check_plan_partitions,
    parse_sinfo,
    pending_note,
    stuck_reason,
)
from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

PROFILE = """\
name: two-nodes
partition: debug
max_nodes: 4
max_devices_per_node: 2
"""


def test_sinfo_lines_add_up_per_partition() -> None:
    text = "debug*|2|infinite\ngpu|3|8\ngpu|5|8\nsmall|6|1-2\nnot a line\n"
    parts = parse_sinfo(text)
    assert parts["debug"] == Partition("debug", 2, None, default=True)
    assert parts["gpu"].nodes == 8 and parts["gpu"].job_limit == 8
    assert parts["small"].job_limit == 2  # MaxNodes below the partition's size
    assert not parts["gpu"].default and set(parts) == {"debug", "gpu", "small"}


def _slurm_plan(root: Path, shapes: tuple[tuple[int, int], ...], profile: str = PROFILE) -> Any:
    sweep = write_sweep(root, shapes=shapes)
    return plan_sweep(
        load_sweep_config(sweep),
        sweep,
        executor="slurm",
        profile=load_profile(write_profile(root, profile)),
        sweep_id="t",
    )


def test_a_shape_over_the_partitions_nodes_is_refused(in_tmp: Path) -> None:
    plan = _slurm_plan(in_tmp, ((1, 1), (2, 1), (4, 1)))
    with pytest.raises(ConfigError) as info:
        check_plan_partitions(plan, parse_sinfo("debug*|2|infinite\nbig|16|infinite\n"))
    assert str(info.value) == (
        "shape 4x1: 4 nodes, but partition 'debug' has 2 node(s) (sinfo): Slurm would leave "
        "the job pending with PartitionNodeLimit; drop the shape, or set max_nodes: 2 in the "
        "profile 'two-nodes'"
    )
    check_plan_partitions(plan, parse_sinfo("debug*|4|infinite\n"))  # it fits: no error
    check_plan_partitions(plan, {})  # sinfo knew no partition: Slurm decides
    capped = parse_sinfo("debug|8|3\n")
    with pytest.raises(ConfigError, match="at most 3 node\\(s\\) \\(MaxNodes\\)"):
        check_plan_partitions(plan, capped)


def test_without_a_partition_the_default_one_counts(in_tmp: Path) -> None:
    plan = _slurm_plan(in_tmp, ((2, 1),), PROFILE.replace("partition: debug\n", ""))
    with pytest.raises(ConfigError, match="partition 'main' has 1 node"):
        check_plan_partitions(plan, parse_sinfo("other|8|infinite\nmain*|1|infinite\n"))


def test_the_sweep_command_refuses_it_in_one_line(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before a submission, and in a dry run where sinfo answered, the command asks sinfo
    for the partition's nodes. Here the clients' answers are given (the unit tier starts no
    process): the controller answers, and its partition has 2 nodes."""
    monkeypatch.setattr(executor, "slurm_reachable", lambda: (True, "sinfo answered"))
    monkeypatch.setattr(slurm_info, "partition_limits", lambda: parse_sinfo("debug*|2|infinite\n"))
    sweep = write_sweep(in_tmp, shapes=((1, 1), (4, 1)))
    profile = write_profile(in_tmp, PROFILE)
    argv = ("--config", str(sweep), "--cluster", str(profile), "--executor")
    for extra in (("auto", "--dry-run"), ("slurm", "--wait"), ("auto", "--wait")):
        err = expect_error(in_tmp, capsys, *argv, *extra)
        assert "shape 4x1: 4 nodes, but partition 'debug' has 2 node(s)" in err, extra


@pytest.mark.parametrize(
    ("reason", "stuck"),
    [
        ("PartitionNodeLimit", True),
        ("ReqNodeNotAvail, UnavailableNodes:node[3-4]", True),
        ("AssocMaxNodesPerJobLimit", True),
        ("QOSMaxWallDurationPerJobLimit", True),
        ("Resources", False),
        ("Priority", False),
        ("Dependency", False),
        ("AssocGrpNodeLimit", False),  # an aggregate: clears as other jobs end
        ("QOSMaxJobsPerUserLimit", False),
        (None, False),
    ],
)
def test_which_pending_reasons_will_not_clear(reason: str | None, stuck: bool) -> None:
    assert (stuck_reason(reason) is not None) == stuck
    note = pending_note("123", "PENDING", reason)
    assert (note is not None) == stuck
    if note is not None:
        assert note.startswith(f"pending: {reason} (") and note.endswith("scancel 123 cancels it")
    assert pending_note("123", "RUNNING", reason) is None


def test_squeue_lines_keep_the_whole_reason() -> None:
    text = (
        "41|PENDING|0:00|PartitionNodeLimit\n"
        "42|RUNNING|1:05|None\n"
        "43|PENDING|0:00|ReqNodeNotAvail, UnavailableNodes:node[1-2]\n"
    )
    assert parse_squeue(text) == {
        "41": ("PENDING", 0.0, "PartitionNodeLimit"),
        "42": ("RUNNING", 65.0, None),
        "43": ("PENDING", 0.0, "ReqNodeNotAvail, UnavailableNodes:node[1-2]"),
    }


def test_the_live_view_shows_a_stuck_job_with_its_reason_and_scancel(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _slurm_plan(in_tmp, ((1, 1), (2, 1)))
    watch = SweepWatch(plan, Launcher(plan))
    for i, h in enumerate(watch.handles):
        h.job = submitit.Job(in_tmp, str(41 + i), tasks=(0,))
        watch.status_of(h).state = "PENDING"
    reasons = {"42": "PartitionNodeLimit"}  # every other job waits for resources
    queue = "".join(
        f"{h.job_id}|PENDING|0:00|{reasons.get(h.job_id or '', 'Resources')}\n"
        for h in watch.handles
    )
    monkeypatch.setattr(monitor, "squeue_states", lambda ids: parse_squeue(queue))
    changed = watch.poll()  # one refresh
    assert [h.job_id for h in changed] == ["42"]  # the state stayed PENDING: the reason counts
    assert watch.poll() == []  # said once, not at every refresh
    console = Console(record=True, width=240)
    console.print(sweep_module.status_table(watch))
    text = console.export_text()
    stuck = next(line for line in text.splitlines() if " 42 " in line)
    assert "PartitionNodeLimit" in stuck and "scancel 42 cancels it" in stuck
    waiting = next(line for line in text.splitlines() if " 41 " in line)
    assert "scancel" not in waiting and "Resources" not in waiting
    line = sweep_module._line(changed[0], watch.status_of(changed[0]))  # not a terminal
    assert "PENDING" in line and "PartitionNodeLimit" in line and "scancel 42" in line
