"""One job id, several jobs (analysis.read.parse): a job is its id on its cluster in its
sweep, so two clusters' job 8002, or a reused id in another sweep, are two jobs, failures
included, and a rank's log known by its name only joins the one whose logs share its folder."""

from __future__ import annotations

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
