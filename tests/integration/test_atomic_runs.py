"""Atomic writes and folder swaps under concurrent real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from core_helpers import REPO


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
