"""The summary's charts as files: every chart drawn into ``charts/`` (PNG and SVG; the
diagnosis and projection charts PNG only), in a forked process while the tables are written,
and each one's SVG text handed back for report.html."""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.analyze import Analysis

CHART_TITLES = {
    "speedup": "Speedup vs devices",
    "efficiency": "Parallel efficiency",
    "throughput": "Throughput vs devices",
    "epoch_time": "Time per epoch",
    "val_loss": "Validation loss",
}


def save_charts(directory: Path, analysis: Analysis, loss_tolerance: float) -> dict[str, str]:
    """Draw every chart into ``directory``; returns each one's SVG text by file stem, for
    report.html (the diagnosis charts are written as PNG only: their SVG stays in memory)."""
    import matplotlib

    from analysis.present.charts import charts
    from analysis.present.report.html_report import figure_svg

    # No timestamps and no random ids in the files (matplotlib salts SVG ids at random unless
    # told otherwise): a summary of the same inputs is byte-identical.
    with matplotlib.rc_context({"svg.hashsalt": "scalescope"}):
        return _draw_charts(directory, analysis, loss_tolerance, charts.CHARTS, figure_svg)


def _draw_charts(
    directory: Path,
    analysis: Analysis,
    loss_tolerance: float,
    chart_funcs: Any,
    figure_svg: Callable[[Any], str],
) -> dict[str, str]:
    svgs = {}
    frames = {"scaling": analysis.scaling, "groups": analysis.groups}
    for name, (frame_name, func) in chart_funcs.items():
        extra = {"loss_tolerance": loss_tolerance} if name == "val_loss" else {}
        fig = func(frames[frame_name], **extra)
        for ext in ("png", "svg"):
            meta = {"Date": None} if ext == "svg" else {"Software": None}
            fig.savefig(directory / f"{name}.{ext}", metadata=meta)
        svgs[name] = (directory / f"{name}.svg").read_text(encoding="utf-8")
    figures = [
        *_memory_figures(analysis),
        *_diagnosis_figures(analysis),
        *_projection_figures(analysis),
    ]
    for name, fig in figures + _plan_figures(analysis):
        fig.savefig(directory / f"{name}.png", metadata={"Software": None})
        svgs[name] = figure_svg(fig)
    return svgs


def projection_charts(analysis: Analysis) -> list[tuple[str, str]]:
    """(series, file stem) of each projected series' chart (``projection_<slug>``)."""
    from analysis.compute.waterfall import chart_slugs

    result = analysis.projection
    if result is None or result.table.empty:
        return []
    names = list(dict.fromkeys(result.table["series"]))
    slugs = chart_slugs(names)
    return [(name, f"projection_{slugs[name]}") for name in names]


def _projection_figures(analysis: Analysis) -> list[tuple[str, Any]]:
    from analysis.present.charts import charts

    result = analysis.projection
    return [
        (stem, charts.projection_chart(analysis.scaling, result.table, series))
        for series, stem in projection_charts(analysis)
    ]


MEMORY_CHART = "memory"
"""The model-state chart's file stem, drawn where strategies are compared."""


def _memory_figures(analysis: Analysis) -> list[tuple[str, Any]]:
    from analysis.present.charts import charts

    if analysis.strategy.empty or analysis.strategy["model_state_gib_mean"].isna().all():
        return []
    return [(MEMORY_CHART, charts.memory_chart(analysis.strategy))]


def plan_charts(analysis: Analysis) -> list[tuple[str, str]]:
    """(series, file stem) of each planned series' chart (``plan_<slug>``)."""
    from analysis.compute.waterfall import chart_slugs

    plan = analysis.plan
    if plan is None or plan.table.empty:
        return []
    names = list(dict.fromkeys(plan.table["series"]))
    slugs = chart_slugs(names)
    return [(name, f"plan_{slugs[name]}") for name in names]


def _plan_figures(analysis: Analysis) -> list[tuple[str, Any]]:
    from analysis.present.plan.chart import plan_chart

    plan = analysis.plan
    return [
        (stem, plan_chart(plan.table, series, plan.request.floor, plan.request.charge))
        for series, stem in plan_charts(analysis)
        if plan is not None
    ]


def _diagnosis_charts(analysis: Analysis) -> list[tuple[str, str, str]]:
    """(kind, series, file stem) of each series' waterfall (``diagnosis_<slug>``) and
    per-rank chart (``ranks_<slug>``), in series order (slug:
    :func:`analysis.compute.waterfall.chart_slugs`); series without any breakdown get none."""
    from analysis.compute.waterfall import chart_series, chart_slugs

    w = analysis.waterfall
    if w is None:
        return []
    slugs = chart_slugs(list(dict.fromkeys(w.table["series"])))
    out = []
    for series in chart_series(w):
        out.append(("diagnosis", series, f"diagnosis_{slugs[series]}"))
        if (w.ranks["series"] == series).any():
            out.append(("ranks", series, f"ranks_{slugs[series]}"))
    return out


def diagnosis_chart_links(analysis: Analysis) -> list[tuple[str, str]]:
    """(title, relative path) of the diagnosis charts, for report.md."""
    titles = {"diagnosis": "Where the step time went", "ranks": "Per-rank step time"}
    return [
        (f"{titles[kind]}: {series}", f"charts/{stem}.png")
        for kind, series, stem in _diagnosis_charts(analysis)
    ]


def _diagnosis_figures(analysis: Analysis) -> list[tuple[str, Any]]:
    from analysis.present.charts import charts

    w = analysis.waterfall
    out = []
    for kind, series, stem in _diagnosis_charts(analysis):
        assert w is not None
        if kind == "diagnosis":
            out.append((stem, charts.step_parts_chart(w.table, series)))
        else:
            out.append((stem, charts.ranks_chart(w.ranks, series)))
    return out


def _chart_child(conn: Any, directory: Path, analysis: Analysis, loss_tolerance: float) -> None:
    try:
        conn.send(save_charts(directory, analysis, loss_tolerance))
    except BaseException as exc:  # the parent re-raises it
        conn.send(exc if isinstance(exc, OSError) else RuntimeError(f"charts: {exc!r}"))


def start_charts(
    directory: Path, analysis: Analysis, loss_tolerance: float, jobs: int | None = None
) -> Callable[[], dict[str, str]]:
    """Render the charts in a forked process while this one writes the tables (matplotlib's
    import and drawing are a third of a big summary's time); returns the function that waits
    for it, re-raises its error and returns the charts' SVG text. With ``jobs == 1`` (no
    other process wanted) or without fork, renders here and now."""
    directory.mkdir()
    if jobs == 1 or "fork" not in multiprocessing.get_all_start_methods():
        svgs = save_charts(directory, analysis, loss_tolerance)
        return lambda: svgs
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    sys.stdout.flush()  # else the child would print our buffered output a second time
    sys.stderr.flush()
    proc = ctx.Process(
        target=_chart_child, args=(send, directory, analysis, loss_tolerance), daemon=True
    )
    proc.start()
    send.close()

    def wait() -> dict[str, str]:
        try:
            answer = receive.recv()
        except EOFError:
            answer = RuntimeError("the chart process died without a word")
        proc.join()
        if isinstance(answer, BaseException):
            raise answer
        return dict(answer)

    return wait


def chart_links(analysis: Analysis) -> list[tuple[str, str]]:
    """(title, relative path) of every chart in the order report.md and report.html show
    them: the scaling charts, the diagnosis charts, the projections."""
    links = [(title, f"charts/{name}.png") for name, title in CHART_TITLES.items()]
    if not analysis.strategy.empty and analysis.strategy["model_state_gib_mean"].notna().any():
        links.append(("Model state per device", f"charts/{MEMORY_CHART}.png"))
    links += diagnosis_chart_links(analysis)
    links += [
        (f"Projected scaling: {series}", f"charts/{stem}.png")
        for series, stem in projection_charts(analysis)
    ]
    links += [
        (f"Time to train vs node-hours: {series}", f"charts/{stem}.png")
        for series, stem in plan_charts(analysis)
    ]
    return links
