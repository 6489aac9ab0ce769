"""The one atomic-write helper: old content or new, never half, never a temp file left."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from core_helpers import REPO

from scalescope.atomic import replace_dir_atomic, write_bytes_atomic, write_text_atomic


def test_write_creates_folders_and_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state.json"
    write_text_atomic(target, "first, and longer than the second\n")
    write_text_atomic(target, "second\n")
    assert target.read_text() == "second\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]


def test_write_respects_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = write_bytes_atomic(tmp_path / "f", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    write_text_atomic(target, "old")

    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(target, "\udcff")  # unencodable: fails before any file is made
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_a_write_into_a_missing_read_only_folder_raises_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    target = tmp_path / "file-not-folder"
    target.write_text("x")
    with pytest.raises(OSError):
        write_text_atomic(target / "child.json", "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["file-not-folder"]


def test_replace_dir_swaps_whole_folders(tmp_path: Path) -> None:
    target = tmp_path / "summary"
    replace_dir_atomic(target, lambda d: (d / "one.txt").write_text("1"))
    replace_dir_atomic(target, lambda d: (d / "two.txt").write_text("2"))
    assert sorted(p.name for p in target.iterdir()) == ["two.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".summary.lock", "summary"]


def test_replace_dir_failure_keeps_the_old_folder(tmp_path: Path) -> None:
    target = tmp_path / "summary"
    replace_dir_atomic(target, lambda d: (d / "one.txt").write_text("1"))

    def half(d: Path) -> None:
        (d / "partial.txt").write_text("p")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        replace_dir_atomic(target, half)
    assert sorted(p.name for p in target.iterdir()) == ["one.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".summary.lock", "summary"]


def test_the_analysis_and_the_cluster_state_use_the_one_helper() -> None:
    """No second temp-file-then-rename left in the code."""
    offenders = []
    for folder in ("src", "analysis"):
        for path in (REPO / folder).rglob("*.py"):
            if path.name == "atomic.py":
                continue
            text = path.read_text()
            if any(s in text for s in ("mkstemp", "mkdtemp", "os.replace(", "os.rename(")):
                offenders.append(str(path.relative_to(REPO)))
    assert offenders == []
