"""The summary folder's files: the CSV tables, summary.json, report.md, report.html and the
charts, written into a fresh folder that replaces the previous summary whole
(:mod:`analysis.present.report.outdir`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.analyze import Analysis
from analysis.present.charts.chart_files import chart_links, start_charts
from analysis.present.display import DisplayTable
from analysis.present.report.html_report import report_html
from analysis.present.report.outdir import write_atomically
from analysis.present.report.report import report_markdown
from analysis.read.frame import Loaded, written


def csv_frames(loaded: Loaded, analysis: Analysis) -> dict[str, pd.DataFrame]:
    runs = loaded.runs.drop(columns=["versions", "diagnosis", "config", "sharding", "batch"]).copy()
    runs["epoch_times_s"] = [";".join(f"{t:.6g}" for t in ts) for ts in runs["epoch_times_s"]]
    problems = pd.DataFrame(
        [(p.file, p.severity, p.message) for p in loaded.problems],
        columns=["file", "severity", "message"],
    )
    return {
        "runs": runs,
        "groups": analysis.groups,
        "scaling": analysis.scaling,
        "amdahl": analysis.amdahl,
        "precision": analysis.precision,
        "diagnosis": _waterfall_table(analysis),
        **(
            {
                "projection": analysis.projection.table,
                "projection_check": analysis.projection.checks,
            }
            if analysis.projection is not None
            else {}
        ),
        **({"plan": analysis.plan.table} if analysis.plan is not None else {}),
        "failures": loaded.failures,
        "problems": problems,
    }


def _waterfall_table(analysis: Analysis) -> pd.DataFrame:
    from analysis.compute.waterfall import WATERFALL_COLUMNS

    w = analysis.waterfall
    return w.table if w is not None else pd.DataFrame(columns=WATERFALL_COLUMNS)


def write_outputs(
    target: Path,
    loaded: Loaded,
    analysis: Analysis,
    tables: Sequence[DisplayTable],
    doc: dict[str, Any],
    doc_text: str,
    with_charts: bool,
    jobs: int | None = None,
) -> Path:
    tolerance = float(doc["settings"]["loss_tolerance"])
    with_charts = with_charts and len(loaded.runs) > 0

    def fill(tmp: Path) -> None:
        charts_done = (
            start_charts(tmp / "charts", analysis, tolerance, jobs) if with_charts else None
        )
        try:
            for name, frame in csv_frames(loaded, analysis).items():
                written(frame).to_csv(tmp / f"{name}.csv", index=False)
            (tmp / "summary.json").write_text(doc_text, encoding="utf-8")
            links = chart_links(analysis)
            (tmp / "report.md").write_text(
                report_markdown(doc=doc, tables=tables, charts=links if with_charts else []),
                encoding="utf-8",
            )
        except BaseException:
            if charts_done is not None:  # never leave the chart process writing behind us
                with contextlib.suppress(BaseException):
                    charts_done()
            raise
        svgs = charts_done() if charts_done is not None else None
        drawn = None if svgs is None else [(title, svgs[Path(path).stem]) for title, path in links]
        (tmp / "report.html").write_text(
            report_html(doc=doc, tables=tables, charts=drawn), encoding="utf-8"
        )

    return write_atomically(target, fill)
