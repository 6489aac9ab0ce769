"""Reading one file (analysis.read.scan): the marker lines found across read chunks of any
size, over-long lines skipped, an event line that does not decode named by its line, the job
a file name hints at."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from analysis_helpers import make_result, noise, start_of, write_log

import analysis.read.scan as scan_mod
from analysis.read.parse import parse
from analysis.read.scan import job_hints
from scalescope.record import MARKER, encode


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


def test_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    os.symlink(tmp_path / "gone.out", tmp_path / "dangling.out")
    result = parse([tmp_path])
    (p,) = result.problems
    assert p.file.endswith("dangling.out") and p.message.startswith("cannot read")


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("slurm-123.out", "123"),
        ("slurm-123_4.out", "123_4"),
        ("123_0_log.out", "123"),
        ("123_4_1_log.err", "123_4"),
        ("spiral-5678.out", "5678"),
        ("notes.txt", None),
        # sbatch's %x_%j, %x-%j and %j, as .out, .err or .log
        ("train_7301.out", "7301"),
        ("train_7301.err", "7301"),
        ("scaling_job_7304.log", "7304"),
        ("scaling-job-7305.log", "7305"),
        ("7306.log", "7306"),
        ("train_7307_2.out", "7307_2"),  # %x_%A_%a
        ("resnet50_7308.out", "7308"),  # digits of the job name are not the job id
        ("job7310.out", "7310"),  # job%j.out: the id glued to the name
        ("run7311.err", "7311"),
        # names that only end in a number: not a job id
        ("slurmd-node1.log", None),
        ("records.log", None),
        ("7309_log.txt", None),
        # %x_%j of a job name ending in a number: the last number is the job id, unless the
        # one after it is shorter, as an array task's index is (%x_%A_%a above)
        ("bert_1024_7310.out", "7310"),
        ("scale_4_7312.out", "7312"),
        ("bert_8192_7313.err", "7313"),
        ("train-7307_15.out", "7307_15"),  # %x-%A_%a
        # a job name ending in a number longer than the job id (a date): a task index over
        # Slurm's default array limit (indices up to 1000) is a job id
        ("exp_20240101_7310.out", "7310"),
        ("exp_20240101_7310.err", "7310"),
        ("exp-20240101-7310.out", "7310"),
        ("exp_20240101_7310.log", "7310"),
        ("7307_1500.out", "7307_1500"),  # %A_%a: the whole name
        ("slurm-7307_1500.err", "7307_1500"),  # sbatch's slurm-%A_%a
        # a model's or a host's number glued to letters is not a job id (under four digits,
        # or with a leading zero)
        ("resnet50.out", None),
        ("resnet152.out", None),
        ("node01.out", None),
        ("node0001.err", None),
        ("train_v2.out", None),
        # .log: <name>_<id>, <name>-<id> or <id>, with at least three digits and no dot in the
        # name (NCCL_DEBUG_FILE's %h.%p is a host and a pid)
        ("rank_1.log", None),
        ("nccl.node1.12345.log", None),
        ("gpu-a01.12345.log", None),
        ("train.7301.log", None),
        ("12.log", None),
        ("bert_1024_7314.log", "7314"),
        ("train_7307_2.log", "7307_2"),
    ],
)
def test_job_hint_from_file_names(name: str, hint: str | None) -> None:
    assert next(iter(job_hints(name)), None) == hint


def test_wrong_field_type_is_a_problem_naming_file_and_field(tmp_path: Path) -> None:
    r = make_result("24")
    data = {**r.to_dict(), "steps": "40"}  # no checksum: a record from before they existed
    (tmp_path / "slurm-24.out").write_text(f"{MARKER} {json.dumps(data)}\n")
    (problem,) = parse([tmp_path], jobs=1).problems
    assert Path(problem.file).name == "slurm-24.out"
    assert "field 'steps' should be an integer, got a string" in problem.message


def test_logs_named_by_sbatch_patterns_are_read_for_failures(tmp_path: Path) -> None:
    """A job that died before its start event is known by its log's name only: sbatch's
    ``%x_%j.out`` and a ``.log`` name are job logs like ``slurm-%j.out``."""
    write_log(tmp_path / "train_7301.out", "Traceback (most recent call last):", "ImportError: x")
    write_log(
        tmp_path / "scaling_job_7304.log",
        "slurmstepd: error: *** JOB 7304 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME "
        "LIMIT ***",
    )
    result = parse([tmp_path], jobs=1)
    assert sorted((f.job_id, f.diagnosis.code) for f in result.failures) == [
        ("7301", "exception"),
        ("7304", "time_limit"),
    ]


def test_logs_whose_names_only_end_in_a_number_are_not_job_logs(tmp_path: Path) -> None:
    """A job name ending in a number gives the job id after it; a model's log, a rank's and
    NCCL's debug file (host.pid) are no job's."""
    error = ["Traceback (most recent call last):", "RuntimeError: NCCL error: unhandled"]
    write_log(tmp_path / "bert_1024_7310.out", *error)
    for name in ("resnet50.out", "rank_1.log", "nccl.node1.12345.log", "node01.err"):
        write_log(tmp_path / name, *error)
    result = parse([tmp_path], jobs=1)
    assert [(f.job_id, f.diagnosis.code) for f in result.failures] == [("7310", "collective_error")]
    assert result.problems == []


@pytest.mark.parametrize("tail", [10, 57, 58, 59, 60, 1000])
def test_the_end_of_a_log_is_searched_with_its_line_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tail: int
) -> None:
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 16)  # the counted head spans reads
    lines = ["x" * 20] * 5 + ["Traceback (most recent call last):", "ValueError: last words"]
    path = write_log(tmp_path / "7_1_log.err", *lines)
    evidence, problems = scan_mod.scan_evidence(str(path), "7_1_log.err", tail)
    assert problems == []
    if tail < 58:  # the traceback's first line is cut: an exception line alone says nothing
        assert evidence == []
    else:
        (ev,) = evidence
        assert (ev.code, ev.line_no) == ("exception", 7)
        assert path.read_bytes()[ev.offset :].startswith(b"ValueError")
