"""Finding the files to read (analysis.read.files): paths given directly or walked, the
folders skipped, a path that is not there."""

from __future__ import annotations

from pathlib import Path

from analysis_helpers import make_result, write_log

from analysis import load_all
from analysis.read.files import SUMMARY_MARKER, discover
from analysis.read.parse import parse


def test_missing_path_is_a_problem(tmp_path: Path) -> None:
    result = parse([tmp_path / "nope"])
    assert [p.message for p in result.problems] == ["no such file or folder"]


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


def test_linked_folders_are_followed_once(tmp_path: Path) -> None:
    """A scale kept elsewhere and linked in (``runs -> elsewhere/runs``) is read; a folder
    reached twice (by its link and its own path) is read once, and a link back up the tree
    does not loop."""
    elsewhere = tmp_path / "elsewhere" / "runs"
    write_log(elsewhere / "slurm-81.out", make_result("81"))
    sweep = tmp_path / "sweep"
    write_log(sweep / "slurm-80.out", make_result("80"))
    (sweep / "runs").symlink_to(elsewhere, target_is_directory=True)
    (sweep / "again").symlink_to(elsewhere, target_is_directory=True)
    (sweep / "runs" / "up").symlink_to(sweep, target_is_directory=True)  # a loop
    files, problems = discover([sweep])
    assert problems == []
    # the folder reached twice is read under its first link by name
    assert [display for _, display in files] == ["sweep/slurm-80.out", "sweep/again/slurm-81.out"]
    result = parse([sweep, tmp_path / "elsewhere"], jobs=1)
    assert sorted(r.record.identity.job_id for r in result.runs) == ["80", "81"]
    assert result.problems == []
