"""report.html: one self-contained page, charts inlined as SVG, every text escaped.

Summaries are written in this process by ``analysis.summarize.main`` with ``--jobs 1``, which
draws the charts here too, so the real hook in ``write_outputs`` runs without starting a
process.
What the page looks like once rendered is checked in a real browser by
``tests/integration/test_report_html_browser.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from analysis_helpers import FIXTURES, make_result, start_of, write_log

import analysis.summarize as cli
from analysis.present.charts.chart_files import CHART_TITLES
from analysis.present.display import with_ci
from analysis.present.report.html_report import figure_svg, inline_svg

WEIRD = "<b>&x"
"""A configuration name that is also markup."""


class Page(HTMLParser):
    """Tags, the attributes that point somewhere, and every table's cell texts."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, value)
        self.tables: dict[str, list[list[str]]] = {}
        self._table: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "srcset", "data", "action", "poster"):
                self.links.append((tag, name, value or ""))
        a = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(str(a.get("data-table")), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self._table[-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture(scope="module")
def fixture_summary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The committed fixture logs summarised, charts drawn, once for this file."""
    out = tmp_path_factory.mktemp("html") / "summary"
    assert cli.main([str(FIXTURES), "--out", str(out), "--format", "json", "--jobs", "1"]) == 0
    yield out


def _page(folder: Path) -> tuple[str, Page]:
    text = (folder / "report.html").read_text(encoding="utf-8")
    return text, Page(text)


def test_page_needs_nothing_beside_it(fixture_summary: Path) -> None:
    text, page = _page(fixture_summary)
    assert text.startswith("<!DOCTYPE html>") and page.tags.count("html") == 1
    for tag, attribute, value in page.links:
        assert value.startswith(("#", "data:")), f"<{tag} {attribute}={value!r}>"
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(page.tags)
    assert "@import" not in text
    assert not re.search(r"url\((?!#)", text), "a CSS url() to something outside the page"
    # the fragment links land on something
    ids = set(re.findall(r'\sid="([^"]+)"', text))
    assert {v[1:] for _, _, v in page.links if v.startswith("#")} <= ids


def test_every_chart_of_the_folder_is_inlined_as_svg(fixture_summary: Path) -> None:
    text, page = _page(fixture_summary)
    charts = {p.stem for p in (fixture_summary / "charts").iterdir()}
    assert len(charts) == 7  # five charts plus the breakdown's two (PNG only in the folder)
    assert page.tags.count("svg") == page.tags.count("figure") == len(charts)
    assert "<?xml" not in text and "<!DOCTYPE svg" not in text and "<metadata" not in text
    for title in CHART_TITLES.values():
        assert f"<figcaption>{title}</figcaption>" in text
    assert "Where the step time went: spiral · strong · fp32" in text
    # one page, many charts: no two elements share an id
    ids = re.findall(r'\sid="([^"]+)"', text)
    assert len(ids) == len(set(ids))


def test_headline_table_holds_the_numbers_of_summary_json(fixture_summary: Path) -> None:
    _, page = _page(fixture_summary)
    doc = json.loads((fixture_summary / "summary.json").read_text(encoding="utf-8"))
    head, *rows = page.tables["headline"]
    assert head[:2] == ["Configuration", "Devices"]
    speedup, efficiency = head.index("Speedup [95% CI]"), head.index("Efficiency [95% CI]")
    by_scale = {(r[0], r[1].removesuffix(" (baseline)")): r for r in rows}
    assert len(rows) == len(by_scale) == len(doc["scaling"]) == 5
    for s in doc["scaling"]:
        row = by_scale[(s["series"], str(s["world_size"]))]
        assert row[speedup] == with_ci(s["speedup"], s["speedup_ci_low"], s["speedup_ci_high"])
        assert row[efficiency] == with_ci(
            s["parallel_efficiency"],
            s["parallel_efficiency_ci_low"],
            s["parallel_efficiency_ci_high"],
            "%",
        )
        assert row[1].endswith("(baseline)") == s["is_baseline"]
    assert any(r[speedup].startswith("7.30x") for r in rows)


def test_page_carries_findings_failures_and_provenance(fixture_summary: Path) -> None:
    text, page = _page(fixture_summary)
    assert "<h2>Read this first</h2>" in text
    assert "<h2>Where the efficiency went, in words</h2>" in text
    assert "busbw 0.00578 GB/s" in text
    failures = page.tables["failures"]
    reasons = {r[0]: r[5] for r in failures[1:]}
    assert reasons["5007"] == "CUDA out of memory" and reasons["5001"] == "time limit"
    assert "2.13.0+cpu" in text and "NVIDIA H200" in text  # versions, machine
    assert "2025-03-01T09:00:00+00:00" in text  # when the runs ran
    assert str(FIXTURES) in text  # the inputs


def test_markup_in_names_and_messages_is_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "in <&>"
    for job, world, t in (("1", (1, 1), 10.0), ("2", (1, 2), 6.0)):
        r = make_result(job, world=world, train_time_s=t, config_name=WEIRD)
        write_log(folder / f"slurm-{job}.out", start_of(r), r)
    crashed = make_result("3", world=(1, 2), config_name=WEIRD)
    write_log(
        folder / "slurm-3.out",
        start_of(crashed),
        "Traceback (most recent call last):",
        '  File "train.py", line 1, in <module>',
        "ValueError: expected <int> & got </td>",
    )
    out = tmp_path / "out"
    assert cli.main([str(folder), "--out", str(out), "--format", "json", "--jobs", "1"]) == 0
    assert "report.html" in capsys.readouterr().err
    text, page = _page(out)
    assert "&lt;b&gt;&amp;x" in text and WEIRD not in text
    assert "ValueError: expected &lt;int&gt; &amp; got &lt;/td&gt;" in text
    assert "in &lt;&amp;&gt;" in text  # the input folder's name
    assert "b" not in page.tags
    assert page.tags.count("svg") == len(CHART_TITLES)
    # the parsed page gives the names back as they were
    assert page.tables["headline"][1][0].startswith(WEIRD)
    detail = page.tables["failures"][0].index("Detail")
    assert page.tables["failures"][1][detail] == "ValueError: expected <int> & got </td>"


def test_without_charts_the_page_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "in"
    for job, world, t in (("1", (1, 1), 10.0), ("2", (1, 2), 6.0)):
        r = make_result(job, world=world, train_time_s=t)
        write_log(folder / f"slurm-{job}.out", start_of(r), r)
    out = tmp_path / "out"
    args = [str(folder), "--out", str(out), "--format", "json", "--no-charts", "--jobs", "1"]
    assert cli.main(args) == 0
    assert "wrote" in capsys.readouterr().err
    text, page = _page(out)
    assert not (out / "charts").exists()
    assert "svg" not in page.tags and "Charts were not drawn" in text
    assert len(page.tables["headline"]) == 3


def test_inline_svg_fits_an_html_page() -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.plot([1, 2, 3], [1, 4, 9], marker="o", label="a & <b>")
    ax.set_title("x < y & z")
    ax.legend()
    raw = figure_svg(fig)
    assert raw.startswith("<?xml") and "<!DOCTYPE svg" in raw
    svg = inline_svg(raw, "c7-", "a <chart>")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "<metadata" not in svg and "<?xml" not in svg
    root = svg[: svg.index(">") + 1]
    assert " width=" not in root and " height=" not in root and "viewBox=" in root
    assert 'aria-label="a &lt;chart&gt;"' in root
    ids = re.findall(r'\sid="([^"]+)"', svg)
    assert ids and all(i.startswith("c7-") for i in ids)
    refs = re.findall(r'href="#([^"]+)"', svg) + re.findall(r"url\(#([^)]+)\)", svg)
    assert refs and set(refs) <= set(ids)
