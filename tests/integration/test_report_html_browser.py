"""report.html in a real browser: what headless Chromium rendered, not just the source.

The summary of the committed fixture logs is written by the real command; Chromium then
loads a copy of its ``report.html`` with one inline script added at the end that writes its
measurements into the DOM (every chart's rendered box, the headline table's cell texts, the
resources the page fetched, the page width), reads them back with ``--dump-dom``, and takes a
screenshot of the unmodified page.

Chromium is Debian's package (``/usr/bin/chromium``). ``scripts/test.sh`` runs
``scripts/setup.sh --dev`` first, which installs it as root with ``apt-get install -y
chromium``; where it is still missing, this test installs it the same way, and skips (one line
saying why) only where it cannot: not root, no apt-get, or (outside CI) no package mirror, as
on a cluster's GPU node. With ``CI`` set a failed install fails the test.

``SCALESCOPE_UPDATE_SCREENSHOT=1`` also copies the screenshot to ``docs/report.png`` (in 256
colours), the picture the documentation shows: review it before committing.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from analysis_helpers import REPO, run_summarize
from matplotlib.image import imread

from analysis.present.display import with_ci

UPDATE = os.environ.get("SCALESCOPE_UPDATE_SCREENSHOT") == "1"
SCREENSHOT = REPO / "docs" / "report.png"
WINDOW = (1280, 4000)

MEASURE = """<script>
(() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.width, r.height]; };
  const texts = (row) => [...row.cells].map((c) => c.innerText.trim());
  const measured = {
    charts: [...document.querySelectorAll("#charts figure")].map((f) => ({
      title: f.querySelector("figcaption").innerText,
      box: box(f.querySelector("svg")),
    })),
    svgs: document.querySelectorAll("svg").length,
    headline_head: texts(document.querySelector("#headline thead tr")),
    headline: [...document.querySelectorAll("#headline tbody tr")].map(texts),
    resources: performance.getEntriesByType("resource").map((e) => e.name),
    page_width: document.documentElement.scrollWidth,
    view_width: document.documentElement.clientWidth,
  };
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify(measured);
  document.body.appendChild(out);
})();
</script>
"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("Chromium is not installed and cannot be here (needs root and apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
        if proc.returncode != 0 and not os.environ.get("CI"):
            # a cluster node without a route to Debian's mirrors: say so and how to run it
            pytest.skip(
                f"Chromium is not installed and `{' '.join(cmd)}` failed here (no package "
                "mirror?): install Debian's chromium, or run scripts/setup.sh --dev where "
                "apt-get works, to run the browser tests"
            )
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    found = shutil.which("chromium")
    assert found, "apt-get installed chromium but it is not on PATH"
    return found


def _browse(
    chromium: str, profile: Path, page: Path, *action: str, window: tuple[int, int] = WINDOW
) -> str:
    """One headless Chromium run on ``page``; its stdout. No network, no first-run work."""
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={window[0]},{window[1]}",
        *action,
        page.as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.timeout(1500)  # a first apt-get install of Chromium takes minutes
def test_report_html_renders_in_chromium(tmp_path: Path) -> None:
    chromium = _chromium()
    out = tmp_path / "summary"
    proc = run_summarize("tests/fixtures/logs", "--out", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "report.html" in proc.stderr
    doc = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    page = out / "report.html"

    measuring = tmp_path / "measure" / "report.html"  # next to nothing: a lone file
    measuring.parent.mkdir()
    measuring.write_text(
        page.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"),
        encoding="utf-8",
    )
    dom = _browse(chromium, tmp_path / "profile", measuring, "--dump-dom")
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, f"the measuring script did not run; DOM starts: {dom[:500]}"
    m: dict[str, Any] = json.loads(html.unescape(found.group(1)))

    # Nothing fetched: the page holds everything it shows.
    assert m["resources"] == []
    # Every chart of the folder rendered at a readable size.
    stems = {p.stem for p in (out / "charts").iterdir()}
    assert len(m["charts"]) == len(stems) == m["svgs"] == 7, m["charts"]
    for chart in m["charts"]:
        width, height = chart["box"]
        assert width >= 400 and height >= 250, chart
    # Wide tables scroll inside their frame; the page itself never gets wider than the window.
    assert m["page_width"] <= m["view_width"], (m["page_width"], m["view_width"])

    # The headline table, as rendered, holds summary.json's numbers.
    head = m["headline_head"]
    assert head[:2] == ["Configuration", "Devices"], head
    speedup, efficiency = head.index("Speedup [95% CI]"), head.index("Efficiency [95% CI]")
    rows = {(r[0], r[1].removesuffix(" (baseline)")): r for r in m["headline"]}
    assert len(rows) == len(doc["scaling"]) == 5
    for s in doc["scaling"]:
        row = rows[(s["series"], str(s["world_size"]))]
        assert row[speedup] == with_ci(s["speedup"], s["speedup_ci_low"], s["speedup_ci_high"])
        assert float(row[speedup].split("x")[0]) == pytest.approx(s["speedup"], abs=0.005)
        eff = with_ci(
            s["parallel_efficiency"],
            s["parallel_efficiency_ci_low"],
            s["parallel_efficiency_ci_high"],
            "%",
        )
        assert row[efficiency] == eff
        assert row[1].endswith("(baseline)") == s["is_baseline"]

    # The page as a reader sees it: a screenshot with something on it.
    shot = tmp_path / "report.png"
    _browse(chromium, tmp_path / "profile", page, f"--screenshot={shot}")
    pixels = imread(shot)
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50, f"{len(colours)} colour(s): a blank page"
    if UPDATE:  # as 256 colours: a third of the bytes, no visible difference
        from PIL import Image  # matplotlib's own dependency

        SCREENSHOT.parent.mkdir(exist_ok=True)
        Image.open(shot).convert("RGB").quantize(256).save(SCREENSHOT, optimize=True)


MEASURE_PROJECTION = """<script>
(() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.width, r.height]; };
  const texts = (row) => [...row.cells].map((c) => c.innerText.trim());
  const charts = [...document.querySelectorAll("#charts figure")];
  const projected = charts.filter((f) => f.innerText.includes("Projected scaling"));
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({
    projection_charts: projected.map((f) => box(f.querySelector("svg"))),
    head: texts(document.querySelector("#table-projection thead tr")),
    rows: [...document.querySelectorAll("#table-projection tbody tr")].map(texts),
    words: (document.querySelector("#projection") || {innerText: ""}).innerText,
  });
  document.body.appendChild(out);
})();
</script>
"""


@pytest.mark.timeout(600)
def test_the_projection_renders_in_chromium(tmp_path: Path) -> None:
    """A summary with --project (real records of an emulated network): its chart rendered at
    a readable size, its table holds summary.json's projected efficiencies, its paragraph
    is on the page."""
    chromium = _chromium()
    out = tmp_path / "summary"
    proc = run_summarize("tests/fixtures/projection", "--project", "2,4", "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    measuring = tmp_path / "measure" / "report.html"
    measuring.parent.mkdir()
    page = (out / "report.html").read_text(encoding="utf-8")
    measuring.write_text(page.replace("</body>", MEASURE_PROJECTION + "</body>"))
    dom = _browse(chromium, tmp_path / "profile", measuring, "--dump-dom")
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, f"the measuring script did not run; DOM starts: {dom[:500]}"
    m: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    assert len(m["projection_charts"]) == 1, m
    width, height = m["projection_charts"][0]
    assert width >= 400 and height >= 250, m
    efficiency = m["head"].index("Efficiency [95% PI]")
    shown = {(r[1], r[2]): r[efficiency] for r in m["rows"]}
    for r in doc["projection"]:
        if r["what_if"] == "as measured":
            want = with_ci(r["efficiency"], r["efficiency_low"], r["efficiency_high"], "%")
            assert shown[("as measured", str(r["nodes"]))] == want
    assert "projected efficiency is" in m["words"] and "Self-check" in m["words"]
    shot = tmp_path / "projection.png"
    _browse(chromium, tmp_path / "profile", out / "report.html", f"--screenshot={shot}")
    pixels = imread(shot)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50, f"{len(colours)} colour(s): a blank page"


MEASURE_TABLES = """<script>
(() => {
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify([...document.querySelectorAll(".table-wrap")].map((w) => ({
    table: w.querySelector("table").dataset.table,
    scroll: w.scrollWidth,
    client: w.clientWidth,
  })));
  document.body.appendChild(out);
})();
</script>
"""


@pytest.mark.timeout(600)
def test_the_quick_starts_tables_fit_a_1300_px_window(tmp_path: Path) -> None:
    """The quick start's summary at 1300 px: no table needs a sideways scroll bar, "Where
    the efficiency went" with its nine intervals included (an interval goes under its
    figure, a heading breaks after a slash)."""
    chromium = _chromium()
    out = tmp_path / "summary"
    proc = run_summarize("tests/fixtures/quickstart", "--out", out)
    assert proc.returncode == 0, proc.stderr
    measuring = tmp_path / "measure" / "report.html"
    measuring.parent.mkdir()
    page = (out / "report.html").read_text(encoding="utf-8")
    measuring.write_text(page.replace("</body>", MEASURE_TABLES + "</body>"), encoding="utf-8")
    dom = _browse(chromium, tmp_path / "profile", measuring, "--dump-dom", window=(1300, 2000))
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, f"the measuring script did not run; DOM starts: {dom[:500]}"
    tables: list[dict[str, Any]] = json.loads(html.unescape(found.group(1)))
    assert "diagnosis" in {t["table"] for t in tables}, tables
    wide = [t for t in tables if t["scroll"] > t["client"]]
    assert not wide, wide


MEASURE_PLAN = """<script>
(() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.width, r.height]; };
  const charts = [...document.querySelectorAll("#charts figure")];
  const planned = charts.filter((f) => f.innerText.includes("Time to train vs node-hours"));
  const study = document.querySelector("#plan") || {innerText: ""};
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({
    plan_charts: planned.map((f) => box(f.querySelector("svg"))),
    words: study.innerText,
    rows: [...document.querySelectorAll("#plan tbody tr")].map((r) => r.cells[0].innerText),
  });
  document.body.appendChild(out);
})();
</script>
"""


@pytest.mark.timeout(600)
def test_the_scaling_study_renders_in_chromium(tmp_path: Path) -> None:
    """A summary with --plan-work: the scaling study's words and table and the time to train
    vs node-hours chart are on the page, the chart at a readable size."""
    chromium = _chromium()
    out = tmp_path / "summary"
    argv = ["--project", "2,4,8", "--plan-work", "2e11", "--plan-unit", "tokens"]
    proc = run_summarize("tests/fixtures/quickstart", *argv, "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    measuring = tmp_path / "measure" / "report.html"
    measuring.parent.mkdir()
    page = (out / "report.html").read_text(encoding="utf-8")
    measuring.write_text(page.replace("</body>", MEASURE_PLAN + "</body>"))
    dom = _browse(chromium, tmp_path / "profile", measuring, "--dump-dom")
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, f"the measuring script did not run; DOM starts: {dom[:500]}"
    m: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    assert len(m["plan_charts"]) == 1, m
    width, height = m["plan_charts"][0]
    assert width >= 400 and height >= 250, m
    (study,) = doc["plan_study"]
    assert m["rows"] == [row[0] for row in study["rows"]] == ["1x1", "1x2", "2x2", "4x2", "8x2"]
    for text in ("Scaling study", "Node count chosen", "The fastest scale", "Measured on"):
        assert text in m["words"], text
    study_md = (out / "report.md").read_text().split("## Scaling study")[1].split("## Charts")[0]
    assert "Node count chosen" in study_md
    assert max(len(line) for line in study_md.splitlines()) <= 120
