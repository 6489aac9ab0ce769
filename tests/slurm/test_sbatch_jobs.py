"""The sbatch scripts as jobs on the local two-node cluster: each shape trains and reports one
result, a crash fails the job with its error in the log, a missing config fails the job."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from slurm_helpers import job_env, make_submit_dir, wait_for_job

from scalescope.record import ResultRecord, decode_line

# A few CPU seconds per rank: enough steps to exercise DDP, nothing to measure.
TINY = "trainer.max_epochs=2 workload.num_samples=2000 trainer.batch_size=64"


def _results(log: Path) -> list[ResultRecord]:
    events = (decode_line(line) for line in log.read_text(errors="replace").splitlines())
    return [e for e in events if isinstance(e, ResultRecord)]


@pytest.mark.parametrize(
    ("script", "shape", "nodes", "tasks_per_node"),
    [
        ("single_gpu.sh", [], 1, 1),
        ("multi_gpu_single_node.sh", ["--ntasks-per-node=2"], 1, 2),
        ("multi_node_multi_gpu.sh", ["--nodes=2", "--ntasks-per-node=1"], 2, 1),
    ],
    ids=["1x1", "1x2", "2x1"],
)
def test_script_trains_and_reports_one_result(
    sbatch, tmp_path: Path, script: str, shape: list[str], nodes: int, tasks_per_node: int
) -> None:
    repo = make_submit_dir(tmp_path / "repo")
    job_id = sbatch(
        *shape,
        "--time=10",
        f"slurm_jobs/{script}",
        cwd=repo,
        env={**job_env(), "SCALESCOPE_OVERRIDES": TINY},
    )
    job = wait_for_job(job_id)
    log = repo / "outputs" / f"slurm-{job_id}.out"
    text = log.read_text(errors="replace")
    assert job.state == "COMPLETED", f"{job.state} {job.exit_code}\n{text[-3000:]}"
    assert job.exit_code == "0:0"

    results = _results(log)
    assert len(results) == 1, text[-3000:]
    result = results[0]
    assert result.identity.job_id == job_id
    assert result.identity.launcher == "slurm"
    assert result.identity.nodes == nodes
    assert result.identity.devices_per_node == tasks_per_node
    assert result.identity.world_size == nodes * tasks_per_node
    assert result.identity.cluster == "local"  # the profile's name, passed by common.sh
    assert result.identity.run_uuid
    assert len(set(result.node_names)) == nodes
    assert result.epochs == 2
    # epoch 1 is the steady state (warm-up auto = the first epoch)
    assert result.warmup_steps == result.steps_per_epoch
    assert result.steady_steps == result.steps - result.steps_per_epoch
    assert result.steady_samples_per_s is not None and result.steady_samples_per_s > 0
    assert f"scalescope job {job_id}: {nodes} node(s)" in text
    assert f"scalescope job {job_id}: training exited with status 0" in text


def test_crash_in_training_fails_the_job_with_its_error_in_the_log(sbatch, tmp_path: Path) -> None:
    """A valid config that breaks at run time (an output_dir nobody can create)."""
    repo = make_submit_dir(tmp_path / "repo")
    bad_dir = "/proc/scalescope-cannot-create-this"
    job_id = sbatch(
        "--nodes=2",
        "--ntasks-per-node=1",
        "--time=10",
        "slurm_jobs/multi_node_multi_gpu.sh",
        f"output_dir={bad_dir}",  # an argument after the script: one more override
        cwd=repo,
        env={**job_env(), "SCALESCOPE_OVERRIDES": TINY},
    )
    job = wait_for_job(job_id)
    text = (repo / "outputs" / f"slurm-{job_id}.out").read_text(errors="replace")
    assert job.state == "FAILED", f"{job.state}\n{text[-3000:]}"
    assert job.exit_code != "0:0"
    assert bad_dir in text  # the error names what went wrong
    assert re.search(rf"scalescope job {job_id}: training exited with status [1-9]", text)
    assert not _results(repo / "outputs" / f"slurm-{job_id}.out")


def test_missing_config_fails_the_job(sbatch, tmp_path: Path) -> None:
    repo = make_submit_dir(tmp_path / "repo")
    job_id = sbatch(
        "--time=5",
        "slurm_jobs/single_gpu.sh",
        cwd=repo,
        env={**job_env(), "SCALESCOPE_CONFIG": "configs/no-such-config.yaml"},
    )
    job = wait_for_job(job_id)
    text = (repo / "outputs" / f"slurm-{job_id}.out").read_text(errors="replace")
    assert job.state == "FAILED", text
    assert "configs/no-such-config.yaml" in text


def _failure_rows(folder: Path) -> list[dict]:
    """The summary's failure rows for the logs in ``folder`` (summarize, as JSON)."""
    import io
    import json
    from contextlib import redirect_stderr, redirect_stdout

    from analysis import summarize

    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        summarize.main([str(folder), "--no-write", "--format", "json", "--jobs", "1"])
    return json.loads(out.getvalue())["failures"]


def test_a_profile_without_a_reachable_rendezvous_host_fails_long_before_the_start_up_wait(
    sbatch, tmp_path: Path
) -> None:
    """A profile written as the docs show, but without MASTER_ADDR, on nodes whose names do
    not resolve: every rank says so in one line within seconds, where before every
    multi-rank job hung until the start-up wait expired; the summary's failure row says it.

    The time is the job's own run time as Slurm counts it (not the queue), against half the
    start-up wait: alone here it is ~15 s, beside the other tiers ~30 s; a hang is >= 120 s."""
    import shutil

    from scalescope.job.run.trainer_setup import STARTUP_TIMEOUT_S

    repo = make_submit_dir(tmp_path / "repo", links=("slurm_jobs", "src"))
    shutil.copytree(Path(__file__).resolve().parents[2] / "configs", repo / "configs")
    profile = repo / "configs" / "clusters" / "site.yaml"
    text = (repo / "configs" / "clusters" / "local.yaml").read_text()
    profile.write_text(text.replace("export MASTER_ADDR=127.0.0.1", "").replace("local", "site"))
    job_id = sbatch(
        "--nodes=2",
        "--ntasks-per-node=1",
        "--time=5",
        "slurm_jobs/multi_node_multi_gpu.sh",
        cwd=repo,
        env={**job_env(), "SCALESCOPE_OVERRIDES": TINY, "SCALESCOPE_CLUSTER": str(profile)},
    )
    job = wait_for_job(job_id, timeout_s=420)
    took = _seconds(job.fields["RunTime"])
    log = repo / "outputs" / f"slurm-{job_id}.out"
    text = log.read_text(errors="replace")
    assert job.state == "FAILED", f"{job.state}\n{text[-3000:]}"
    assert took < STARTUP_TIMEOUT_S / 2, f"{took:.0f} s\n{text[-3000:]}"
    lines = [line for line in text.splitlines() if "scalescope train: error: rendezvous" in line]
    assert lines, text[-3000:]
    assert "rendezvous host 'node1'" in lines[0] and "does not resolve" in lines[0]
    assert "set MASTER_ADDR" in lines[0]
    (row,) = _failure_rows(repo / "outputs")
    assert row["reason"] == "rendezvous_error", row
    assert "does not resolve" in row["detail"], row
    print(f"unresolvable rendezvous host: failed after {took:.0f} s running: {lines[0][:160]}")


def _seconds(runtime: str) -> float:
    """Slurm's [days-]HH:MM:SS as seconds."""
    days, _, clock = runtime.rpartition("-")
    h, m, s = (int(part) for part in clock.split(":"))
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s


def test_a_typo_through_sbatch_is_named_with_its_route_in_the_failure_row(
    sbatch, tmp_path: Path
) -> None:
    repo = make_submit_dir(tmp_path / "repo")
    job_id = sbatch(
        "--time=5",
        "slurm_jobs/single_gpu.sh",
        cwd=repo,
        env={**job_env(), "SCALESCOPE_OVERRIDES": f"{TINY} trainer.max_epoch=3"},
    )
    job = wait_for_job(job_id)
    text = (repo / "outputs" / f"slurm-{job_id}.out").read_text(errors="replace")
    assert job.state == "FAILED", text
    assert (
        "scalescope train: error: SCALESCOPE_OVERRIDES: unknown key trainer.max_epoch; did you "
        "mean trainer.max_epochs?" in text
    ), text[-2000:]
    (row,) = _failure_rows(repo / "outputs")
    assert row["reason"] == "config_error", row
    assert "unknown key trainer.max_epoch" in row["detail"], row
