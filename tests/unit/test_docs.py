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


# --- the code the documents name ----------------------------------------------------------

CODE_SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^(?:[\w.-]+/)*[\w.-]+\.(?:py|md|yaml|yml|json|sh|toml)$")
REPO_ROOTS = ("src", "analysis", "tests", "benchmarks", "examples", "configs", "scripts", "docs")
PACKAGE_ROOTS = {
    **{d: REPO / "src" / "scalescope" for d in ("job", "launch", "workloads")},
    **{d: REPO / "analysis" for d in ("read", "compute", "present", "commands")},
}
"""A path that starts inside a package (``job/run/measure.py``) is read from that package."""
NAME = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
# `NAME` in `path.py`, `NAME` (`path.py` ..., and `path.py: NAME`
NAME_IN_PATH = re.compile(rf"`({NAME})` (?:in|\(in|\() ?`([\w./-]+\.py)`")
PATH_COLON_NAME = re.compile(rf"^([\w./-]+\.py): ?({NAME})$")
DOTTED = re.compile(rf"^(?:scalescope|analysis)\.{NAME}$")


USERS_OWN = {"configs/clusters/mysite.yaml"}
"""Files the documents tell the user to make."""


def code_path(text: str) -> Path | None:
    """The file a code span names as a path from the repository or a package root; None for
    anything else (a bare file name, a command, a pattern)."""
    if not PATH.match(text) or "<" in text or text in USERS_OWN:
        return None
    first = text.split("/", 1)[0]
    if first in REPO_ROOTS or text in ("README.md", "pyproject.toml"):
        return REPO / text
    if first in PACKAGE_ROOTS and "/" in text:
        return PACKAGE_ROOTS[first] / text
    return None


def defines(path: Path, name: str, *, imported: bool = False) -> bool:
    """Whether ``path`` defines ``name`` (its first part): a function, class or assignment at
    any level. An import is not a definition (a name is placed where it is made), except with
    ``imported`` (an import path, ``analysis.summarize.main``, works through a re-export)."""
    import ast

    head = name.split(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found = node.name == head
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found = any(isinstance(t, ast.Name) and t.id == head for t in targets)
        elif imported and isinstance(node, (ast.Import, ast.ImportFrom)):
            found = any((a.asname or a.name.split(".")[0]) == head for a in node.names)
        else:
            found = False
        if found:
            return True
    return False


def module_file(dotted: str) -> tuple[Path, str] | None:
    """``scalescope.collectives.FSDP`` -> (src/scalescope/collectives.py, ``FSDP``): the
    longest prefix that is a module, and the rest; None when no prefix is one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO / "src" if parts[0] == "scalescope" else REPO
        stem = base.joinpath(*parts[:cut])
        for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
            if candidate.is_file():
                return candidate, ".".join(parts[cut:])
    return None


def code_references(text: str) -> list[tuple[Path, str | None, str]]:
    """(file, name or None, as written) for every code reference of a document's text; a
    dotted import path is written without backticks around a file."""
    out: list[tuple[Path, str | None, str]] = []
    for span in CODE_SPAN.findall(text):
        span = span.strip()
        colon = PATH_COLON_NAME.match(span)
        path = code_path(colon.group(1) if colon else span)
        if path is not None:
            out.append((path, colon.group(2) if colon else None, span))
        elif DOTTED.match(span):
            found = module_file(span)
            if found is None:
                out.append((REPO / span.replace(".", "/"), None, span))
            elif found[1]:
                out.append((found[0], found[1], span))
    for name, where in NAME_IN_PATH.findall(text):
        path = code_path(where)
        if path is not None:
            out.append((path, name, f"`{name}` in `{where}`"))
    return out


def broken_references(text: str) -> list[str]:
    problems = []
    for path, name, written in code_references(text):
        if not path.exists():
            problems.append(f"{written}: {_shown(path)} does not exist")
        elif name is not None and path.suffix == ".py":
            if defines(path, name, imported="/" not in written and "`" not in written):
                continue
            problems.append(f"{written}: {_shown(path)} defines no {name.split('.')[0]}")
    return problems


@pytest.mark.parametrize("path", DOCUMENTS, ids=_shown)
def test_code_the_documents_name_exists(path: Path) -> None:
    """Every file path the documents name in code (`src/scalescope/record.py`), and every name
    they place in a file (`NAME` in `path.py`, `path.py: NAME`, `scalescope.module.NAME`), is
    there."""
    assert broken_references(path.read_text(encoding="utf-8")) == []


def test_a_name_placed_in_the_wrong_file_is_found() -> None:
    """The check itself: a constant named in a file that does not define it, a file that does
    not exist, and the right place passing."""
    wrong = (
        "from none to all (`FSDP_HIDDEN_BAND` in "
        "`analysis/compute/projection/published/scoring.py`)"
    )
    assert broken_references(wrong) == [
        "`FSDP_HIDDEN_BAND` in `analysis/compute/projection/published/scoring.py`: "
        "analysis/compute/projection/published/scoring.py "
        "defines no FSDP_HIDDEN_BAND"
    ]
    right = (
        "over `FSDP_HIDDEN_BAND` (`analysis/compute/projection/step_time/fsdp_comm.py`; none to all"
    )
    assert broken_references(right) == []
    assert broken_references("`src/scalescope/nothing.py`") == [
        "src/scalescope/nothing.py: src/scalescope/nothing.py does not exist"
    ]
    assert (
        broken_references(
            "`src/scalescope/workloads/tokens.py: KEY` and `scalescope.workloads.tokens.KEY`"
        )
        == []
    )
    assert broken_references("`scalescope.workloads.tokens.NOPE`")[0].endswith("defines no NOPE")
