"""The terminal's default view: per series one narrow table of every scale's throughput,
speedup and efficiency with the waterfall part that lost the most there, and the projection
as measured."""

from __future__ import annotations

import pandas as pd

from analysis.analyze import Analysis
from analysis.compute.metrics import efficiency_column
from analysis.present.display import DisplayTable, is_missing, sig, with_ci

SHORT_PARTS = {
    "comm": "exposed comm",
    "overlap": "comm overlap",
    "input": "input wait",
    "skew": "rank skew",
    "jitter": "stragglers",
    "compute": "compute",
}
"""Names of the waterfall's parts in the headline table's last column."""


def _most_lost(analysis: Analysis, series: str, nodes: int, dpn: int) -> str:
    from analysis.compute.waterfall import NOT_RECORDED

    w = analysis.waterfall
    if w is None:
        return ""
    t = w.table
    rows = t[(t["series"] == series) & (t["nodes"] == nodes) & (t["devices_per_node"] == dpn)]
    if rows.empty or bool(rows.iloc[0]["is_baseline"]):
        return ""
    r = rows.iloc[0]
    parts = {p: r[f"{p}_pts_mean"] for p in SHORT_PARTS if not is_missing(r[f"{p}_pts_mean"])}
    if not parts:
        return NOT_RECORDED if r["status"] != "recorded" else ""
    part = max(parts, key=lambda p: parts[p])
    return f"{SHORT_PARTS[part]} {parts[part]:.0f}" if parts[part] >= 0.5 else "none"


def headline_tables(analysis: Analysis) -> list[DisplayTable]:
    """The terminal's default: per series one narrow table (it fits 80 columns) of every
    scale's throughput, speedup and efficiency with their intervals, and the waterfall part
    that lost the most points there; the projection (as measured) where one was asked for."""
    s = analysis.scaling
    out: list[DisplayTable] = []
    columns = [
        "Shape",
        "n",
        "Samples/s",
        "Speedup [95% CI]",
        "Efficiency [95% CI]",
        "Most lost (pts)",
    ]
    for series, part in s.groupby("series", sort=False):
        eff = efficiency_column(part["scaling_mode"])
        rows = []
        for _, r in part.iterrows():
            rows.append(
                [
                    f"{r['nodes']}x{r['devices_per_node']}",
                    str(r["n"]),
                    sig(r["samples_per_s_mean"], 3),
                    "baseline"
                    if r["is_baseline"]
                    else with_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
                    with_ci(r[eff], r[f"{eff}_ci_low"], r[f"{eff}_ci_high"], "%"),
                    _most_lost(analysis, str(series), int(r["nodes"]), int(r["devices_per_node"])),
                ]
            )
        out.append(
            DisplayTable(
                "headline",
                str(series),
                pd.DataFrame(rows, columns=columns, dtype="object"),
                right={"n", "Samples/s", "Speedup [95% CI]", "Efficiency [95% CI]"},
            )
        )
    result = analysis.projection
    if result is not None and not result.table.empty:
        plain = result.table[result.table["what_if"] == "as measured"]
        for series, part in plain.groupby("series", sort=False):
            rows = [
                [
                    f"{r['nodes']}x{r['devices_per_node']}",
                    with_ci(r["efficiency"], r["efficiency_low"], r["efficiency_high"], "%"),
                    with_ci(r["speedup"], r["speedup_low"], r["speedup_high"]),
                ]
                for _, r in part.iterrows()
            ]
            out.append(
                DisplayTable(
                    "projection",
                    f"Projected: {series}",
                    pd.DataFrame(
                        rows,
                        columns=["Shape", "Efficiency [95% PI]", "Speedup [95% PI]"],
                        dtype="object",
                    ),
                    right={"Efficiency [95% PI]", "Speedup [95% PI]"},
                )
            )
    return out
