"""``scalescope sweep``: validation (nothing submitted on any error), the dry-run output against
a golden file, a real local sweep and Ctrl-C in the middle of one.

Golden files: tests/golden.py (``SCALESCOPE_UPDATE_GOLDEN=1`` rewrites them, then fails).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import golden
import pytest
from core_helpers import pretend_cores
from sweep_helpers import (
    CPU_PROFILE,
    GPU_PROFILE,
    assert_nothing_submitted,
    expect_error,
    sweep_cli,
    write_profile,
    write_sweep,
)

from scalescope.errors import ConfigError
from scalescope.launch import slurm_info
from scalescope.record import ResultRecord

REPO = Path(__file__).resolve().parents[4]
GOLDEN = REPO / "tests" / "golden" / "sweep"

# --- validation: one clear line, exit 2, nothing submitted -------------------------------------


def test_unknown_key_lists_valid_keys(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, extra="repeets: 2\n")
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "unknown key repeets" in err
    for key in ("name", "train_config", "shapes", "overrides", "repeats", "timeout_min"):
        assert key in err


def test_unknown_shape_key(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp)
    sweep.write_text(sweep.read_text() + "  - {nodes: 1, gpus: 2}\n")
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "unknown key shapes[2].gpus" in err and "devices_per_node" in err


def test_missing_sweep_file(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = expect_error(in_tmp, capsys, "--config", "configs/sweeps/nope.yaml")
    assert "sweep config file not found" in err and "nope.yaml" in err


def test_missing_train_config(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, train_path="../missing.yaml")
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "train_config '../missing.yaml' not found" in err
    assert "relative to the sweep file" in err


def test_train_config_errors_name_the_shape(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_sweep(in_tmp, overrides="  trainer.max_epoch: 2\n")
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "unknown key trainer.max_epoch" in err and "max_epochs" in err


@pytest.mark.parametrize("route", ["sweep file", "command line"])
def test_a_bad_value_is_blamed_where_it_was_written(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], route: str
) -> None:
    """A wrong value in the sweep file's overrides is named there, one on the command line
    there, and neither on the train file, whose own value is fine."""
    from_file = route == "sweep file"
    sweep = write_sweep(in_tmp, overrides=f"  trainer.max_epochs: {'two' if from_file else 2}\n")
    cli = [] if from_file else ["trainer.max_epochs=two"]
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local", *cli)
    where = f"{sweep}: overrides" if from_file else "the command line"
    assert err == (
        f"scalescope sweep: error: {where}: trainer.max_epochs: expected an integer, got 'two'"
    )


def test_global_batch_not_dividing_names_the_shape(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1x1 and 1x2 split 256; the last shape (3 ranks) does not: still nothing submitted.
    sweep = write_sweep(in_tmp, shapes=((1, 1), (1, 2), (1, 3)))
    err = expect_error(
        in_tmp, capsys, "--config", str(sweep), "--executor", "local", "trainer.batch_size=256"
    )
    assert "shape 1x3 (world size 3)" in err and "does not divide" in err


def test_too_few_samples_for_one_global_batch(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_sweep(in_tmp)
    err = expect_error(
        in_tmp, capsys, "--config", str(sweep), "--executor", "local", "workload.num_samples=100"
    )
    assert "shape 1x1 (world size 1)" in err and "no full global batch" in err


def test_shape_too_big_for_the_profile(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, shapes=((1, 1), (4, 1)))
    profile = write_profile(in_tmp, CPU_PROFILE)
    err = expect_error(
        in_tmp, capsys, "--config", str(sweep), "--cluster", str(profile), "--executor", "slurm"
    )
    assert "shape 4x1" in err and "max_nodes=2" in err


def test_the_node_limit_comes_before_the_batch_arithmetic(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 3-node shape whose world size does not divide the batch either: the first error is
    the one a user acts on first (the cluster cannot hold the shape), and it says what to do;
    before, the batch arithmetic complained first, then the limit without a fix."""
    sweep = write_sweep(in_tmp, shapes=((1, 1), (3, 1)))
    profile = write_profile(in_tmp, CPU_PROFILE)
    err = expect_error(
        in_tmp,
        capsys,
        "--config",
        str(sweep),
        "--cluster",
        str(profile),
        "--executor",
        "slurm",
        "trainer.batch_size=256",
    )
    assert "shape 3x1: 3 nodes exceeds the profile 'test-cpu' max_nodes=2" in err, err
    assert "drop the shape from the sweep, or raise max_nodes in the profile" in err
    assert "sinfo" in err and "does not divide" not in err


def test_too_many_devices_per_node(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, shapes=((1, 8),))
    profile = write_profile(in_tmp, GPU_PROFILE)
    err = expect_error(
        in_tmp, capsys, "--config", str(sweep), "--cluster", str(profile), "--executor", "slurm"
    )
    assert "shape 1x8" in err and "gpus_per_node=4" in err


def test_gpu_asked_of_a_cpu_cluster(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, overrides="  trainer.accelerator: gpu\n")
    profile = write_profile(in_tmp, CPU_PROFILE)
    err = expect_error(
        in_tmp, capsys, "--config", str(sweep), "--cluster", str(profile), "--executor", "slurm"
    )
    assert "accelerator is gpu" in err and "gpus_per_node: 0" in err


def test_gpu_asked_of_this_machine(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    sweep = write_sweep(in_tmp, overrides="  trainer.accelerator: gpu\n")
    with pytest.raises(
        ConfigError,
        match="accelerator is gpu but this machine, where the local executor runs, has no CUDA",
    ):
        plan_sweep(load_sweep_config(sweep), sweep, executor="local", gpu_count=lambda: 0)
    with pytest.raises(ConfigError, match="2 GPUs per node asked, this machine has 1"):
        plan_sweep(load_sweep_config(sweep), sweep, executor="local", gpu_count=lambda: 1)
    plan = plan_sweep(
        load_sweep_config(sweep), sweep, executor="local", gpu_count=lambda: 2
    )  # GPUs visible to the local jobs only now
    assert [sp.resources.gpus_per_node for sp in plan.shapes] == [1, 2]
    assert_nothing_submitted(in_tmp)


def test_local_refuses_multi_node(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, shapes=((1, 1), (2, 1)))
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "shape 2x1" in err and "local executor" in err and "--executor slurm" in err


def test_slurm_needs_a_profile(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp)
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "slurm", "--dry-run")
    assert "--cluster" in err


def test_sweep_owned_keys_are_refused(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, overrides="  trainer.devices: 2\n")
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "trainer.devices" in err and "the sweep sets it" in err
    sweep = write_sweep(in_tmp)
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local", "sweep_id=x")
    assert "sweep_id" in err and "the sweep sets it" in err


def test_duplicate_and_empty_shapes(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, shapes=((1, 2), (1, 2)))
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "1x2 is listed twice" in err
    sweep = write_sweep(in_tmp, shapes=())
    sweep.write_text(sweep.read_text().replace("shapes:\n", "shapes: []\n"))
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "shapes: the list is empty" in err


def test_bad_repeats(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, extra="repeats: 0\n")
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "repeats: must be > 0" in err


# --- the plan ---------------------------------------------------------------------------------


def test_plan_sets_shape_sweep_id_project_and_folder(in_tmp: Path) -> None:
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    sweep = write_sweep(in_tmp, shapes=((1, 1), (1, 2)), extra="repeats: 2\n")
    plan = plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="test-1")
    assert plan.num_jobs == 4
    assert plan.sweep_dir == in_tmp / "outputs" / "sweeps" / "test-1"
    for sp, (nodes, devices) in zip(plan.shapes, ((1, 1), (1, 2)), strict=True):
        cfg = sp.config
        assert (cfg.trainer.num_nodes, cfg.trainer.devices) == (nodes, devices)
        assert cfg.sweep_id == "test-1"
        assert cfg.output_dir == str(plan.sweep_dir)
        assert cfg.tracking.project == "test"  # the sweep family, by default
        assert sp.resources.timeout_min == 60  # never LocalExecutor's 2-minute default
    assert [sp.per_device_batch_size for sp in plan.shapes] == [256, 128]


def test_submission_order_interleaves_repeats_in_rounds(in_tmp: Path) -> None:
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    shapes = ((1, 1), (1, 2), (1, 4))
    sweep = write_sweep(in_tmp, shapes=shapes, extra="repeats: 4\norder_seed: 11\n")
    plan = plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    order = plan.submission_order()
    labels = {sp.shape.label for sp in plan.shapes}
    assert len(order) == plan.num_jobs == 12
    rounds = [order[i : i + 3] for i in range(0, 12, 3)]
    for repeat, block in enumerate(rounds):
        # every shape exactly once per round, rounds in repeat order
        assert {r for r, _ in block} == {repeat}
        assert {sp.shape.label for _, sp in block} == labels
    # shuffled within rounds (not always the file's order), and reproducible from the seed
    assert len({tuple(sp.shape.label for _, sp in b) for b in rounds}) > 1
    again = plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    assert [(r, sp.shape.label) for r, sp in again.submission_order()] == [
        (r, sp.shape.label) for r, sp in order
    ]
    # the launcher hands out jobs in exactly that order, each run told its repeat and cluster
    from scalescope.launch.executor import Launcher

    launcher = Launcher(plan)
    handles = launcher.handles()
    assert [(h.repeat, h.shape.label) for h in handles] == [(r, sp.shape.label) for r, sp in order]
    run = launcher._run(handles[5])
    assert run.config["repeat_index"] == handles[5].repeat == 1
    assert run.config["cluster"] == "local"


def test_random_order_seed_is_recorded(in_tmp: Path) -> None:
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    sweep = write_sweep(in_tmp, extra="repeats: 2\n")
    seeds = {
        plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t").order_seed
        for _ in range(5)
    }
    assert len(seeds) > 1  # null means a fresh random seed per sweep


def test_slurm_parameters(in_tmp: Path) -> None:
    from scalescope.launch.cluster import load_profile
    from scalescope.launch.executor import local_parameters, slurm_parameters
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    sweep = write_sweep(in_tmp, shapes=((1, 1), (2, 4)), overrides="  trainer.accelerator: gpu\n")
    profile = load_profile(write_profile(in_tmp, GPU_PROFILE))
    plan = plan_sweep(load_sweep_config(sweep), sweep, executor="slurm", profile=profile)
    params = slurm_parameters(plan, plan.shapes[1])
    assert params == {
        "job_name": "scalescope-test-2x4",
        "time": 45,
        "nodes": 2,
        "ntasks_per_node": 4,
        "cpus_per_task": 8,
        "gpus_per_node": 4,
        "mem": "240GB",
        "partition": "gpu",
        "account": "proj42",
        "qos": "normal",
        "constraint": "a100",
        "setup": ["module load cuda/12.4", 'source "$HOME/venvs/scalescope/bin/activate"'],
        "additional_parameters": {"exclusive": True, "reservation": "bench"},
    }
    assert slurm_parameters(plan, plan.shapes[0])["gpus_per_node"] == 1

    sweep = write_sweep(in_tmp, shapes=((1, 2),))
    local = plan_sweep(load_sweep_config(sweep), sweep, executor="local")
    assert local_parameters(local.shapes[0]) == {
        "nodes": 1,
        "tasks_per_node": 2,
        "gpus_per_node": 0,  # GPUs stay hidden from CPU runs
        "timeout_min": 60,
    }


def test_sweep_run_pickles_and_restarts_from_scratch() -> None:
    from submitit.helpers import DelayedSubmission

    from scalescope.launch.executor import SweepRun

    run = SweepRun({"name": "spiral", "trainer": {"devices": 2}}, "1x2", 1)
    again = pickle.loads(pickle.dumps(run))
    assert again.config == run.config and (again.shape, again.repeat) == ("1x2", 1)
    delayed = run.checkpoint()
    assert isinstance(delayed, DelayedSubmission)
    assert isinstance(delayed.function, SweepRun) and delayed.function is not run
    assert delayed.function.config == run.config and not delayed.args


def test_every_sweep_config_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed sweeps plan cleanly with the executor they are written for."""
    from scalescope.launch.cluster import load_profile
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    monkeypatch.chdir(REPO)
    cases = {
        "local.yaml": ("local", None),
        "slurm_local.yaml": ("slurm", "local.yaml"),
        "gpu_scaling.yaml": ("slurm", "example_a100.yaml"),
    }
    found = sorted(p.name for p in (REPO / "configs" / "sweeps").glob("*.yaml"))
    assert set(cases) <= set(found)
    for name in found:
        executor, profile_name = cases.get(name, ("slurm", "example_a100.yaml"))
        profile = (
            load_profile(REPO / "configs" / "clusters" / profile_name) if profile_name else None
        )
        path = REPO / "configs" / "sweeps" / name
        plan = plan_sweep(
            load_sweep_config(path), path, executor=executor, profile=profile, sweep_id="x"
        )
        assert plan.num_jobs >= len(plan.shapes)


def test_executor_choice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from scalescope.launch import executor as launch

    monkeypatch.setattr(launch, "slurm_reachable", lambda: (True, "sinfo answered"))
    assert launch.choose_executor("auto") == ("slurm", "sinfo answered")
    monkeypatch.setattr(launch, "slurm_reachable", lambda: (False, "sinfo failed: no config"))
    assert launch.choose_executor("auto") == ("local", "no Slurm cluster (sinfo failed: no config)")
    assert launch.choose_executor("slurm")[0] == "slurm"  # a dry run needs no cluster
    assert launch.choose_executor("local")[0] == "local"


def test_slurm_unreachable_without_sinfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from scalescope.launch.executor import require_slurm, slurm_reachable

    monkeypatch.setenv("PATH", str(tmp_path))
    assert slurm_reachable() == (False, "sbatch/sinfo not on PATH")
    with pytest.raises(ConfigError, match="the slurm executor cannot submit"):
        require_slurm()


def test_sbatch_extra_needs_long_options(in_tmp: Path) -> None:
    from scalescope.launch.cluster import load_profile
    from scalescope.launch.executor import slurm_parameters
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    sweep = write_sweep(in_tmp)
    profile = load_profile(write_profile(in_tmp, CPU_PROFILE + "sbatch_extra: ['-x node3']\n"))
    plan = plan_sweep(load_sweep_config(sweep), sweep, executor="slurm", profile=profile)
    with pytest.raises(ConfigError, match="sbatch_extra: '-x node3': use long options"):
        slurm_parameters(plan, plan.shapes[0])


def test_cpu_runs_ignore_the_profile_gpus_locally(in_tmp: Path) -> None:
    from scalescope.launch.cluster import load_profile
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    sweep = write_sweep(in_tmp)  # accelerator: cpu
    profile = load_profile(write_profile(in_tmp, GPU_PROFILE))
    plan = plan_sweep(
        load_sweep_config(sweep), sweep, executor="local", profile=profile, gpu_count=lambda: 0
    )
    assert [sp.resources.gpus_per_node for sp in plan.shapes] == [0, 0]
    auto = write_sweep(in_tmp, overrides="  trainer.accelerator: auto\n")
    with pytest.raises(
        ConfigError,
        match="the profile has GPUs but this machine, where the local executor runs, has no CUDA",
    ):
        plan_sweep(
            load_sweep_config(auto), auto, executor="local", profile=profile, gpu_count=lambda: 0
        )


def test_bad_max_parallel(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp)
    err = expect_error(
        in_tmp, capsys, "--config", str(sweep), "--executor", "local", "--max-parallel", "0"
    )
    assert "--max-parallel: must be > 0" in err


# --- monitoring: failures are shown, not dropped ----------------------------------------------


def _handle(folder: Path, tasks: int) -> Any:
    """A handle on a real submitit job object whose task results are files in ``folder``."""
    import submitit

    from scalescope.launch.executor import JobHandle

    handle = JobHandle(plan=None, repeat=0)  # type: ignore[arg-type]
    handle.job = submitit.Job(folder, "1", tasks=tuple(range(tasks)))
    return handle


def _dump(path: Path, value: Any) -> None:
    from submitit.core.utils import cloudpickle_dump

    cloudpickle_dump(value, path)


def test_outcomes(tmp_path: Path) -> None:
    from analysis_helpers import make_result

    from scalescope.launch.monitor import JobStatus, _finish, _parse_elapsed

    record = make_result()
    assert isinstance(record, ResultRecord)
    st = JobStatus(state="RUNNING")
    handle = _handle(tmp_path, 2)
    _finish(st, handle, "TIMEOUT")  # no pickle at all: the scheduler's word
    assert st.state == "TIMEOUT" and st.detail

    _dump(tmp_path / "1_0_result.pkl", ("success", record))
    st = JobStatus(state="RUNNING")
    _finish(st, handle, None)  # rank 1 left nothing
    assert st.state == "FAILED" and "1 of 2 tasks" in (st.detail or "")

    _dump(tmp_path / "1_1_result.pkl", ("error", "Traceback...\nValueError: boom\n"))
    st = JobStatus(state="RUNNING")
    _finish(st, handle, "COMPLETED")
    assert st.state == "FAILED" and st.detail == "task 1: ValueError: boom"

    _dump(tmp_path / "1_1_result.pkl", ("success", None))
    st = JobStatus(state="RUNNING")
    _finish(st, handle, "COMPLETED")
    assert st.state == "COMPLETED" and st.record == record

    assert _parse_elapsed("1-02:03:04") == 93784.0
    assert _parse_elapsed("3:07") == 187.0
    assert _parse_elapsed("INVALID") is None


GLOO_PEER = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
    "Connection closed by peer [127.0.0.1]:2449. This is typically caused by a remote worker "
    "crashing."
)
NCCL_PEER = (
    "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote "
    "process exited or there was a network error, NCCL version 2.19.3"
)
GLOO_TIMEOUT = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out "
    "waiting 20000ms for recv operation to complete"
)


@pytest.mark.parametrize(
    ("errors", "said"),
    [
        # rank 1's own bug; rank 0 saw its connection close after it
        ({0: GLOO_PEER, 1: "RuntimeError: user bug on rank 1"}, "task 1: RuntimeError: user bug"),
        ({0: NCCL_PEER, 1: "torch.OutOfMemoryError: CUDA out of memory."}, "task 1: torch.OutOf"),
        ({0: "ValueError: boom", 1: GLOO_TIMEOUT}, "task 0: ValueError: boom"),
        # every task lost a peer (the network failed): the first says so
        ({0: GLOO_TIMEOUT, 1: GLOO_PEER}, "task 0: RuntimeError: [../third_party/gloo"),
    ],
)
def test_a_failed_job_names_a_task_s_own_error_before_another_s_lost_peer(
    tmp_path: Path, errors: dict[int, str], said: str
) -> None:
    from scalescope.launch.monitor import JobStatus, _finish
    from scalescope.launch.sweep import failed_logs

    handle = _handle(tmp_path, 2)
    for task, line in errors.items():
        _dump(tmp_path / f"1_{task}_result.pkl", ("error", f"Traceback...\n{line}\n"))
    st = JobStatus(state="RUNNING")
    _finish(st, handle, "FAILED")
    assert st.state == "FAILED" and (st.detail or "").startswith(said)
    task = int(said.split(":")[0].removeprefix("task "))
    assert st.task == task
    # the FAILED line points at that task's logs
    out, err = failed_logs(handle, st)
    assert (out.name, err.name) == (f"1_{task}_log.out", f"1_{task}_log.err")  # type: ignore[union-attr]


def test_failed_jobs_are_listed_and_set_the_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from rich.console import Console

    from scalescope.launch import sweep as sweep_cli_module
    from scalescope.launch.monitor import JobStatus

    shape = SimpleNamespace(label="1x2", world_size=2)
    ok = SimpleNamespace(job_id="7_0", shape=shape, label="1x2", repeat=0, stdout=None, stderr=None)
    bad = SimpleNamespace(
        job_id="7_1",
        shape=shape,
        label="1x2",
        repeat=1,
        stdout=tmp_path / "o",
        stderr=tmp_path / "e",
    )
    rows = [
        (ok, JobStatus(state="COMPLETED", elapsed_s=3.0)),
        (bad, JobStatus(state="FAILED", detail="task 1: ValueError: boom", elapsed_s=2.0)),
    ]
    watch = SimpleNamespace(
        plan=SimpleNamespace(sweep_id="s"),
        handles=[ok, bad],
        rows=lambda: rows,
        failed=[rows[1]],
    )
    monkeypatch.setattr(sweep_cli_module, "run_summary", lambda *a: 0)
    console = Console(record=True, width=200)
    plan = SimpleNamespace(
        sweep_dir=tmp_path,
        project_nodes=(),
        summary_plan=None,
        sweep_file=None,
        project_network=None,
    )
    rc = sweep_cli_module._report(watch, plan, console, show_table=True)  # type: ignore[arg-type]
    text = console.export_text()
    assert rc == 1
    assert "FAILED 7_1 (shape 1x2 repeat 1): task 1: ValueError: boom" in text
    assert str(tmp_path / "o") in text and "1 of 2 jobs did not complete" in text


# --- dry run: golden files --------------------------------------------------------------------


def normalise(text: str, root: Path) -> str:
    return (
        text.replace(str(root), "<TMP>")
        .replace(sys.executable, "<PYTHON>")
        .replace(str(REPO), "<REPO>")
    )


def check_golden(name: str, text: str) -> None:
    golden.check_text(GOLDEN / name, text)


def test_dry_run_slurm_golden(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Slurm dry run asks sinfo what the partition holds; here it gives no answer
    # (test_slurm_info.py gives it one).
    monkeypatch.setattr(slurm_info, "partition_limits", lambda **_: None)
    sweep = write_sweep(
        in_tmp,
        shapes=((1, 1), (1, 4), (2, 4)),
        extra="repeats: 3\ntimeout_min: 20\norder_seed: 3\n",
        overrides="  trainer.accelerator: gpu\n  trainer.precision: bf16-mixed\n",
    )
    profile = write_profile(in_tmp, GPU_PROFILE)
    rc = sweep_cli(
        "--config",
        str(sweep),
        "--cluster",
        str(profile),
        "--executor",
        "slurm",
        "--dry-run",
        "--sweep-id",
        "test-golden",
        "--max-parallel",
        "4",
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert_nothing_submitted(in_tmp)
    # One job per run, never an array of one shape's repeats: rounds interleave the shapes.
    assert "--array" not in out and "#SBATCH --nodes=2" in out
    assert "order         round by round, shapes shuffled (seed 3): 1: " in out
    assert "at once       4 job(s), by afterany dependencies" in out
    check_golden("dry_run_slurm.txt", normalise(out, in_tmp))


def test_dry_run_local_golden(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, extra="order_seed: 1\n")
    rc = sweep_cli(
        "--config", str(sweep), "--executor", "local", "--dry-run", "--sweep-id", "test-golden"
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert_nothing_submitted(in_tmp)
    check_golden("dry_run_local.txt", normalise(out, in_tmp))


def test_a_dry_run_refuses_an_existing_sweep_folder_as_a_submission_does(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dry run predicts the submission: the same one-line error and exit code when the
    sweep folder exists, and the earlier results untouched."""
    sweep = write_sweep(in_tmp, shapes=((1, 1),))
    folder = in_tmp / "outputs" / "sweeps" / "taken"
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text("{}")
    argv = ("--config", str(sweep), "--executor", "local", "--sweep-id", "taken")
    errors = []
    for dry in (("--dry-run",), ()):
        rc = sweep_cli(*argv, *dry)
        captured = capsys.readouterr()
        assert rc == 2, captured.out
        assert "dry run" not in captured.out
        errors.append(captured.err.strip())
    refused = (
        f"scalescope sweep: error: sweep folder {folder} exists: earlier results are never "
        "overwritten; pass another --sweep-id"
    )
    assert errors == [refused, refused]
    assert [p.name for p in folder.iterdir()] == ["sweep.json"]


# --- cores shared by a shape's processes -----------------------------------------------------

SHARING_1X4 = (
    "scalescope sweep: warning: shape 1x4: 4 processes on 2 cores: they will share cores and "
    "the efficiency measured will include that contention"
)


def test_a_dry_run_warns_once_per_shape_with_more_processes_than_cores(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """1x4 on 2 cores shares them (one line, though it runs at two precisions); 1x2 does not."""
    pretend_cores(monkeypatch, 2)
    sweep = write_sweep(in_tmp, shapes=((1, 2), (1, 4)), extra='precisions: ["32", "bf16-mixed"]\n')
    assert sweep_cli("--config", str(sweep), "--executor", "local", "--dry-run") == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [SHARING_1X4]
    assert "dry run, nothing submitted" in captured.out
    assert_nothing_submitted(in_tmp)


def test_a_submission_warns_as_its_dry_run_does(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from scalescope.launch import executor

    class Stop(Exception):
        pass

    def launcher(*args: Any, **kwargs: Any) -> Any:
        raise Stop  # the warning is said before anything is submitted

    pretend_cores(monkeypatch, 2)
    monkeypatch.setattr(executor, "Launcher", launcher)
    sweep = write_sweep(in_tmp, shapes=((1, 2), (1, 4)))
    with pytest.raises(Stop):
        sweep_cli("--config", str(sweep), "--executor", "local")
    assert capsys.readouterr().err.splitlines() == [SHARING_1X4]


def test_no_warning_for_gpus_or_where_the_cores_are_unknown(in_tmp: Path) -> None:
    from scalescope.launch.cluster import load_profile
    from scalescope.launch.sweep import _node_cores, core_sharing_lines
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    cpu = write_sweep(in_tmp, shapes=((1, 2), (1, 4)))
    plan = plan_sweep(load_sweep_config(cpu), cpu, executor="local")
    assert core_sharing_lines(plan, 2) == [SHARING_1X4.removeprefix("scalescope sweep: warning: ")]
    assert core_sharing_lines(plan, 4) == []
    gpu = write_sweep(in_tmp, shapes=((1, 2), (1, 4)), overrides="  trainer.accelerator: gpu\n")
    plan = plan_sweep(load_sweep_config(gpu), gpu, executor="local", gpu_count=lambda: 4)
    assert core_sharing_lines(plan, 2) == []
    # Slurm gives each task its cpus_per_task; the profile names no cores per node.
    profile = load_profile(write_profile(in_tmp, CPU_PROFILE))
    cpu = write_sweep(in_tmp, shapes=((1, 2),))
    plan = plan_sweep(load_sweep_config(cpu), cpu, executor="slurm", profile=profile)
    assert _node_cores(plan) is None and core_sharing_lines(plan, None) == []


# --- real local sweeps ------------------------------------------------------------------------


def test_a_dry_run_prints_the_seed_that_submits_its_order(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No order_seed in the file: the dry run draws one, prints it and how to keep it; the
    plan a submission makes with --seed of that number has the dry run's order, round by
    round, and says where its seed came from."""
    import re

    from scalescope.launch.sweep import _round_orders, dry_run_lines
    from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

    sweep = write_sweep(in_tmp, shapes=((1, 1), (1, 2), (1, 4)), extra="repeats: 4\n")
    assert sweep_cli("--config", str(sweep), "--executor", "local", "--dry-run") == 0
    out = capsys.readouterr().out
    m = re.search(r"shuffled \(seed (\d+)\): (.*)\n\s+same order\s+(.*)\n", out)
    assert m, out
    seed, order, how = int(m.group(1)), m.group(2), m.group(3)
    assert how == f"drawn now; a submission draws its own: pass --seed {seed} to submit this order"
    plan = plan_sweep(load_sweep_config(sweep), sweep, executor="local", order_seed=seed)
    assert "; ".join(_round_orders(plan)) == order
    assert plan.seed_source == "--seed"
    lines = dry_run_lines(plan, "asked for")
    assert "  same order    the seed comes from --seed: a submission uses the same" in lines
