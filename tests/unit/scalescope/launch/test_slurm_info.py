"""What a sweep reads from Slurm's clients: a shape larger than its partition is refused
before anything is submitted (sinfo), and a job pending for a reason that will not clear is
shown with that reason and its scancel in the live view (squeue's %r). The clients' output
is given as text: the Slurm tier runs them for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import submitit
from rich.console import Console
from sweep_helpers import TRAIN_CONFIG, expect_error, write_profile, write_sweep
from sweep_helpers import sweep_cli as sweep_module_cli

from scalescope.errors import ConfigError
from scalescope.launch import executor, monitor, slurm_info
from scalescope.launch import sweep as sweep_module
from scalescope.launch.cluster import load_profile
from scalescope.launch.executor import Launcher
from scalescope.launch.monitor import SweepWatch, parse_squeue
from scalescope.launch.slurm_info import (
    NodeGroup,
    Partition,
    check_plan_partitions,
    gres_gpus,
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


LOCAL_SINFO = "debug*|2|1-infinite|2|(null)\n"
"""``sinfo --exact --noheader --format=%P|%D|%s|%c|%G`` on the local two-node cluster
(Slurm 22.05): two nodes of 2 CPUs each, no GPUs."""


def test_sinfo_lines_add_up_per_partition() -> None:
    text = (
        "debug*|2|infinite|2|(null)\n"
        "gpu|3|8|64|gpu:a100:4(S:0-1)\n"
        "gpu|5|8|128|gpu:h100:8(S:0-1),nvme:1\n"
        "small|6|1-2|16+|(null)\n"
        "not a line\n"
    )
    parts = parse_sinfo(text)
    assert parts["debug"] == Partition("debug", 2, None, default=True, groups=(NodeGroup(2, 2, 0),))
    assert parts["gpu"].nodes == 8 and parts["gpu"].job_limit == 8
    assert parts["gpu"].groups == (NodeGroup(3, 64, 4), NodeGroup(5, 128, 8))
    assert parts["small"].job_limit == 2  # MaxNodes below the partition's size
    assert parts["small"].groups == (NodeGroup(6, None, 0),)  # "16+": at least 16, not known
    assert not parts["gpu"].default and set(parts) == {"debug", "gpu", "small"}
    assert parse_sinfo(LOCAL_SINFO)["debug"].groups == (NodeGroup(2, 2, 0),)


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("(null)", 0),
        ("gpu:4", 4),
        ("gpu:a100:4(S:0-1)", 4),
        ("gpu:a100:2(S:0),gpu:v100:2(S:1)", 4),
        ("nvme:1,gpu:tesla:8(S:0-3)", 8),
        ("mps:400", 0),
        ("gpu", None),  # a count sinfo does not give: not checked
    ],
)
def test_gpus_per_node_from_the_gres_column(gres: str, gpus: int | None) -> None:
    assert gres_gpus(gres) == gpus


def test_more_tasks_per_node_than_its_nodes_have_cpus_is_refused(in_tmp: Path) -> None:
    """1x4 on nodes of 2 CPUs: sbatch refuses it ("CPU count per node can not be
    satisfied"), after the shapes before it in the order were submitted."""
    plan = _slurm_plan(
        in_tmp, ((1, 1), (1, 4)), PROFILE.replace("devices_per_node: 2", "devices_per_node: 8")
    )
    with pytest.raises(ConfigError) as info:
        check_plan_partitions(plan, parse_sinfo(LOCAL_SINFO))
    assert str(info.value) == (
        "shape 1x4: 4 task(s) per node x 1 CPU(s) per task = 4 CPUs per node, but the nodes "
        "of partition 'debug' have 2 CPUs (sinfo): sbatch would refuse the job (CPU count "
        "per node can not be satisfied); drop the shape, or set max_devices_per_node: 2 in "
        "the profile 'two-nodes'"
    )
    check_plan_partitions(plan, parse_sinfo("debug*|2|1-infinite|4|(null)\n"))  # it fits


def test_the_cpus_each_task_asks_for_count(in_tmp: Path) -> None:
    plan = _slurm_plan(in_tmp, ((1, 1), (1, 2)), PROFILE + "cpus_per_task: 2\n")
    with pytest.raises(ConfigError) as info:
        check_plan_partitions(plan, parse_sinfo(LOCAL_SINFO))
    said = str(info.value)
    assert said.startswith("shape 1x2: 2 task(s) per node x 2 CPU(s) per task = 4 CPUs per node")
    assert said.endswith("set max_devices_per_node: 1 in the profile 'two-nodes'")
    greedy = _slurm_plan(in_tmp, ((1, 1),), PROFILE + "cpus_per_task: 4\n")
    with pytest.raises(ConfigError) as info:
        check_plan_partitions(greedy, parse_sinfo(LOCAL_SINFO))
    assert str(info.value).endswith("or set cpus_per_task: 2 in the profile 'two-nodes'")


def test_only_the_nodes_large_enough_count_for_a_shape(in_tmp: Path) -> None:
    plan = _slurm_plan(
        in_tmp, ((1, 4), (2, 4)), PROFILE.replace("devices_per_node: 2", "devices_per_node: 4")
    )
    mixed = parse_sinfo("debug*|2|infinite|2|(null)\ndebug*|1|infinite|8|(null)\n")
    with pytest.raises(ConfigError) as info:
        check_plan_partitions(plan, mixed)
    assert str(info.value).startswith(
        "shape 2x4: 2 nodes of 4 CPUs each, but only 1 of the 3 nodes of partition 'debug' "
        "has that many (sinfo)"
    )
    check_plan_partitions(
        plan, parse_sinfo("debug*|2|infinite|2+|(null)\n")
    )  # not known: Slurm decides


def test_more_gpus_per_node_than_its_nodes_have_is_refused(in_tmp: Path) -> None:
    gpu_profile = (
        "name: gpus\npartition: gpu\ngpus_per_node: 8\nmax_nodes: 4\n"
        "max_devices_per_node: 8\ncpus_per_task: 4\n"
    )
    sweep = write_sweep(
        in_tmp,
        shapes=((1, 4), (1, 8)),
        train=TRAIN_CONFIG.replace("accelerator: cpu", "accelerator: gpu"),
    )
    plan = plan_sweep(
        load_sweep_config(sweep),
        sweep,
        executor="slurm",
        profile=load_profile(write_profile(in_tmp, gpu_profile)),
        sweep_id="t",
    )
    with pytest.raises(ConfigError) as info:
        check_plan_partitions(plan, parse_sinfo("gpu|4|infinite|64|gpu:a100:4(S:0-1)\n"))
    assert str(info.value) == (
        "shape 1x8: 8 GPUs per node, but the nodes of partition 'gpu' have 4 GPUs (sinfo): "
        "drop the shape, or set max_devices_per_node: 4 in the profile 'gpus'"
    )
    with pytest.raises(
        ConfigError,
        match="shape 1x4: 4 GPUs per node, but the nodes of partition 'gpu' have no GPUs",
    ):
        check_plan_partitions(plan, parse_sinfo("gpu|4|infinite|64|(null)\n"))
    check_plan_partitions(plan, parse_sinfo("gpu|4|infinite|64|gpu:h100:8(S:0-1)\n"))


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
        check_plan_partitions(
            plan, parse_sinfo("debug*|2|infinite|2|(null)\nbig|16|infinite|2|(null)\n")
        )
    assert str(info.value) == (
        "shape 4x1: 4 nodes, but partition 'debug' has 2 node(s) (sinfo): Slurm would leave "
        "the job pending with PartitionNodeLimit; drop the shape, or set max_nodes: 2 in the "
        "profile 'two-nodes'"
    )
    check_plan_partitions(plan, parse_sinfo("debug*|4|infinite|2|(null)\n"))  # it fits: no error
    check_plan_partitions(plan, {})  # sinfo knew no partition: Slurm decides
    capped = parse_sinfo("debug|8|3|2|(null)\n")
    with pytest.raises(ConfigError, match="at most 3 node\\(s\\) \\(MaxNodes\\)"):
        check_plan_partitions(plan, capped)


def test_without_a_partition_the_default_one_counts(in_tmp: Path) -> None:
    plan = _slurm_plan(in_tmp, ((2, 1),), PROFILE.replace("partition: debug\n", ""))
    with pytest.raises(ConfigError, match="partition 'main' has 1 node"):
        check_plan_partitions(
            plan, parse_sinfo("other|8|infinite|2|(null)\nmain*|1|infinite|2|(null)\n")
        )


def test_the_sweep_command_refuses_it_in_one_line(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before a submission, and in a dry run where sinfo answered, the command asks sinfo
    for the partition's nodes. Here the clients' answers are given (the unit tier starts no
    process): the controller answers, and its partition has 2 nodes."""
    monkeypatch.setattr(executor, "slurm_reachable", lambda: (True, "sinfo answered"))
    monkeypatch.setattr(slurm_info, "partition_limits", lambda **_: parse_sinfo(LOCAL_SINFO))
    sweep = write_sweep(in_tmp, shapes=((1, 1), (4, 1)))
    profile = write_profile(in_tmp, PROFILE)
    argv = ("--config", str(sweep), "--cluster", str(profile), "--executor")
    for extra in MODES:
        err = expect_error(in_tmp, capsys, *argv, *extra)
        assert "shape 4x1: 4 nodes, but partition 'debug' has 2 node(s)" in err, extra


MODES = (("auto", "--dry-run"), ("slurm", "--dry-run"), ("slurm", "--wait"), ("auto", "--wait"))


def test_the_sweep_command_refuses_too_many_tasks_per_node_before_submitting(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile that claims 8 devices per node on nodes of 2 CPUs: 1x4 is refused by the
    dry run and the submission alike, before 1x1 is submitted."""
    monkeypatch.setattr(executor, "slurm_reachable", lambda: (True, "sinfo answered"))
    monkeypatch.setattr(slurm_info, "partition_limits", lambda **_: parse_sinfo(LOCAL_SINFO))

    def submit(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("submitted although a shape does not fit")

    monkeypatch.setattr(Launcher, "submit_slurm", submit)
    sweep = write_sweep(in_tmp, shapes=((1, 1), (1, 4)))
    profile = write_profile(in_tmp, PROFILE.replace("devices_per_node: 2", "devices_per_node: 8"))
    argv = ("--config", str(sweep), "--cluster", str(profile), "--executor")
    for extra in MODES:
        err = expect_error(in_tmp, capsys, *argv, *extra)
        assert "shape 1x4: 4 task(s) per node x 1 CPU(s) per task = 4 CPUs per node" in err
        assert "partition 'debug' have 2 CPUs (sinfo)" in err, extra


def test_a_submission_that_fails_midway_records_the_jobs_it_cancelled(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """sbatch refuses the second job (for a reason sinfo could not foresee): the first,
    already submitted, is cancelled, and sweep.json says so with its job id; the job never
    submitted is not left WAITING as if it would still run."""
    monkeypatch.setattr(executor, "slurm_reachable", lambda: (True, "sinfo answered"))
    monkeypatch.setattr(slurm_info, "partition_limits", lambda **_: None)
    cancelled: list[str] = []

    class FakeJob(submitit.Job):  # type: ignore[type-arg]
        def cancel(self, check: bool = True) -> None:
            cancelled.append(str(self.job_id))

    def submit(self: Launcher, handle: Any, after: str | None = None) -> None:
        if handle.shape.devices_per_node == 2:
            raise submitit.core.utils.FailedJobError(
                "sbatch: error: Memory specification can not be satisfied\n"
                "sbatch: error: Batch job submission failed: Requested node configuration "
                "is not available"
            )
        handle.job = FakeJob(self.folder, "11", tasks=(0,))

    monkeypatch.setattr(Launcher, "submit_slurm", submit)
    sweep = write_sweep(in_tmp, shapes=((1, 1), (1, 2)), extra="repeats: 1\norder_seed: 1\n")
    profile = write_profile(in_tmp, PROFILE)
    rc = sweep_module_cli(
        "--config",
        str(sweep),
        "--cluster",
        str(profile),
        "--executor",
        "slurm",
        "--sweep-id",
        "midway",
    )
    err = capsys.readouterr().err
    assert rc == 2, err
    assert (
        "submitting shape 1x2 repeat 0 failed: sbatch: Memory specification can not be "
        "satisfied; Batch job submission failed: Requested node configuration is not available"
    ) in err
    assert "cancelled job 11, already submitted" in err, err
    assert cancelled == ["11"]
    manifest = json.loads((in_tmp / "outputs" / "sweeps" / "midway" / "sweep.json").read_text())
    jobs = {j["shape"]: j for j in manifest["jobs"]}
    assert jobs["1x1"]["job_id"] == "11" and jobs["1x1"]["state"] == "CANCELLED", jobs
    assert "submitting shape 1x2 repeat 0 failed" in jobs["1x1"]["detail"], jobs
    assert jobs["1x2"]["job_id"] is None and jobs["1x2"]["state"] == "CANCELLED", jobs
    assert jobs["1x2"]["detail"].startswith("not submitted: sbatch: Memory specification"), jobs


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
    monkeypatch.setattr(monitor, "squeue_states", lambda ids, timeout_s: parse_squeue(queue))
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
