"""Every chart title and table heading that names a quantity says what the chart or column
shows: the numbers drawn (bar heights, line points) or printed (table cells) are found in the
frame the chart or table is made from, and the columns they match must be ones the title's
words allow. A rate that exists both ways (throughput, speedup, efficiency: steady state or
whole training) must say which, in its title or heading or in a caption sentence about it.

On the quick start's logs, whose every group has a steady state."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import numpy as np
import pandas as pd
import pytest
from analysis_helpers import REPO

from analysis.analyze import Analysis, analyze
from analysis.compute.groups import STEADY
from analysis.present.charts.charts import CHARTS, step_parts_chart
from analysis.present.display import DisplayTable
from analysis.present.tables.tables import all_tables
from analysis.read.frame import Loaded, load_all

QUICKSTART = REPO / "tests" / "fixtures" / "quickstart"

QUANTITIES: list[tuple[str, str]] = [
    # words in a title or heading -> the columns ("frame.column") it may show
    (r"train(?:ing)? time", r"(runs|groups)\.train_time_s\w*|scaling\.whole_train_\w+"),
    (
        r"steady",
        r"(runs|groups)\.steady_\w+"
        r"|scaling\.(speedup|parallel_efficiency|per_device_throughput_efficiency)\w*"
        r"|scaling\.samples_per_s(_per_device)?_mean",  # the headline's, on a steady basis
    ),
    (r"whole[- ]training", r"(runs|groups)\.samples_per_s\w*|scaling\.whole_train_\w+"),
    (r"time per epoch|time/epoch", r"\w+\.mean_epoch_time_s\w*"),
    (r"validation loss|val loss", r"\w+\.val_loss\w*"),
    (r"step time", r"diagnosis\.\w*step_s"),
    (r"job[- ]time", r"scaling\.job_time_\w+|(runs|groups)\.job_time_s\w*"),
    (r"speedup", r"scaling\.\w*speedup\w*"),
    (r"efficiency", r"scaling\.\w*efficiency\w*"),
    (
        r"throughput",
        r"(runs|groups)\.(steady_)?samples_per_s\w*"
        r"|scaling\.(samples_per_s_mean|whole_train_samples_per_s_mean"
        r"|\w*efficiency\w*|\w*speedup\w*)",
    ),
]
TWO_WAYS = re.compile(r"throughput|speedup|efficiency", re.I)
"""Rates with a steady-state and a whole-training form."""
QUALIFIERS = (r"steady", r"whole[- ]training", r"job[- ]time")
"""The words of :data:`QUANTITIES` that say which form of such a rate is shown."""
QUALIFIER = re.compile("|".join(QUALIFIERS), re.I)
SCALES = (1.0, 100.0, 1000.0)  # as is, percent, milliseconds


@pytest.fixture(scope="module")
def summary() -> tuple[Loaded, Analysis]:
    loaded = load_all(QUICKSTART, jobs=1)
    analysis = analyze(loaded.runs)
    assert (analysis.scaling["headline_basis"] == STEADY).all()
    return loaded, analysis


def _matches(shown: Iterable[float], frames: dict[str, pd.DataFrame], rel: float) -> set[str]:
    """``frame.column`` whose every value (at some scale) is among ``shown``, or which holds
    every shown value: the columns these numbers are."""
    numbers = np.array([v for v in shown if math.isfinite(v)])
    out = set()
    for name, frame in frames.items():
        for col in frame.columns:
            if not pd.api.types.is_numeric_dtype(frame[col]) or frame[col].dtype == bool:
                continue
            values = frame[col].astype(float).to_numpy()
            values = values[np.isfinite(values)]
            if len(values) == 0 or len(numbers) == 0:
                continue
            for k in SCALES:
                near = np.isclose(values[:, None] * k, numbers[None, :], rtol=rel, atol=1e-9)
                if near.any(axis=1).all() or near.any(axis=0).all():
                    out.add(f"{name}.{col}")
    return out


def _check(label: str, matched: set[str]) -> list[str]:
    """The words of ``label`` that name a quantity the matched columns are not."""
    wrong = []
    for words, columns in QUANTITIES:
        if re.search(words, label, re.I) and not any(re.fullmatch(columns, m) for m in matched):
            wrong.append(f"{label!r} says {words!r} but shows {sorted(matched)}")
    return wrong


def _drawn(fig: object) -> list[float]:
    ax = fig.axes[0]  # type: ignore[attr-defined]
    out = [float(p.get_height()) for p in ax.patches]
    for line in ax.lines:
        out += [float(v) for v in np.asarray(line.get_ydata(), dtype=float)]
    return out


def test_every_chart_title_names_what_it_draws(summary: tuple[Loaded, Analysis]) -> None:
    _, analysis = summary
    charts = [(CHARTS[n][0], CHARTS[n][1](getattr(analysis, CHARTS[n][0]))) for n in CHARTS]
    series = analysis.waterfall.table["series"].iloc[0]
    charts.append(("diagnosis", step_parts_chart(analysis.waterfall.table, series)))
    wrong, named = [], 0
    for frame_name, fig in charts:
        title = fig.axes[0].get_title()
        frame = (
            analysis.waterfall.table if frame_name == "diagnosis" else getattr(analysis, frame_name)
        )
        matched = _matches(_drawn(fig), {frame_name: frame}, rel=1e-6)
        wrong += _check(title, matched)
        named += any(re.search(w, title, re.I) for w, _ in QUANTITIES)
        if TWO_WAYS.search(title) and not QUALIFIER.search(title):
            wrong.append(f"{title!r}: steady state or whole training?")
    assert named == len(charts)  # every chart names its quantity
    assert not wrong, "\n".join(wrong)


def _cells(table: DisplayTable, column: str) -> list[float]:
    out = []
    for cell in table.frame[column]:
        m = re.match(r"-?[\d,]*\.?\d+", str(cell).strip())
        if m:
            out.append(float(m.group(0).replace(",", "")))
    return out


def _qualifier(table: DisplayTable, heading: str) -> str:
    """What says whether a column is the steady state or the whole training: its heading
    where it does, else the caption sentences that speak of one of its words."""
    if QUALIFIER.search(heading):
        return heading
    words = {w for w in re.findall(r"[a-z]{4,}", heading.lower())}
    sentences = [s for c in table.caption for s in re.split(r"(?<=[.;])\s+", c)]
    return " ".join(s for s in sentences if words & set(re.findall(r"[a-z]{4,}", s.lower())))


def _qualified(said: str, matched: set[str]) -> list[str]:
    """The steady-state / whole-training words ``said`` holds that the columns are not."""
    found = [(w, c) for w, c in QUANTITIES if re.search(w, said, re.I) and w in QUALIFIERS]
    if not found:
        return ["steady state or whole training?"]
    return [
        f"{w!r} but shows {sorted(matched)}"
        for w, c in found
        if not any(re.fullmatch(c, m) for m in matched)
    ]


SOURCES = {"runs": "runs", "scaling": "scaling", "groups": "groups"}
"""Display table -> the frame its numbers come from."""


def test_every_table_heading_names_what_its_column_holds(
    summary: tuple[Loaded, Analysis],
) -> None:
    loaded, analysis = summary
    frames = {"runs": loaded.runs, "scaling": analysis.scaling, "groups": analysis.groups}
    tables = all_tables(loaded.runs, loaded.failures, loaded.problems, analysis)
    wrong, checked = [], 0
    for table in tables:
        if table.name not in SOURCES:
            continue
        source = {SOURCES[table.name]: frames[SOURCES[table.name]]}
        for heading in table.frame.columns:
            if not any(re.search(w, heading, re.I) for w, _ in QUANTITIES):
                continue
            cells = _cells(table, heading)
            if not cells:
                continue
            checked += 1
            matched = _matches(cells, source, rel=5e-3)
            wrong += [f"{table.title}: {w}" for w in _check(heading, matched)]
            if TWO_WAYS.search(heading):
                said = _qualifier(table, heading)
                wrong += [f"{table.title}: {heading!r}: {w}" for w in _qualified(said, matched)]
        if any(re.search(w, table.title, re.I) for w, _ in QUANTITIES):
            shown = {
                m
                for heading in table.frame.columns
                for m in _matches(_cells(table, heading), source, rel=5e-3)
            }
            wrong += [f"title {w}" for w in _check(table.title, shown)]
    assert checked >= 8
    assert not wrong, "\n".join(wrong)
