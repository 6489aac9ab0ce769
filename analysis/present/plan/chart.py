"""The plan's chart: time to train against the charged hours, one point per scale, with interval
bars; the scales whose efficiency per charged unit falls below the floor at the lower end of
their interval, and the dominated ones, marked apart. Takes the plan frame
(:func:`analysis.compute.plan.plan_table`) and returns a Figure, like the other charts.

Both axes are logarithmic (times and hours over orders of magnitude). An interval reaching
further than :data:`CAP` times its centre is drawn to the cap with an arrow, and its end is
printed beside it, so one wide interval does not swamp the points. Labels are placed where
they overlap neither each other nor a point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from analysis.compute.plan import dominated_by, lower_end
from analysis.read.overlap import shape_label

CAP = 3.0
"""An interval end further than this factor from its centre is capped (on the log axes)."""

LABEL_OFFSETS = ((6, 4), (6, -12), (-34, 4), (-34, -12), (6, 14), (-34, 14), (6, -22))
"""Where a point's label may go, in points from the point, tried in order."""


def _short(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _capped_bars(mid: np.ndarray, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, list]:
    """Error bars (2 x n) from the centre, each end at most CAP times away; and the ends cut
    (index, 'low' or 'high', the true end)."""
    cut = []
    lo = np.where(np.isfinite(low), low, mid)
    hi = np.where(np.isfinite(high), high, mid)
    for i in range(len(mid)):
        if lo[i] < mid[i] / CAP:
            cut.append((i, "low", float(lo[i])))
            lo[i] = mid[i] / CAP
        if hi[i] > mid[i] * CAP:
            cut.append((i, "high", float(hi[i])))
            hi[i] = mid[i] * CAP
    return np.vstack([(mid - lo).clip(min=0), (hi - mid).clip(min=0)]), cut


def _draw(ax, rows: pd.DataFrame, x: str, style: dict) -> None:  # type: ignore[no-untyped-def]
    """One group of points with capped bars and arrows at the cut ends."""
    xm, ym = rows[x].to_numpy(float), rows["time_h"].to_numpy(float)
    xerr, xcut = _capped_bars(
        xm, rows[f"{x}_low"].to_numpy(float), rows[f"{x}_high"].to_numpy(float)
    )
    yerr, ycut = _capped_bars(
        ym, rows["time_low_h"].to_numpy(float), rows["time_high_h"].to_numpy(float)
    )
    ax.errorbar(xm, ym, xerr=xerr, yerr=yerr, capsize=3, **style)
    for cut, axis in ((xcut, "x"), (ycut, "y")):
        for i, end, value in cut:
            f = CAP if end == "high" else 1 / CAP
            tip = (xm[i] * f, ym[i]) if axis == "x" else (xm[i], ym[i] * f)
            ax.annotate(
                "",
                xy=tip,
                xytext=(xm[i], ym[i]),
                arrowprops={"arrowstyle": "->", "color": style["color"], "lw": 1},
            )
            ax.annotate(
                f"{end} {_short(value)}",
                tip,
                textcoords="offset points",
                xytext=(3, 3) if axis == "x" else (4, 0),
                fontsize="x-small",
                color=style["color"],
            )


def _place_labels(ax, fig: Figure, points: Sequence[tuple[float, float, str]]) -> None:  # type: ignore[no-untyped-def]
    """Each label at the first offset whose box overlaps no label placed before it and no
    point (boxes estimated from the text's length at the font's size). The layout is drawn
    once first (on Agg, which needs no display), so the points sit where they will be saved."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    to_px = ax.transData.transform
    scale = fig.dpi / 72.0
    dots = [to_px((px, py)) for px, py, _ in points]
    placed: list[tuple[float, float, float, float]] = []

    def clear(box: tuple[float, float, float, float]) -> bool:
        x0, y0, x1, y1 = box
        if any(x0 < b[2] and b[0] < x1 and y0 < b[3] and b[1] < y1 for b in placed):
            return False
        return not any(x0 - 3 < dx < x1 + 3 and y0 - 3 < dy < y1 + 3 for dx, dy in dots)

    for (px, py, text), (dx, dy) in zip(points, dots, strict=True):
        w, h = 6.0 * len(text) * scale, 9.0 * scale
        chosen = LABEL_OFFSETS[0]
        for ox, oy in LABEL_OFFSETS:
            x0, y0 = dx + ox * scale, dy + oy * scale
            if clear((x0, y0, x0 + w, y0 + h)):
                chosen = (ox, oy)
                break
        x0, y0 = dx + chosen[0] * scale, dy + chosen[1] * scale
        placed.append((x0, y0, x0 + w, y0 + h))
        ax.annotate(text, (px, py), textcoords="offset points", xytext=chosen, fontsize="small")


def plan_chart(plan: pd.DataFrame, series: str, floor: float, charge: str = "node") -> Figure:
    """One series: measured scales filled, projected open; a scale whose efficiency per
    charged unit falls below ``floor`` at the lower end of its interval in red with a cross;
    a dominated scale grey; each labelled nodes x devices."""
    fig = Figure(figsize=(7.5, 4.8), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    part = plan[plan["series"] == series].sort_values(["world_size", "nodes"])
    records = part.to_dict("records")
    below = np.array([lower_end(r) < floor for r in records], dtype=bool)
    beaten = np.array([dominated_by(r) is not None for r in records], dtype=bool)
    styles = (
        ("measured", "ok", "o", "black", "measured, 95% CI"),
        ("projected", "ok", "o", "tab:blue", "projected, 95% PI"),
        ("measured", "below", "X", "tab:red", None),
        ("projected", "below", "X", "tab:red", None),
        ("measured", "dominated", "s", "tab:gray", "measured, dominated by another scale"),
        ("projected", "dominated", "s", "tab:gray", "projected, dominated by another scale"),
    )
    kind = np.where(beaten, "dominated", np.where(below, "below", "ok"))
    for source, k, marker, color, label in styles:
        rows = part[(part["source"] == source).to_numpy() & (kind == k)]
        if rows.empty:
            continue
        if label is None:
            label = f"{source}, lower end below the {floor:.0%} floor"
        style = {
            "fmt": marker,
            "color": color,
            "mfc": color if source == "measured" else "white",
            "label": label,
        }
        _draw(ax, rows, "charged_hours", style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: _short(v)))
        axis.set_minor_formatter(NullFormatter())
    unit = "Node-hours" if charge == "node" else "Device-hours"
    ax.set_xlabel(f"{unit} (charged)")
    ax.set_ylabel("Time to train (h)")
    ax.set_title(f"Time to train vs {unit.lower()}: {series}", fontsize="medium")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    labels = [
        (
            float(r["charged_hours"]),
            float(r["time_h"]),
            shape_label(r["nodes"], r["devices_per_node"]),
        )
        for r in records
        if math.isfinite(float(r["charged_hours"])) and math.isfinite(float(r["time_h"]))
    ]
    _place_labels(ax, fig, labels)
    return fig
