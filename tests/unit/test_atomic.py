"""The one atomic-write helper: old content or new, never half, never a temp file left."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from scalescope.atomic import replace_dir_atomic, write_bytes_atomic, write_text_atomic

REPO = Path(__file__).resolve().parents[2]


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


def test_concurrent_writers_never_leave_a_torn_file(tmp_path: Path) -> None:
    """Real processes race on one file; a reader only ever sees one writer's whole text."""
    target = tmp_path / "shared.txt"
    code = (
        "import sys; from scalescope.atomic import write_text_atomic\n"
        "for _ in range(200): write_text_atomic(sys.argv[1], sys.argv[2] * 5000)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(target), letter], env=env)
        for letter in "ab"
    ]
    seen = set()
    while any(p.poll() is None for p in procs):
        try:
            text = target.read_text()
        except FileNotFoundError:
            continue
        seen.add(text)
    assert all(p.wait() == 0 for p in procs)
    assert seen <= {"a" * 5000, "b" * 5000}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.txt"]


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


def test_concurrent_folder_swaps_each_land_whole(tmp_path: Path) -> None:
    # Real processes replacing one folder at once: every swap succeeds, the survivor is one
    # writer's complete folder, nothing is left behind but the lock.
    import subprocess
    import sys

    target = tmp_path / "summary"
    code = (
        "import sys, time; from pathlib import Path; "
        "from scalescope.atomic import replace_dir_atomic\n"
        "def fill(d):\n"
        "    for i in range(20): (d / f'f{i}.txt').write_text(sys.argv[2])\n"
        "for _ in range(15): replace_dir_atomic(sys.argv[1], fill)\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(target), f"writer{i}"]) for i in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    texts = {p.read_text() for p in target.iterdir()}
    assert len(list(target.iterdir())) == 20 and len(texts) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".summary.lock", "summary"]
