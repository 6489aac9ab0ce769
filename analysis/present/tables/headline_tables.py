"""The terminal's default view: per series one narrow table of every scale's throughput,
speedup and efficiency with the waterfall part that lost the most there (and the model state
per device where strategies are compared), and the projection as measured; FSDP against DDP,
as a table and in words."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis.analyze import Analysis
from analysis.compute.metrics import efficiency_column
from analysis.present.display import MISSING, DisplayTable, is_missing, sig, with_ci

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
        "Mean samples/s",
        "Speedup [95% CI]",
        "Efficiency [95% CI]",
        "Most lost (pts)",
    ]
    # Where strategies are compared, what each device holds: the point of sharding.
    state = model_state_by_group(analysis)
    if state:
        columns.insert(-1, "Model state")
    for series, part in s.groupby("series", sort=False):
        eff = efficiency_column(part["scaling_mode"])
        rows = []
        for _, r in part.iterrows():
            scale = (int(r["nodes"]), int(r["devices_per_node"]))
            row = [
                f"{r['nodes']}x{r['devices_per_node']}",
                str(r["n"]),
                sig(r["samples_per_s_mean"], 3),
                "baseline"
                if r["is_baseline"]
                else with_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
                with_ci(r[eff], r[f"{eff}_ci_low"], r[f"{eff}_ci_high"], "%"),
                _most_lost(analysis, str(series), *scale),
            ]
            if state:
                row.insert(-1, _bytes(state.get((str(series), *scale))))
            rows.append(row)
        out.append(
            DisplayTable(
                "headline",
                str(series),
                pd.DataFrame(rows, columns=columns, dtype="object"),
                right={
                    "n",
                    "Mean samples/s",
                    "Speedup [95% CI]",
                    "Efficiency [95% CI]",
                    "Model state",
                },
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


# --- FSDP against DDP ---------------------------------------------------------------------


def _bytes(gib: Any) -> str:
    """Model state as people size it: MiB under a GiB, GiB above."""
    if is_missing(gib):
        return MISSING
    return f"{gib * 1024:.3g} MiB" if gib < 1 else f"{gib:.3g} GiB"


def model_state_by_group(analysis: Analysis) -> dict[tuple[str, int, int], float]:
    """(series, nodes, devices per node) -> mean largest model state per device, for both
    sides of every strategy pair; empty where strategies are not compared."""
    out: dict[tuple[str, int, int], float] = {}
    for _, r in analysis.strategy.iterrows():
        scale = (int(r["nodes"]), int(r["devices_per_node"]))
        out[(str(r["series"]), *scale)] = r["model_state_gib_mean"]
        out[(str(r["ddp_series"]), *scale)] = r["ddp_model_state_gib_mean"]
    return out


def strategy_display(analysis: Analysis) -> DisplayTable | None:
    """FSDP vs DDP at each scale both ran; None when no series pair differs only in it."""
    a = analysis.strategy
    if a.empty:
        return None
    columns = [
        "Configuration",
        "vs",
        "Nodes x devices",
        "Runs",
        "Speed (vs DDP) [95% CI]",
        "Efficiency [95% CI]",
        "DDP efficiency [95% CI]",
        "Model state/device (vs DDP)",
        "Peak memory (vs DDP)",
    ]
    rows = []
    for _, r in a.iterrows():
        state = MISSING
        if not is_missing(r["model_state_ratio"]):
            state = (
                f"{_bytes(r['model_state_gib_mean'])} / {_bytes(r['ddp_model_state_gib_mean'])}"
                f" ({r['model_state_ratio']:.2f}x)"
            )
        mem = MISSING
        if not is_missing(r["peak_mem_ratio"]):
            mem = f"{r['peak_mem_ratio']:.2f}x ({r['peak_mem_gib_mean']:.2f} GiB)"
        rows.append(
            [
                r["series"],
                r["ddp_series"],
                f"{r['nodes']}x{r['devices_per_node']}",
                f"{r['n']} / {r['ddp_n']}",
                with_ci(r["speed_ratio"], r["speed_ratio_ci_low"], r["speed_ratio_ci_high"]),
                with_ci(r["efficiency"], r["efficiency_ci_low"], r["efficiency_ci_high"], "%"),
                with_ci(
                    r["ddp_efficiency"],
                    r["ddp_efficiency_ci_low"],
                    r["ddp_efficiency_ci_high"],
                    "%",
                ),
                state,
                mem,
            ]
        )
    return DisplayTable(
        "strategy",
        "Sharded (FSDP) vs DDP",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=[
            "Groups whose series differ only in trainer.strategy, same scale. Speed: FSDP / "
            "DDP mean headline throughput, delta-method 95% CI. Efficiency: each series' own "
            "headline efficiency against its own baseline (which one scales better). Model "
            "state: parameters, gradients and optimizer state one device holds, counted "
            "from the tensors (exact). Peak memory: the GPU's training peak, where recorded."
        ],
        right={"Runs", "Speed (vs DDP) [95% CI]", "Efficiency [95% CI]"},
    )


def strategy_findings(analysis: Analysis) -> list[dict[str, str]]:
    """Per sharded series, a paragraph at the largest scale both strategies ran: which one
    scales better (and whether the intervals settle it), the throughput ratio, the model
    state per device, and the waterfall's part whose points differ most: the why."""
    out = []
    for series, part in analysis.strategy.groupby("series", sort=False):
        r = part.sort_values(["world_size", "nodes"]).iloc[-1]
        nodes, dpn = int(r["nodes"]), int(r["devices_per_node"])
        eff, base = r["efficiency"], r["ddp_efficiency"]
        shape = f"{nodes}x{dpn}"
        if is_missing(eff) or is_missing(base):
            verdict = f"At {shape} the efficiency of one of the two is not known."
        else:
            better = "FSDP" if eff > base else "DDP"
            bounds = ("efficiency_ci_low", "efficiency_ci_high")
            bounds += tuple(f"ddp_{b}" for b in bounds)
            unknown = any(is_missing(r[b]) for b in bounds)
            apart = not unknown and (
                r["efficiency_ci_low"] > r["ddp_efficiency_ci_high"]
                or r["ddp_efficiency_ci_low"] > r["efficiency_ci_high"]
            )
            verdict = (
                f"At {shape}, FSDP keeps "
                f"{with_ci(eff, r['efficiency_ci_low'], r['efficiency_ci_high'], '%')} "
                f"efficiency against DDP's "
                f"{with_ci(base, r['ddp_efficiency_ci_low'], r['ddp_efficiency_ci_high'], '%')}"
                + (
                    f": {better} is ahead at the centres; a scale ran once, so there is no "
                    "interval to settle which scales better: repeat every scale of both."
                    if unknown
                    else f": {better} scales better on this cluster."
                    if apart
                    else f": {better} is ahead, but the intervals overlap: these repeats do "
                    "not settle which scales better" + _settle(r["repeats_to_settle"])
                )
            )
        speed = with_ci(r["speed_ratio"], r["speed_ratio_ci_low"], r["speed_ratio_ci_high"])
        text = [verdict, f"FSDP's throughput there is {speed} DDP's."]
        if not is_missing(r["model_state_ratio"]):
            text.append(
                f"Each device holds {_bytes(r['model_state_gib_mean'])} of model state "
                f"under FSDP against {_bytes(r['ddp_model_state_gib_mean'])} under DDP "
                f"({r['model_state_ratio']:.2f}x)."
            )
        text.append(_why(analysis, str(series), str(r["ddp_series"]), nodes, dpn))
        out.append({"series": str(series), "text": " ".join(t for t in text if t)})
    return out


def _why(analysis: Analysis, series: str, ddp: str, nodes: int, dpn: int) -> str:
    """The waterfall part whose lost points differ most between the two at that scale."""
    w = analysis.waterfall
    if w is None:
        return "Why is not known: the runs recorded no diagnosis."
    t = w.table
    at = t[(t["nodes"] == nodes) & (t["devices_per_node"] == dpn)]
    mine, theirs = at[at["series"] == series], at[at["series"] == ddp]
    if mine.empty or theirs.empty:
        return "Why is not known: the waterfall has no row for both at that scale."
    a, b = mine.iloc[0], theirs.iloc[0]
    diffs = {
        p: a[f"{p}_pts_mean"] - b[f"{p}_pts_mean"]
        for p in SHORT_PARTS
        if not is_missing(a[f"{p}_pts_mean"]) and not is_missing(b[f"{p}_pts_mean"])
    }
    if not diffs:
        return "Why is not known: the parts were not recorded for both."
    part = max(diffs, key=lambda p: abs(diffs[p]))
    lo, hi = _difference_interval(a, b, part)
    said = (
        f"{SHORT_PARTS[part]} costs FSDP {a[f'{part}_pts_mean']:.1f} points of efficiency "
        f"and DDP {b[f'{part}_pts_mean']:.1f}"
    )
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return (
            f"The parts cannot say why yet: the largest difference, {said}, has no interval "
            "(a scale ran once)."
        )
    if lo <= 0 <= hi:
        return (
            f"The parts' differences are within noise: the largest, {said}, differs by "
            f"{diffs[part]:+.1f} points [{lo:+.1f}, {hi:+.1f}], an interval that includes zero."
        )
    return (
        f"The parts say why: {said}, the largest difference between them "
        f"({diffs[part]:+.1f} points [{lo:+.1f}, {hi:+.1f}])."
    )


def _difference_interval(a: Any, b: Any, part: str) -> tuple[float, float]:
    """The interval of FSDP's points minus DDP's for one part: the difference of the means
    -/+ the two intervals' half-widths added in quadrature (independent groups); NaN where
    either has none."""
    halves = []
    for r in (a, b):
        low, high = r[f"{part}_pts_ci_low"], r[f"{part}_pts_ci_high"]
        if is_missing(low) or is_missing(high):
            return math.nan, math.nan
        halves.append((float(high) - float(low)) / 2)
    diff = float(a[f"{part}_pts_mean"]) - float(b[f"{part}_pts_mean"])
    half = math.hypot(*halves)
    return diff - half, diff + half


def _settle(repeats: Any) -> str:
    """``; about 9 repeats per scale …`` (the sentence's end), or ``.`` where not known."""
    if is_missing(repeats):
        return "."
    return (
        f"; about {int(repeats)} repeats per scale of both, at the spread measured, would "
        "settle it."
    )
