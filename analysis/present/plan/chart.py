"""The plan's chart: time to train against node-hours, one point per scale, with interval
bars, and the scales that fall below the efficiency floor marked apart. Takes the plan frame
(:func:`analysis.compute.plan.plan_table`) and returns a Figure, like :mod:`.charts`."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.compute.plan import lower_end


def _bars(part: pd.DataFrame, mid: str, low: str, high: str) -> np.ndarray:
    m = part[mid].to_numpy(float)
    lo = np.nan_to_num(m - part[low].to_numpy(float), nan=0.0).clip(min=0)
    hi = np.nan_to_num(part[high].to_numpy(float) - m, nan=0.0).clip(min=0)
    return np.vstack([lo, hi])


def plan_chart(plan: pd.DataFrame, series: str, floor: float) -> Figure:
    """One series: measured scales filled, projected open; a scale whose efficiency falls
    below ``floor`` at the lower end of its interval in red with a cross; each labelled
    nodes x devices."""
    fig = Figure(figsize=(7.5, 4.8), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    part = plan[plan["series"] == series].sort_values(["world_size", "nodes"])
    below = np.array([lower_end(r) < floor for r in part.to_dict("records")], dtype=bool)
    styles = (
        ("measured", False, "o", "black", "measured, 95% CI"),
        ("projected", False, "o", "tab:blue", "projected, 95% PI"),
        ("measured", True, "X", "tab:red", None),
        ("projected", True, "X", "tab:red", None),
    )
    for source, is_below, marker, color, label in styles:
        rows = part[(part["source"] == source).to_numpy() & (below == is_below)]
        if rows.empty:
            continue
        if label is None:
            label = f"{source}, below the {floor:.0%} efficiency floor"
        ax.errorbar(
            rows["node_hours"],
            rows["time_h"],
            xerr=_bars(rows, "node_hours", "node_hours_low", "node_hours_high"),
            yerr=_bars(rows, "time_h", "time_low_h", "time_high_h"),
            fmt=marker,
            color=color,
            mfc=color if source == "measured" else "white",
            capsize=3,
            label=label,
        )
    for r in part.to_dict("records"):
        ax.annotate(
            f"{int(r['nodes'])}x{int(r['devices_per_node'])}",
            (r["node_hours"], r["time_h"]),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize="small",
        )
    ax.set_xlabel("Node-hours")
    ax.set_ylabel("Time to train (h)")
    ax.set_title(f"Time to train vs node-hours: {series}", fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    return fig
