"""Output shown in the docs is what the commands print.

A fenced block right after ``<!-- output of: COMMAND -->`` in README.md (or another page under
docs/) is output: the test runs COMMAND in this process, on the fixtures it names, with a
terminal 100 columns wide and ``OUT`` a fresh folder, and every line the block shows must
appear in what it printed, in order (a block may leave lines out, never change one). The
lines of the block after its last printed line are read from ``OUT/report.md`` likewise (a
paragraph of the report). ``…`` in a shown path stands for any run-specific part.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from analysis_helpers import REPO, summarize_main

MARKER = re.compile(r"<!-- output of: (?P<cmd>.+?) -->\n```[a-z]*\n(?P<block>.*?)\n```", re.S)
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _blocks() -> list[tuple[str, str, str]]:
    found = []
    for page in PAGES:
        for m in MARKER.finditer(page.read_text(encoding="utf-8")):
            found.append((page.name, m.group("cmd"), m.group("block")))
    return found


def _matches(shown: str, printed: str) -> bool:
    pattern = re.escape(shown.rstrip()).replace("…", ".*")
    return re.fullmatch(pattern, printed.rstrip()) is not None


def _in_order(shown: list[str], printed: list[str]) -> list[str]:
    """The shown lines not found in ``printed`` in order (empty when all are)."""
    at, missing = 0, []
    for line in shown:
        while at < len(printed) and not _matches(line, printed[at]):
            at += 1
        if at == len(printed):
            missing.append(line)
            at = 0
        else:
            at += 1
    return missing


def test_the_readme_marks_its_output() -> None:
    assert any(page == "README.md" for page, _, _ in _blocks())


@pytest.mark.parametrize(("page", "command", "block"), _blocks(), ids=lambda v: str(v)[:40])
def test_shown_output_is_printed(tmp_path: Path, page: str, command: str, block: str) -> None:
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "analysis.summarize"], f"{page}: {command}"
    out = tmp_path / "summary"
    args = [str(out) if a == "OUT" else a for a in argv[3:]]
    proc = summarize_main(*args, env={"COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    printed = [
        line.replace(str(out), "outputs/sweeps/quickstart-…/summary")
        for line in proc.stdout.splitlines()
    ]
    # chunks between blank lines; one that starts "At " is a paragraph of report.md
    chunks = [c.splitlines() for c in re.split(r"\n\s*\n", block) if c.strip()]
    on_screen = [line for c in chunks if not c[0].startswith("At ") for line in c]
    paragraphs = [" ".join(c) for c in chunks if c[0].startswith("At ")]
    missing = _in_order(on_screen, printed)
    assert not missing, f"{page}: shown but not printed by {command}: {missing}"
    report = " ".join((out / "report.md").read_text(encoding="utf-8").split())
    for words in paragraphs:
        assert " ".join(words.split()) in report, f"{page}: not in report.md: {words[:300]}"
