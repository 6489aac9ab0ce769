"""The README stays short and starts with the two commands; every relative link in the
Markdown documentation points at a file that exists and, with an anchor, at a heading of it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
DOCUMENTS = [README, *DOCS, REPO / "analysis" / "README.md"]

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^()\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


def _prose(text: str) -> str:
    """``text`` without fenced code blocks (links and headings there are not links and headings)."""
    return FENCE.sub("", text)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, every character other than a letter, a digit,
    '-', '_' or a space dropped, spaces turned into '-'."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of ``path``; a repeated one gets GitHub's ``-1``, ``-2``... too."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for match in HEADING.finditer(_prose(path.read_text(encoding="utf-8"))):
        base = anchor(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _shown(path: Path) -> str:
    return os.path.relpath(path, REPO)


def relative_links(path: Path) -> list[str]:
    prose = INLINE_CODE.sub("", _prose(path.read_text(encoding="utf-8")))
    targets = [m.group(1) for m in LINK.finditer(prose)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


def test_anchor_follows_githubs_rule() -> None:
    assert anchor("Timing the input pipeline: `scalescope bench-data`") == (
        "timing-the-input-pipeline-scalescope-bench-data"
    )
    assert anchor("Regression gate for a cluster's CI") == "regression-gate-for-a-clusters-ci"
    assert anchor("Cluster profile (`configs/clusters/*.yaml`)") == (
        "cluster-profile-configsclustersyaml"
    )


def test_readme_is_at_most_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move detail to docs/"


def test_readme_first_code_block_is_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    first = FENCE.search(text)
    assert first, "README.md has no code block"
    body = first.group(0).splitlines()[1:-1]
    commands = [line.split("#", 1)[0].strip() for line in body]
    assert [c for c in commands if c] == ["bash scripts/demo.sh", "bash scripts/test.sh"]


def test_documents_are_found() -> None:
    assert README.exists()
    names = {p.name for p in DOCS}
    assert {"cluster.md", "analysis.md", "config.md", "development.md"} <= names


@pytest.mark.parametrize("path", DOCUMENTS, ids=[str(p.relative_to(REPO)) for p in DOCUMENTS])
def test_relative_links_resolve(path: Path) -> None:
    problems = []
    for target in relative_links(path):
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{target}: {_shown(linked)} does not exist")
            continue
        if fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            problems.append(f"{target}: no heading '#{fragment}' in {_shown(linked)}")
    assert not problems, f"{_shown(path)}:\n" + "\n".join(problems)


def test_the_readme_links_every_docs_page() -> None:
    linked = {(REPO / t.partition("#")[0]).resolve() for t in relative_links(README)}
    assert not [p.name for p in DOCS if p.resolve() not in linked]
