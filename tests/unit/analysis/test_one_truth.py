"""One truth on every page: each paragraph of report.md is in report.html and the verdicts on
the terminal; the numbers of the plan reconcile with the scaling table's; a sentence claims an
interval only where one exists, a node only where one is added, a cause only where its
interval excludes zero. Summaries are written in this process (``--jobs 1``)."""

from __future__ import annotations

import contextlib
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from analysis_helpers import REPO, make_result
from waterfall_helpers import strategy_logs

import analysis.summarize as cli
from analysis.analyze import ProjectionRequest, analyze
from analysis.compute.plan import PlanRequest
from analysis.present.plan.text import plan_study
from analysis.present.tables.headline_tables import strategy_findings
from analysis.read.frame import load_all, runs_frame
from analysis.read.parse import ParseResult, Run

QUICKSTART = REPO / "tests" / "fixtures" / "quickstart"


class _Text(HTMLParser):
    """A page's text as a reader sees it (no style, script or SVG)."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("style", "script", "svg")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("style", "script", "svg")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def markdown_paragraphs(md: str) -> list[str]:
    """report.md's prose: paragraphs, list items and caption lines (not headings, tables,
    images or code), markup removed."""
    out = []
    for block in re.split(r"\n\s*\n", md):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        lines = [ln for ln in lines if not ln.startswith(("#", "|", "![", "```"))]
        items: list[list[str]] = []
        for ln in lines:
            if ln.startswith(("- ", "*")) or not items:
                items.append([ln.removeprefix("- ")])
            else:
                items[-1].append(ln)
        out += [_norm(" ".join(i).replace("**", "").replace("`", "").strip("*")) for i in items]
    return [p for p in out if p]


def _summarize(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main([*argv, "--jobs", "1"])
    return code, out.getvalue()


def _strategy_logs(root: Path) -> Path:
    """DDP and FSDP at 1 and 2 devices with per-step diagnosis: FSDP's exposed
    communication far above DDP's."""
    return strategy_logs(root, {"ddp": 0.001, "fsdp": 0.030})


@pytest.mark.parametrize("case", ["quickstart", "strategies"])
def test_every_paragraph_of_report_md_is_in_report_html(tmp_path: Path, case: str) -> None:
    logs = QUICKSTART if case == "quickstart" else _strategy_logs(tmp_path / "logs")
    out = tmp_path / "summary"
    code, _ = _summarize(
        str(logs), "--out", str(out), "--project", "2,4", "--plan-work", "1e9", "--format", "json"
    )
    assert code == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    page = "".join(_Text((out / "report.html").read_text(encoding="utf-8")).parts)
    page = _norm(page.replace("`", ""))  # report.md's code spans are plain text on the page
    paragraphs = markdown_paragraphs(md)
    assert len(paragraphs) > 10
    missing = [p for p in paragraphs if p not in page]
    assert not missing, missing[:3]
    if case == "strategies":
        assert "Sharded (FSDP) vs DDP, in words" in page


def test_the_strategy_verdict_is_on_the_terminal(tmp_path: Path) -> None:
    logs = _strategy_logs(tmp_path / "logs")
    for wide in ([], ["--wide"]):
        code, text = _summarize(str(logs), "--out", str(tmp_path / f"s{len(wide)}"), *wide)
        assert code == 0
        flat = _norm(text)
        assert "Sharded (FSDP) vs DDP, in words" in flat
        assert "DDP scales better on this cluster." in flat


def test_a_part_is_named_as_the_cause_only_where_its_interval_excludes_zero(
    tmp_path: Path,
) -> None:
    """The same exposed communication under both strategies: the largest difference between
    their parts is noise, and the paragraph says so instead of naming a cause."""
    strategy_logs(tmp_path, {"ddp": 0.010, "fsdp": 0.010})
    runs, _, _ = load_all(tmp_path)
    (finding,) = strategy_findings(analyze(runs))
    assert "The parts say why" not in finding["text"]
    assert "within noise" in finding["text"] and "includes zero" in finding["text"]


def _frame(times: dict[tuple[int, int], list[float]], **identity: object) -> pd.DataFrame:
    runs = []
    for (nodes, dpn), repeats in times.items():
        for i, t in enumerate(repeats):
            rec = make_result(f"{nodes}{dpn}{i}", world=(nodes, dpn), train_time_s=t, **identity)
            runs.append(Run(rec, ("x",)))
    return runs_frame(ParseResult(runs=runs))


def _study(runs: pd.DataFrame, request: PlanRequest, nodes=None):  # type: ignore[no-untyped-def]
    a = analyze(runs, plan=request, project=ProjectionRequest(nodes) if nodes else None)
    return a, plan_study(a.plan, a.scaling, runs)


def test_the_study_counts_each_series_own_repeats() -> None:
    """Two series, one run twice per scale and one once: each study states its own."""
    twice = _frame({(1, 1): [100.0, 101.0], (1, 2): [55.0, 56.0]})
    once = _frame({(1, 1): [90.0], (1, 2): [50.0]}, config_name="other")
    once["job_id"] = "o" + once["job_id"]
    _, study = _study(pd.concat([twice, once], ignore_index=True), PlanRequest(1e7))
    methods = {s["series"].split(" ")[0]: s["method"] for s in study}
    assert "2 repeats per scale" in methods["spiral"]
    assert "1 repeat per scale" in methods["other"]


def test_plan_throughput_is_the_scaling_tables_mean_and_projected_rows_multiply_back(
    tmp_path: Path,
) -> None:
    runs = load_all([str(QUICKSTART)], jobs=1).runs
    a, _ = _study(runs, PlanRequest(1e9), [2, 4, 8])
    plan, scaling = a.plan.table, a.scaling
    for _, r in plan[plan["source"] == "measured"].iterrows():
        s = scaling[(scaling["nodes"] == r["nodes"]) & (scaling["world_size"] == r["world_size"])]
        assert r["throughput"] == pytest.approx(s["samples_per_s_mean"].iloc[0], rel=1e-12)
    base = plan.iloc[0]
    per_device = base["throughput"] / base["world_size"]
    for _, r in plan[plan["source"] == "projected"].iterrows():
        assert r["throughput"] == pytest.approx(
            r["efficiency"] * r["world_size"] * per_device, rel=1e-12
        )
        for end in ("_low", "_high"):
            assert r[f"throughput{end}"] == pytest.approx(
                r[f"efficiency{end}"] * r["world_size"] * per_device, rel=1e-12
            )


def test_no_interval_is_claimed_where_a_scale_ran_once() -> None:
    """Run once each: the marginal step has no interval, and no sentence says it reaches."""
    runs = _frame({(1, 1): [100.0], (2, 1): [80.0], (4, 1): [75.0]})
    _, (s,) = _study(runs, PlanRequest(1e7, floor=0.7))
    assert "interval reaches" not in s["answer"]
    assert "no interval: judged on its centre" in s["answer"]


def test_node_is_said_only_where_a_node_is_added() -> None:
    """Every scale on one node: no step adds a node, and no sentence says one does."""
    runs = _frame({(1, 1): [100.0, 101.0], (1, 2): [70.0, 71.0], (1, 4): [60.0, 61.0]})
    _, (s,) = _study(runs, PlanRequest(1e7))
    assert "marginal node stops paying" not in s["answer"]
    assert "adds nodes" not in s["answer"] and "still pays" not in s["answer"]
    assert "No scale planned adds a node to another" in s["answer"]
    # charged by the device, the same step is the device's
    _, (s,) = _study(runs, PlanRequest(1e7, charge="device"))
    assert "marginal device stops paying beyond 1x1: going to 1x2" in s["answer"]
    assert "more node" not in s["answer"]


def test_charged_hours_carry_intervals() -> None:
    runs = _frame({(1, 1): [100.0, 101.0], (2, 1): [55.0, 56.0]})
    a, (s,) = _study(runs, PlanRequest(1e7, charge_factor=1.5))
    table = a.plan.table
    assert (table["charged_hours_low"] < table["charged_hours"]).all()
    assert (table["charged_hours"] < table["charged_hours_high"]).all()
    assert table["charged_hours"].tolist() == pytest.approx((table["node_hours"] * 1.5).tolist())
    column = s["columns"].index("Charged node-hours")
    assert all(re.search(r"\[[\d,.]+, [\d,.]+\]$", row[column]) for row in s["rows"])
