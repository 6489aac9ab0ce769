"""Reading logs and run directories into jobs (analysis.read.parse): records, failures and
problems, never an exception. Finding the files: test_files.py; reading one: test_scan.py;
what a crash left in one: test_damage.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from analysis_helpers import make_result, noise, start_of, with_restart, write_log

from analysis import load_all
from analysis.read.parse import parse
from scalescope.record import encode, write_json_atomic


def test_empty_folder_gives_nothing_and_no_error(tmp_path: Path) -> None:
    result = parse([tmp_path])
    assert (result.runs, result.failures, result.problems) == ([], [], [])


def test_record_found_among_noise_with_srun_prefix(tmp_path: Path) -> None:
    r = make_result("42", world=(1, 2))
    write_log(
        tmp_path / "slurm-42.out", *noise(50), start_of(r), *noise(50, rank=1), r, prefix="0: "
    )
    runs, failures, problems = load_all(tmp_path)
    assert runs["job_id"].tolist() == ["42"] and failures.empty and problems == []
    assert runs["train_time_s"].iloc[0] == pytest.approx(100.0)


def test_log_and_result_json_of_one_run_count_once_silently(tmp_path: Path) -> None:
    r = make_result("7")
    write_log(tmp_path / "slurm-7.out", start_of(r), r)
    write_json_atomic(tmp_path / "runs" / "7.r0" / "result.json", r.to_dict())
    runs, _, problems = load_all(tmp_path)
    assert len(runs) == 1 and problems == []
    assert runs["sources"].iloc[0].count(";") == 1


def test_conflicting_duplicate_is_a_warning_and_result_json_wins(tmp_path: Path) -> None:
    r = make_result("7", train_time_s=100.0)
    write_log(tmp_path / "slurm-7.out", start_of(r), make_result("7", train_time_s=90.0))
    write_json_atomic(tmp_path / "runs" / "result.json", r.to_dict())
    runs, _, problems = load_all(tmp_path)
    assert runs["train_time_s"].tolist() == [100.0]
    (p,) = problems
    assert p.file.endswith("slurm-7.out") and "train_time_s" in p.message


def test_truncated_record_is_a_problem_and_the_job_a_failure(tmp_path: Path) -> None:
    r = make_result("11")
    line = encode(r)
    (tmp_path / "slurm-11.out").write_text(encode(start_of(r)) + "\n" + line[: len(line) // 2])
    runs, failures, problems = load_all(tmp_path)
    assert runs.empty
    assert "line 2" in problems[0].message and "not valid JSON" in problems[0].message
    assert failures["job_id"].tolist() == ["11"]
    assert "broken event line" in failures["detail"].iloc[0]


def test_a_log_cut_inside_its_start_event_is_a_failure_not_dropped(tmp_path: Path) -> None:
    """A job's log cut in its first event line (a disk full, a node lost while writing), with
    no result.json: the job is listed as incomplete with the broken line named, as one cut in
    its result line is, never left to a problem alone."""
    done = make_result("1")
    write_log(tmp_path / "slurm-1.out", start_of(done), done)
    cut = encode(start_of(make_result("2")))
    (tmp_path / "slurm-2.out").write_text("some noise\n" + cut[: len(cut) // 2])
    runs, failures, problems = load_all(tmp_path)
    assert runs["job_id"].tolist() == ["1"]
    assert failures["job_id"].tolist() == ["2"]
    assert "broken event line" in failures["detail"].iloc[0]
    assert any("slurm-2.out" in p.file for p in problems)
    assert not any("without scalescope events" in p.message for p in problems)


def test_newer_schema_is_a_problem_naming_the_version(tmp_path: Path) -> None:
    data = make_result("12").to_dict()
    data["schema_version"] = 99
    (tmp_path / "slurm-12.out").write_text(":::SCALESCOPE " + json.dumps(data) + "\n")
    (tmp_path / "result.json").write_text(json.dumps(data))
    result = parse([tmp_path])
    assert result.runs == []
    assert len(result.problems) == 2
    assert all("schema_version 99" in p.message for p in result.problems)


def test_requeued_job_that_finished_counts_once_with_restart_count(tmp_path: Path) -> None:
    r0 = make_result("77")
    r1 = with_restart(r0, 1)
    write_log(
        tmp_path / "slurm-77.out",
        start_of(r0),
        "slurmstepd: error: *** JOB 77 ON n1 CANCELLED AT "
        "2024-01-01T00:00:00 DUE TO PREEMPTION ***",
        start_of(r1),
        r1,
    )
    runs, failures, _ = load_all(tmp_path)
    assert failures.empty
    assert runs["restart_count"].tolist() == [1]
    assert runs["restart_reasons"].tolist() == ["preempted"]


def test_requeued_job_that_never_finished_reports_its_last_attempt(tmp_path: Path) -> None:
    r0 = make_result("78")
    write_log(
        tmp_path / "slurm-78.out",
        start_of(r0),
        "slurmstepd: error: *** JOB 78 ON n1 CANCELLED AT "
        "2024-01-01T00:00:00 DUE TO PREEMPTION ***",
        start_of(with_restart(r0, 1)),
        "slurmstepd: error: *** JOB 78 ON n1 CANCELLED AT "
        "2024-01-02T00:00:00 DUE TO TIME LIMIT ***",
    )
    _, failures, _ = load_all(tmp_path)
    assert failures[["job_id", "restart_count", "reason"]].values.tolist() == [
        ["78", 1, "time_limit"]
    ]


def test_submitit_task_logs_are_joined_by_job_id(tmp_path: Path) -> None:
    r = make_result("300", world=(1, 2))
    write_log(tmp_path / "300_0_log.out", start_of(r))
    write_log(
        tmp_path / "300_0_log.err", "Traceback (most recent call last):", "RuntimeError: boom"
    )
    write_log(tmp_path / "300_1_log.err", "srun: error: n1: task 1: Exited with exit code 1")
    _, failures, problems = load_all(tmp_path)
    assert problems == []
    row = failures.iloc[0]
    assert (row["job_id"], row["reason"], row["detail"]) == (
        "300",
        "exception",
        "RuntimeError: boom",
    )
    assert row["evidence_file"].endswith("300_0_log.err")


def test_submitit_logs_of_a_finished_job_make_no_failure_row(tmp_path: Path) -> None:
    """The record is complete: the run counts. An error at the end of another log of the job
    is a warning (test_finished_with_errors.py), a log that says nothing is nothing."""
    r = make_result("local-301")  # submitit's local executor: pid in names, "local-" in records
    write_log(tmp_path / "301_0_log.out", start_of(r), r)
    write_log(tmp_path / "301_0_log.err", "Traceback (most recent call last):", "OSError: x")
    write_log(tmp_path / "301_1_log.out", "submitit INFO - Job completed successfully")
    runs, failures, problems = load_all(tmp_path)
    assert len(runs) == 1 and failures.empty
    (p,) = problems
    assert p.file.endswith("301_0_log.err") and "OSError: x" in p.message


def test_array_task_logs_map_to_the_array_job(tmp_path: Path) -> None:
    r = make_result("9012", array=("9000", 3))
    write_log(tmp_path / "9000_3_0_log.out", start_of(r))
    write_log(
        tmp_path / "9000_3_0_log.err",
        "torch.distributed.DistStoreError: Timed out after "
        "30 seconds waiting for clients. 1/2 clients joined.",
    )
    _, failures, _ = load_all(tmp_path)
    assert failures[["job_id", "reason"]].values.tolist() == [["9012", "rendezvous_timeout"]]


def test_job_log_without_events(tmp_path: Path) -> None:
    write_log(tmp_path / "slurm-55.out", "hello from an unrelated job")
    write_log(
        tmp_path / "slurm-56.out",
        "Traceback (most recent call last):",
        "ImportError: cannot import name 'x'",
    )
    result = parse([tmp_path])
    assert [f.job_id for f in result.failures] == ["56"]
    assert result.failures[0].identity is None
    (note,) = result.problems
    assert note.severity == "info" and note.file.endswith("slurm-55.out")


def test_start_without_result_or_message_is_unknown(tmp_path: Path) -> None:
    write_log(tmp_path / "slurm-60.out", start_of(make_result("60")), *noise(10))
    _, failures, _ = load_all(tmp_path)
    assert failures["reason"].tolist() == ["unknown"]


def test_reading_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    import gc

    write_log(tmp_path / "slurm-65.out", make_result("65"))
    assert gc.isenabled()
    parse([tmp_path])
    assert gc.isenabled()


def test_a_run_stopped_by_sigterm_is_a_failed_row_not_a_measurement(tmp_path: Path) -> None:
    stopped = replace(make_result("13"), stop_reason="sigterm")
    write_log(
        tmp_path / "slurm-13.out",
        start_of(stopped),
        stopped,
        "slurmstepd: error: *** JOB 13 ON n1 CANCELLED AT 2024-01-01T00:00:00 "
        "DUE TO TIME LIMIT ***",
    )
    write_log(tmp_path / "slurm-14.out", start_of(make_result("14")), make_result("14"))
    runs, failures, _ = load_all(tmp_path)
    assert runs["job_id"].tolist() == ["14"]
    assert failures["job_id"].tolist() == ["13"]
    assert "stopped early (sigterm)" in failures["detail"].iloc[0]
    # what stopped it is read from the same log: Slurm's time limit, not a bare "cancelled"
    assert failures["reason"].iloc[0] == "time_limit"
    assert "DUE TO TIME LIMIT" in failures["evidence"].iloc[0]


def test_altered_record_is_a_problem_and_left_out(tmp_path: Path) -> None:
    r = make_result("23")
    line = encode(r).replace('"train_time_s":', '"train_time_s":1', 1)  # 100.0 -> 1100.0
    (tmp_path / "slurm-23.out").write_text(encode(start_of(r)) + "\n" + line + "\n")
    result = parse([tmp_path], jobs=1)
    assert result.runs == []
    (problem,) = result.problems
    assert Path(problem.file).name == "slurm-23.out"
    assert problem.message == (
        "line 2: checksum mismatch: the record was altered after it was written"
    )
    (failure,) = result.failures  # its start event still says which job it was
    assert failure.job_id == "23"


def test_a_fault_the_strategy_could_not_apply_is_a_warning_naming_it(tmp_path: Path) -> None:
    """A run whose record says a requested fault was not applied (a DDP hook's fault under
    FSDP) is kept as a run without that fault, and a warning names the fault and why."""
    why = "trained under FSDP2: no DDP buckets to hook (use faults.allgather_delay_s)"
    r = replace(make_result("21"), faults_not_applied={"allreduce_delay_s": why})
    write_log(tmp_path / "slurm-21.out", start_of(r), r)
    runs, _, problems = load_all(tmp_path)
    assert runs["job_id"].tolist() == ["21"]
    (p,) = problems
    assert p.severity == "warning" and p.file.endswith("slurm-21.out")
    assert "job 21: faults.allreduce_delay_s was not applied" in p.message and why in p.message
    clean = make_result("22")
    write_log(tmp_path / "slurm-22.out", start_of(clean), clean)
    _, _, problems = load_all(tmp_path)
    assert [q.message for q in problems] == [p.message]


def test_a_record_of_no_training_step_is_not_a_measurement(tmp_path: Path) -> None:
    """A job that ran to its end without a training step (no batch in its data, a step limit
    of 0) reports 0 steps and 0 samples/s: averaged in, it would halve its scale's mean.
    It is a failed row, and a warning names its file."""
    good = make_result("15")
    empty = replace(
        make_result("16"),
        steps=0,
        train_time_s=0.0,
        train_samples=0,
        epoch_times_s=[0.0],
        samples_per_s=0.0,
        samples_per_s_per_device=0.0,
        steady_time_s=None,
        steady_samples_per_s=None,
        steady_samples_per_s_per_device=None,
    )
    write_log(tmp_path / "slurm-15.out", start_of(good), good)
    write_log(tmp_path / "slurm-16.out", start_of(empty), empty)
    runs, failures, problems = load_all(tmp_path, jobs=1)
    assert runs["job_id"].tolist() == ["15"]
    assert failures[["job_id", "reason"]].values.tolist() == [["16", "no_measurement"]]
    assert "0 steps" in failures["detail"].iloc[0]
    (p,) = problems
    assert p.severity == "warning" and p.file.endswith("slurm-16.out")
    assert "job 16" in p.message and "0 steps" in p.message and "statistics" in p.message
