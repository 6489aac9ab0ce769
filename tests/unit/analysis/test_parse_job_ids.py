"""One job id, several jobs (analysis.read.parse): a job is its id on its cluster in its
sweep, so two clusters' job 8002, or a reused id in another sweep, are two jobs, failures
included, and a rank's log known by its name only joins the one whose logs share its folder."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from analysis_helpers import make_result, start_of, summarize_main, write_log

from analysis.read.parse import parse
from scalescope.record import StartEvent

OOM_KILL = (
    "slurmstepd: error: Detected 1 oom_kill event in StepId=8002.0. Some of the step tasks "
    "have been OOM Killed."
)
PREEMPTED = (
    "slurmstepd: error: *** JOB 8002 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO "
    "PREEMPTION ***"
)
TIME_LIMIT = (
    "slurmstepd: error: *** JOB 8001 ON node1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME "
    "LIMIT ***"
)


def test_two_clusters_failed_jobs_of_one_id_are_two_failures(tmp_path: Path) -> None:
    a = make_result("8002", cluster="clusterA", run_uuid="c" * 32)
    b = make_result("8002", cluster="clusterB", run_uuid="d" * 32)
    write_log(tmp_path / "clusterA" / "slurm-8002.out", start_of(a), OOM_KILL)
    write_log(tmp_path / "clusterB" / "slurm-8002.out", start_of(b), PREEMPTED)
    failures = parse([tmp_path], jobs=1).failures
    got = sorted(
        (f.job_id, f.identity.cluster if f.identity else None, f.diagnosis.code, f.files)
        for f in failures
    )
    assert got == [
        ("8002", "clusterA", "host_oom", (f"{tmp_path.name}/clusterA/slurm-8002.out",)),
        ("8002", "clusterB", "preemption", (f"{tmp_path.name}/clusterB/slurm-8002.out",)),
    ]


def test_a_failed_job_is_kept_when_another_job_of_its_id_finished(tmp_path: Path) -> None:
    done = make_result("8001", cluster="clusterA", sweep_id="sweepA", run_uuid="a" * 32)
    other_cluster = replace(done.identity, cluster="clusterB", run_uuid="b" * 32)
    other_sweep = replace(done.identity, sweep_id="sweepB", run_uuid="e" * 32)
    write_log(tmp_path / "sweepA" / "slurm-8001.out", start_of(done), done)
    write_log(tmp_path / "clusterB" / "slurm-8001.out", StartEvent(other_cluster))
    write_log(tmp_path / "sweepB" / "slurm-8001.out", StartEvent(other_sweep), TIME_LIMIT)
    result = parse([tmp_path], jobs=1)
    assert [r.record.identity.run_uuid for r in result.runs] == ["a" * 32]
    got = sorted(
        (f.job_id, f.identity.cluster, f.identity.sweep_id, f.diagnosis.code)
        for f in result.failures
        if f.identity
    )
    assert got == [
        ("8001", "clusterA", "sweepB", "time_limit"),
        ("8001", "clusterB", "sweepA", "unknown"),
    ]
    assert len(result.failures) == 2


def test_a_rank_log_joins_the_job_whose_logs_share_its_folder(tmp_path: Path) -> None:
    """submitit: one folder per job, the rank logs known by their name only."""
    for cluster, line, done in (
        ("clusterA", "RuntimeError: Connection reset by peer", False),
        ("clusterB", PREEMPTED, False),
        ("clusterC", "RuntimeError: rank 1 failed after rank 0's record", True),
    ):
        r = make_result("8003", cluster=cluster, run_uuid=cluster.ljust(32, "0"))
        folder = tmp_path / cluster / "8003"
        write_log(folder / "8003_0_log.out", start_of(r), *([r] if done else []))
        write_log(folder / "8003_1_log.err", "Traceback (most recent call last):", line)
    result = parse([tmp_path], jobs=1)
    got = sorted((f.identity.cluster, f.diagnosis.code, f.files) for f in result.failures)
    name = tmp_path.name
    assert got == [
        (
            "clusterA",
            "collective_error",
            (f"{name}/clusterA/8003/8003_0_log.out", f"{name}/clusterA/8003/8003_1_log.err"),
        ),
        (
            "clusterB",
            "preemption",
            (f"{name}/clusterB/8003/8003_0_log.out", f"{name}/clusterB/8003/8003_1_log.err"),
        ),
    ]
    assert [r.record.identity.cluster for r in result.runs] == ["clusterC"]
    # the finished job's rank log is its own, not another cluster's job's failure
    (p,) = result.problems
    assert p.file == f"{name}/clusterC/8003/8003_1_log.err" and "rank 1 failed" in p.message


def test_two_clusters_stopped_jobs_of_one_id_are_two_failures(tmp_path: Path) -> None:
    for cluster, line in (("clusterA", TIME_LIMIT), ("clusterB", PREEMPTED)):
        r = replace(make_result("8004", cluster=cluster), stop_reason="sigterm")
        write_log(tmp_path / cluster / "slurm-8004.out", start_of(r), line, r)
    failures = parse([tmp_path], jobs=1).failures
    assert sorted((f.identity.cluster, f.diagnosis.code) for f in failures if f.identity) == [
        ("clusterA", "time_limit"),
        ("clusterB", "preemption"),
    ]


def test_a_job_id_shared_by_failures_is_shown_with_its_cluster(tmp_path: Path) -> None:
    a = make_result("8002", cluster="clusterA", run_uuid="c" * 32)
    b = make_result("8002", cluster="clusterB", run_uuid="d" * 32)
    write_log(tmp_path / "clusterA" / "slurm-8002.out", start_of(a), OOM_KILL)
    write_log(tmp_path / "clusterB" / "slurm-8002.out", start_of(b), PREEMPTED)
    write_log(tmp_path / "slurm-8010.out", start_of(make_result("8010")), PREEMPTED)
    proc = summarize_main(tmp_path, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(" | ")[0] for line in proc.stdout.splitlines() if line.startswith("| 80")]
    assert rows == ["| 8002 (on clusterA)", "| 8002 (on clusterB)", "| 8010"]
    proc = summarize_main(tmp_path, "--no-write")
    bullets = [line for line in proc.stdout.splitlines() if "• 80" in line]
    starts = (
        "  • 8002 (on clusterA) (spiral",
        "  • 8002 (on clusterB) (spiral",
        "  • 8010 (spiral",
    )
    assert len(bullets) == 3
    assert all(b.startswith(s) for b, s in zip(bullets, starts, strict=True)), bullets


def test_a_rank_log_equally_near_to_two_jobs_of_its_id_is_a_problem(tmp_path: Path) -> None:
    for cluster in ("clusterA", "clusterB"):
        r = make_result("8006", cluster=cluster, run_uuid=cluster.ljust(32, "0"))
        write_log(tmp_path / cluster / "8006_0_log.out", start_of(r))
    write_log(tmp_path / "8006_1_log.err", "RuntimeError: Connection reset by peer")
    result = parse([tmp_path], jobs=1)
    assert sorted(f.diagnosis.code for f in result.failures) == ["unknown", "unknown"]
    (p,) = result.problems
    assert p.file.endswith("/8006_1_log.err")
    assert p.message.startswith(
        "job id 8006 names 2 jobs (on clusterA in sweep sweep-test, on clusterB in sweep "
        "sweep-test) and this log is as near to each"
    )


PEER_RESET = ("Traceback (most recent call last):", "RuntimeError: Connection reset by peer")


def test_a_job_name_ending_in_a_date_is_not_an_array(tmp_path: Path) -> None:
    """sbatch's %x_%j with a job name that ends in a date: the date is no array's job id, and
    the rank's log joins its job."""
    job = make_result("7310", run_uuid="f" * 32)
    write_log(tmp_path / "slurm-7310.out", start_of(job))
    write_log(tmp_path / "exp_20240101_7310.err", *PEER_RESET)
    (failure,) = parse([tmp_path], jobs=1).failures
    assert (failure.job_id, failure.diagnosis.code) == ("7310", "collective_error")
    assert failure.files == (
        f"{tmp_path.name}/exp_20240101_7310.err",
        f"{tmp_path.name}/slurm-7310.out",
    )


def test_an_ambiguous_name_reads_as_the_job_that_is_known(tmp_path: Path) -> None:
    """``<name>_<a>_<b>`` is an array task a_b or job b after a name ending in a number: the
    reading a job's record or a sweep's manifest names wins over the guess from the digits."""
    # array task 20240101_7310 on a cluster whose arrays go past 1000 tasks
    task = make_result("20247400", array_job_id="20240101", array_task_id=7310, run_uuid="a" * 32)
    write_log(tmp_path / "a" / "train_20240101_7310.out", start_of(task), task)
    write_log(tmp_path / "a" / "rank1_20240101_7310.err", *PEER_RESET)
    # job 815 of a sweep, after a job name ending in a date
    sweep = tmp_path / "b"
    write_log(sweep / "exp_20240101_815.out", *PEER_RESET)
    entry = {"job_id": "815", "shape": "1x2", "nodes": 1, "devices_per_node": 2}
    doc = {"sweep_id": "s1", "jobs": [{**entry, "world_size": 2, "repeat": 0, "state": "FAILED"}]}
    (sweep / "sweep.json").write_text(json.dumps(doc), encoding="utf-8")
    result = parse([tmp_path], jobs=1)
    assert [r.record.identity.job_id for r in result.runs] == ["20247400"]
    (p,) = [p for p in result.problems if p.file.endswith("rank1_20240101_7310.err")]
    assert "job 20247400 finished" in p.message
    got = [(f.job_id, f.diagnosis.code, f.files) for f in result.failures]
    assert got == [("815", "collective_error", (f"{tmp_path.name}/b/exp_20240101_815.out",))]
