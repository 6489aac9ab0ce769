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
from analysis.read.scan import job_hint
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
    ],
)
def test_job_hint_from_file_names(name: str, hint: str | None) -> None:
    assert job_hint(name) == hint


def test_wrong_field_type_is_a_problem_naming_file_and_field(tmp_path: Path) -> None:
    r = make_result("24")
    data = {**r.to_dict(), "steps": "40"}  # no checksum: a record from before they existed
    (tmp_path / "slurm-24.out").write_text(f"{MARKER} {json.dumps(data)}\n")
    (problem,) = parse([tmp_path], jobs=1).problems
    assert Path(problem.file).name == "slurm-24.out"
    assert "field 'steps' should be an integer, got a string" in problem.message
