"""Topology detection from realistic launcher environments (passed as dicts, never os.environ),
and the variables handed to Lightning."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.errors import TopologyError
from scalescope.job.run.topology import (
    Topology,
    detect,
    export_for_lightning,
    master_port_for,
    under_slurm,
)


def srun_env(**changes: str | None) -> dict[str, str]:
    """What srun sets for task 6 of `sbatch --nodes=2 --ntasks-per-node=4` (node 2 of 2)."""
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "scalescope-spiral",
        "SLURM_JOB_NODELIST": "gpu[017-018]",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NTASKS": "8",
        "SLURM_NTASKS_PER_NODE": "4",
        "SLURM_TASKS_PER_NODE": "4(x2)",
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_PROCID": "6",
        "SLURM_LOCALID": "2",
        "SLURM_NODEID": "1",
        "SLURMD_NODENAME": "gpu018",
        "SLURM_CPUS_PER_TASK": "8",
        "HOME": "/home/u",
    }
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def submitit_local_env(**changes: str) -> dict[str, str]:
    """What submitit's LocalExecutor sets for task 1 of 2."""
    env = {
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_GLOBALID": "1",
        "SUBMITIT_LOCAL_LOCALID": "1",
        "SUBMITIT_LOCAL_JOB_ID": "31337",
        "SUBMITIT_FOLDER": "/tmp/sweeps/x/%j",
        "HOME": "/home/u",
    }
    env.update(changes)
    return env


# --- Slurm ---------------------------------------------------------------------------------


def test_srun_task_on_second_node() -> None:
    topo = detect(env=srun_env())
    assert topo == Topology(
        launcher="slurm",
        num_nodes=2,
        devices_per_node=4,
        global_rank=6,
        local_rank=2,
        node_rank=1,
        job_id="4242",
        array_job_id=None,
        array_task_id=None,
        restart_count=0,
    )
    assert topo.world_size == 8
    assert not topo.is_rank_zero
    assert topo.run_id == "4242.r0"


def test_srun_rank_zero() -> None:
    topo = detect(env=srun_env(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0"))
    assert topo.is_rank_zero
    assert (topo.global_rank, topo.local_rank, topo.node_rank) == (0, 0, 0)


def test_requested_shape_matching_the_allocation_is_accepted() -> None:
    topo = detect(devices=4, num_nodes=2, env=srun_env())
    assert (topo.num_nodes, topo.devices_per_node) == (2, 4)


def test_array_task_and_restart_make_the_run_id() -> None:
    env = srun_env(
        SLURM_JOB_ID="4250",
        SLURM_ARRAY_JOB_ID="4242",
        SLURM_ARRAY_TASK_ID="3",
        SLURM_RESTART_COUNT="2",
    )
    topo = detect(env=env)
    assert topo.job_id == "4250"
    assert topo.array_job_id == "4242"
    assert topo.array_task_id == 3
    assert topo.restart_count == 2
    assert topo.run_id == "4242_3.r2"


def test_requeued_job_gets_a_new_run_id() -> None:
    first = detect(env=srun_env())
    again = detect(env=srun_env(SLURM_RESTART_COUNT="1"))
    assert first.run_id == "4242.r0"
    assert again.run_id == "4242.r1"


def test_array_tasks_of_one_job_get_distinct_run_ids() -> None:
    ids = {
        detect(
            env=srun_env(
                SLURM_JOB_ID=str(5000 + i), SLURM_ARRAY_JOB_ID="5000", SLURM_ARRAY_TASK_ID=str(i)
            )
        ).run_id
        for i in range(4)
    }
    assert ids == {"5000_0.r0", "5000_1.r0", "5000_2.r0", "5000_3.r0"}


def test_devices_mismatch_hints_at_ntasks_per_node() -> None:
    with pytest.raises(TopologyError) as info:
        detect(devices=2, env=srun_env())
    message = str(info.value)
    assert "trainer.devices=2" in message
    assert "4 task(s) per node" in message
    assert "--ntasks-per-node=2" in message
    assert "\n" not in message


def test_nodes_mismatch_hints_at_nodes() -> None:
    with pytest.raises(TopologyError) as info:
        detect(num_nodes=4, env=srun_env())
    message = str(info.value)
    assert "trainer.num_nodes=4" in message
    assert "2 node(s)" in message
    assert "--nodes=4" in message


def test_multi_task_job_outside_srun_is_refused() -> None:
    env = srun_env(SLURM_STEP_ID=None, SLURM_STEPID=None)
    with pytest.raises(TopologyError) as info:
        detect(env=env)
    message = str(info.value)
    assert "srun" in message
    assert "8 tasks" in message


def test_single_task_batch_step_without_srun_is_fine() -> None:
    env = srun_env(
        SLURM_STEP_ID=None,
        SLURM_STEPID=None,
        SLURM_NTASKS="1",
        SLURM_NNODES="1",
        SLURM_PROCID="0",
        SLURM_LOCALID="0",
        SLURM_NODEID="0",
    )
    topo = detect(env=env)
    assert (topo.launcher, topo.world_size) == ("slurm", 1)


def test_old_style_step_id_variable_counts_as_srun() -> None:
    topo = detect(env=srun_env(SLURM_STEP_ID=None))  # SLURM_STEPID alone
    assert topo.world_size == 8


def test_uneven_tasks_over_nodes_is_refused() -> None:
    with pytest.raises(TopologyError, match="--ntasks-per-node"):
        detect(env=srun_env(SLURM_NTASKS="7"))


def test_node_count_falls_back_to_job_num_nodes() -> None:
    topo = detect(env=srun_env(SLURM_NNODES=None))
    assert topo.num_nodes == 2
    topo = detect(env=srun_env(SLURM_NNODES=None, SLURM_JOB_NUM_NODES=None, SLURM_NTASKS="4"))
    assert (topo.num_nodes, topo.devices_per_node) == (1, 4)


def test_non_integer_slurm_variable_is_named() -> None:
    with pytest.raises(TopologyError, match=r"SLURM_PROCID='six'"):
        detect(env=srun_env(SLURM_PROCID="six"))


@pytest.mark.parametrize("name", ["bash", "interactive"])
def test_interactive_allocation_is_not_a_slurm_run(name: str) -> None:
    env = srun_env(SLURM_JOB_NAME=name, SLURM_NTASKS="1", SCALESCOPE_JOB_ID="local-x")
    assert not under_slurm(env)
    topo = detect(env=env)
    assert topo.launcher == "local"
    assert topo.world_size == 1
    assert topo.job_id == "local-x"


def test_under_slurm_needs_ntasks() -> None:
    assert under_slurm(srun_env())
    assert not under_slurm(srun_env(SLURM_NTASKS=None))
    assert not under_slurm({})


# --- submitit local ---------------------------------------------------------------------------


def test_submitit_local_task() -> None:
    topo = detect(env=submitit_local_env())
    assert topo == Topology(
        launcher="submitit-local",
        num_nodes=1,
        devices_per_node=2,
        global_rank=1,
        local_rank=1,
        node_rank=0,
        job_id="local-31337",
        array_job_id=None,
        array_task_id=None,
        restart_count=0,
    )
    assert topo.run_id == "local-31337.r0"


def test_submitit_local_wins_over_an_enclosing_allocation() -> None:
    """A local sweep launched from inside `salloc` still runs its own local tasks."""
    env = {**srun_env(), **submitit_local_env()}
    assert detect(env=env).launcher == "submitit-local"


def test_submitit_local_devices_mismatch() -> None:
    with pytest.raises(TopologyError, match="submitit started 2 local task"):
        detect(devices=4, env=submitit_local_env())


def test_submitit_local_is_one_node() -> None:
    with pytest.raises(TopologyError, match=r"trainer\.num_nodes=2"):
        detect(num_nodes=2, env=submitit_local_env())


def test_export_for_submitit_local_sets_the_ddp_group() -> None:
    topo = detect(env=submitit_local_env())
    env: dict[str, str] = {"PATH": "/usr/bin"}
    export_for_lightning(topo, env)
    assert env == {
        "PATH": "/usr/bin",
        "LOCAL_RANK": "1",
        "NODE_RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port_for("local-31337")),
    }


def test_export_keeps_an_address_and_port_set_by_the_user() -> None:
    topo = detect(env=submitit_local_env())
    env = {"MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"}
    export_for_lightning(topo, env)
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.5", "29500")
    assert env["LOCAL_RANK"] == "1"


def test_export_for_slurm_sets_only_the_port() -> None:
    topo = detect(env=srun_env())
    env: dict[str, str] = {}
    export_for_lightning(topo, env)
    assert env == {"MASTER_PORT": str(master_port_for("4242"))}
    kept = {"MASTER_PORT": "12000"}
    export_for_lightning(topo, kept)
    assert kept == {"MASTER_PORT": "12000"}


def test_export_for_plain_local_sets_nothing() -> None:
    topo = detect(devices=2, env={"SCALESCOPE_JOB_ID": "local-1"})
    env: dict[str, str] = {}
    export_for_lightning(topo, env)
    assert env == {}


# --- plain local ---------------------------------------------------------------------------------


def test_plain_local_defaults() -> None:
    topo = detect(env={"SCALESCOPE_JOB_ID": "local-abc"})
    assert (topo.launcher, topo.num_nodes, topo.devices_per_node) == ("local", 1, 1)
    assert topo.is_rank_zero
    assert topo.run_id == "local-abc.r0"


def test_plain_local_child_rank_from_lightning() -> None:
    topo = detect(devices=2, env={"SCALESCOPE_JOB_ID": "local-abc", "LOCAL_RANK": "1"})
    assert (topo.world_size, topo.global_rank, topo.local_rank) == (2, 1, 1)
    assert not topo.is_rank_zero


def test_plain_local_generates_a_local_job_id() -> None:
    topo = detect(env={})
    assert topo.job_id.startswith("local-")
    assert topo.run_id.endswith(".r0")


@pytest.mark.parametrize("nodes", [2, 8])
def test_plain_local_cannot_span_nodes(nodes: int) -> None:
    with pytest.raises(TopologyError) as info:
        detect(num_nodes=nodes, env={})
    assert f"trainer.num_nodes={nodes}" in str(info.value)
    assert "Slurm" in str(info.value)


def test_plain_local_one_node_is_fine() -> None:
    assert detect(num_nodes=1, env={}).num_nodes == 1


# --- master port ----------------------------------------------------------------------------------


def test_master_port_is_deterministic_and_in_range() -> None:
    assert master_port_for("4242") == master_port_for("4242")
    assert 20000 <= master_port_for("4242") <= 39999


def test_master_port_differs_for_ids_sharing_the_last_four_digits() -> None:
    # Lightning's default (15000 + last four digits) gives both 17345.
    assert master_port_for("12345") != master_port_for("22345")
    assert master_port_for("local-12345") != master_port_for("local-22345")


@given(st.text(max_size=40))
def test_master_port_in_range_for_any_id(job_id: str) -> None:
    port = master_port_for(job_id)
    assert 20000 <= port <= 39999
    assert port == master_port_for(job_id)


def test_master_ports_spread_over_consecutive_job_ids() -> None:
    ports = {master_port_for(str(job)) for job in range(100_000, 100_200)}
    assert len(ports) > 190  # a hash, not a constant or a handful of values
