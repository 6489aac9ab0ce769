"""Reading logs and run directories: records and problems, never an exception."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from analysis_helpers import make_result, noise, start_of, with_restart, write_log

import analysis.read.scan as scan_mod
from analysis import load_all
from analysis.read.files import SUMMARY_MARKER
from analysis.read.parse import parse
from analysis.read.scan import job_hint
from scalescope.record import encode, write_json_atomic


def test_empty_folder_gives_nothing_and_no_error(tmp_path: Path) -> None:
    result = parse([tmp_path])
    assert (result.runs, result.failures, result.problems) == ([], [], [])


def test_missing_path_is_a_problem(tmp_path: Path) -> None:
    result = parse([tmp_path / "nope"])
    assert [p.message for p in result.problems] == ["no such file or folder"]


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


def test_binary_file_is_skipped_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "weights.out").write_bytes(b"\x00\x01\x02" * 1000)
    (tmp_path / "model.ckpt").write_bytes(b"\x00" * 10)  # known binary suffix: silent
    result = parse([tmp_path])
    (problem,) = result.problems
    assert Path(problem.file).name == "weights.out"
    assert problem.message.startswith("binary file, skipped: no record in it; 3000 unreadable")
    assert "the first at bytes 0-2999 (line 1): undecodable bytes" in problem.message


def test_non_utf8_noise_does_not_hide_a_record(tmp_path: Path) -> None:
    r = make_result("9")
    (tmp_path / "slurm-9.out").write_bytes(b"\xff\xfe caf\xe9\n" + encode(r).encode() + b"\n")
    runs, _, problems = load_all(tmp_path)
    assert runs["job_id"].tolist() == ["9"] and problems == []


def test_truncated_record_is_a_problem_and_the_job_a_failure(tmp_path: Path) -> None:
    r = make_result("11")
    line = encode(r)
    (tmp_path / "slurm-11.out").write_text(encode(start_of(r)) + "\n" + line[: len(line) // 2])
    runs, failures, problems = load_all(tmp_path)
    assert runs.empty
    assert "line 2" in problems[0].message and "not valid JSON" in problems[0].message
    assert failures["job_id"].tolist() == ["11"]
    assert "broken event line" in failures["detail"].iloc[0]


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


def test_submitit_logs_of_a_finished_job_are_not_read_for_evidence(tmp_path: Path) -> None:
    r = make_result("local-301")  # submitit's local executor: pid in names, "local-" in records
    write_log(tmp_path / "301_0_log.out", start_of(r), r)
    write_log(tmp_path / "301_0_log.err", "Traceback (most recent call last):", "OSError: x")
    write_log(tmp_path / "301_1_log.out", "submitit INFO - Job completed successfully")
    runs, failures, problems = load_all(tmp_path)
    assert len(runs) == 1 and failures.empty and problems == []


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


def test_records_split_across_read_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 97)  # every line crosses chunk edges
    r = make_result("61")
    write_log(tmp_path / "slurm-61.out", *noise(5), start_of(r), *noise(5), r, *noise(3))
    result = parse([tmp_path], jobs=1)
    assert [x.record.identity.job_id for x in result.runs] == ["61"]
    assert result.problems == []


def test_line_numbers_survive_chunking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 50)
    write_log(tmp_path / "slurm-62.out", *noise(4), ":::SCALESCOPE {broken")
    (p,) = parse([tmp_path], jobs=1).problems
    assert p.message.startswith("line 9:")


def test_overlong_line_is_skipped_not_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(scan_mod, "MAX_LINE_BYTES", 4000)
    r = make_result("63")
    path = tmp_path / "slurm-63.out"
    path.write_text(":::SCALESCOPE " + "x" * 20_000 + "\n" + encode(r) + "\n")
    result = parse([tmp_path], jobs=1)
    assert [x.record.identity.job_id for x in result.runs] == ["63"]
    assert "longer than" in result.problems[0].message


def test_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    os.symlink(tmp_path / "gone.out", tmp_path / "dangling.out")
    result = parse([tmp_path])
    (p,) = result.problems
    assert p.file.endswith("dangling.out") and p.message.startswith("cannot read")


def test_walker_skips_summary_hidden_and_excluded_folders(tmp_path: Path) -> None:
    r = make_result("70")
    for sub in ("summary", ".cache", "excluded"):
        write_log(tmp_path / sub / "slurm-70.out", r)
    (tmp_path / "summary" / SUMMARY_MARKER).write_text("{}")
    assert parse([tmp_path], exclude=[tmp_path / "excluded"]).runs == []


def test_files_can_be_given_directly(tmp_path: Path) -> None:
    r = make_result("71")
    log = write_log(tmp_path / "any-name.txt", r)
    runs, _, _ = load_all([log, log])
    assert runs["job_id"].tolist() == ["71"]


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("slurm-123.out", "123"),
        ("slurm-123_4.out", "123_4"),
        ("123_0_log.out", "123"),
        ("123_4_1_log.err", "123_4"),
        ("spiral-5678.out", "5678"),
        ("notes.txt", None),
    ],
)
def test_job_hint_from_file_names(name: str, hint: str | None) -> None:
    assert job_hint(name) == hint


def test_frame_columns_are_typed_with_units(tmp_path: Path) -> None:
    r = make_result("80", world=(2, 4))
    write_log(tmp_path / "slurm-80.out", r)
    runs, failures, _ = load_all(tmp_path)
    assert str(runs["world_size"].dtype) == "Int64"
    assert runs["train_time_s"].dtype == "float64"
    assert str(runs["started_at"].dtype).startswith("datetime64")
    assert runs["version_torch"].iloc[0] == "2.13.0+cpu"
    assert {"samples_per_s", "job_time_s", "peak_host_rss_gib_max"} <= set(runs.columns)
    assert failures.empty and "reason" in failures.columns


def test_line_number_of_a_cut_last_line_across_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 64)
    r = make_result("64")
    line = encode(r)
    # 7 noise lines, the start event (line 8), then a result cut before its newline (line 9)
    text = "\n".join([*noise(3), "x", encode(start_of(r)), line[:200]])
    (tmp_path / "slurm-64.out").write_text(text)
    (p,) = parse([tmp_path], jobs=1).problems
    assert p.message.startswith("line 9:"), p.message


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
