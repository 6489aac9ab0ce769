"""The plan in words: the table per series, the answer paragraph and the scaling study written
to paste into an allocation request (:mod:`analysis.compute.plan` computes them).

Everything here goes into summary.json's ``plan_study`` (:mod:`.report`); report.md and
report.html render that document, and the terminal prints the same paragraph and table.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from analysis.compute.plan import PlanRequest, PlanResult
from analysis.present.display import DisplayTable

WIDTH = 120
"""The scaling study's text is wrapped to this many columns in report.md."""


# --- numbers ----------------------------------------------------------------------------------


def amount(value: Any) -> str:
    """A count of hours or money: whole above 100 (thousands grouped), else three significant
    figures at most, two below 1."""
    v = float(value)
    if not math.isfinite(v):
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return f"{v:.2g}"


def _interval(row: Mapping[str, Any], low: str, high: str) -> str:
    lo, hi = float(row[low]), float(row[high])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no interval"
    return f"[{amount(lo)}, {amount(hi)}]"


def _pct(value: Any) -> str:
    v = float(value)
    return f"{100 * v:.0f}%" if math.isfinite(v) else "—"


def _efficiency(row: Mapping[str, Any]) -> str:
    lo, hi = float(row["efficiency_low"]), float(row["efficiency_high"])
    band = f" [{_pct(lo)}, {_pct(hi)}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    return _pct(row["efficiency"]) + band


def scale(row: Mapping[str, Any]) -> str:
    return f"{int(row['nodes'])}x{int(row['devices_per_node'])}"


def _work(request: PlanRequest) -> str:
    return f"{request.work:.3g} {request.unit}"


# --- the table --------------------------------------------------------------------------------


def table_rows(rows: Sequence[Mapping[str, Any]], request: PlanRequest) -> pd.DataFrame:
    """The plan table of one series as strings: scale, source, efficiency, steady throughput,
    the job's start-up and warm-up, time to train, node-hours (charged or cost with a rate)."""
    out = []
    for r in rows:
        line = {
            "Scale": scale(r),
            "Source": r["source"] + (f" (n={int(r['n'])})" if r["source"] == "measured" else ""),
            "Efficiency [interval]": _efficiency(r),
            "Samples/s": f"{float(r['throughput']):,.4g}",
            "Start-up + warm-up s": f"{float(r['startup_s']) + float(r['warmup_cost_s']):.1f}",
            "Time to train h": f"{amount(r['time_h'])} {_interval(r, 'time_low_h', 'time_high_h')}",
            "Node-hours": f"{amount(r['node_hours'])} "
            f"{_interval(r, 'node_hours_low', 'node_hours_high')}",
        }
        if request.charge_factor:
            line["Charged node-hours"] = amount(r["charged_node_hours"])
        if request.price_per_gpu_hour:
            line["Cost"] = f"{amount(r['cost'])} {_interval(r, 'cost_low', 'cost_high')}"
        out.append(line)
    return pd.DataFrame(out)


def display_table(series: str, frame: pd.DataFrame) -> DisplayTable:
    return DisplayTable(
        name="plan",
        title=f"Plan: {series}",
        frame=frame,
        right={c for c in frame.columns if c not in ("Scale", "Source")},
    )


def markdown_table(frame: pd.DataFrame) -> list[str]:
    cells = [list(frame.columns), *frame.astype(str).values.tolist()]
    return ["| " + " | ".join(c) + " |" for c in cells[:1]] + [
        "|" + "|".join("---" for _ in frame.columns) + "|",
        *("| " + " | ".join(c) + " |" for c in cells[1:]),
    ]


# --- the paragraph ----------------------------------------------------------------------------


def _where(row: Mapping[str, Any]) -> str:
    """``2x2 (4 devices, projected)``."""
    n = int(row["world_size"])
    return f"{scale(row)} ({n} device{'' if n == 1 else 's'}, {row['source']})"


def _fastest(a: Mapping[str, Any], request: PlanRequest) -> str:
    f = a["fastest"]
    floor = _pct(request.floor)
    if f is None:
        return f"No scale keeps {floor} efficiency at the lower end of its interval."
    judged = (
        "at the lower end of its interval"
        if math.isfinite(f["efficiency_low"])
        else ("(no interval: judged on its centre)")
    )
    text = (
        f"The fastest scale whose efficiency stays above the {floor} floor {judged} is "
        f"{_where(f)}: {_efficiency(f)} efficiency, {amount(f['time_h'])} h "
        f"{_interval(f, 'time_low_h', 'time_high_h')} to train, {amount(f['node_hours'])} "
        f"node-hours {_interval(f, 'node_hours_low', 'node_hours_high')}."
    )
    if a["no_projected_clears"]:
        text += f" No projected scale clears the {floor} floor."
    return text


def _cheapest(a: Mapping[str, Any], request: PlanRequest) -> str:
    c = a["cheapest"]
    if c is None:
        return ""
    if request.price_per_gpu_hour:
        what = f"costs {amount(c['cost'])} {_interval(c, 'cost_low', 'cost_high')}"
    else:
        what = (
            f"takes {amount(c['node_hours'])} node-hours "
            f"{_interval(c, 'node_hours_low', 'node_hours_high')}"
        )
    same = " (the same scale)" if a["fastest"] is not None and c is a["fastest"] else ""
    return f"The cheapest is {_where(c)}{same}: it {what} and trains in {amount(c['time_h'])} h."


def _stops(a: Mapping[str, Any], request: PlanRequest) -> str:
    s = a["stops_paying"]
    if s is None:
        return (
            "Every step up to the largest scale planned adds devices that deliver at least "
            f"{_pct(request.floor)} of a baseline device's throughput: the marginal node "
            "still pays."
        )
    lo, hi = float(s["marginal_low"]), float(s["marginal_high"])
    band = f" [{_pct(lo)}, {_pct(hi)}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    how = "below it at the upper end too" if s["settled"] else "though its interval reaches it"
    return (
        f"The marginal node stops paying beyond {scale(s['from'])}: going to {_where(s['to'])} "
        f"adds devices that each deliver {_pct(s['marginal'])}{band} of a baseline device's "
        f"throughput, under the {_pct(request.floor)} floor ({how})."
    )


NEXT_WHY = {
    "projected": "measure {scale} ({nodes} nodes): the answer rests on its projection",
    "check_floor": "measure {scale} ({nodes} nodes) to check that it falls below the floor as "
    "projected",
    "beyond": "measure a scale above {scale} (or project with --project) to see whether the floor "
    "holds beyond it",
    "once": "repeat {scale}: it ran once, so it has no interval",
}


def _next(a: Mapping[str, Any]) -> str:
    items = [
        NEXT_WHY[why].format(scale=scale(r), nodes=int(r["nodes"])) for r, why in a["measure_next"]
    ]
    if not items:
        return "Every answer rests on measured points with intervals."
    return "To firm it up: " + "; ".join(items) + "."


def answer_text(a: Mapping[str, Any], request: PlanRequest, work_samples: float) -> str:
    """The answer in one paragraph: the fastest above the floor, the cheapest, where the
    marginal node stops paying, and what to measure next."""
    samples = "" if request.unit == "samples" else f" ({work_samples:.3g} samples)"
    head = f"Training {_work(request)}{samples}."
    parts = [head, _fastest(a, request), _cheapest(a, request), _stops(a, request), _next(a)]
    return " ".join(p for p in parts if p)


# --- the scaling study ------------------------------------------------------------------------


def _method(runs: pd.DataFrame) -> str:
    """How the numbers were measured: hardware, software, repeats, what the steady state
    excludes."""
    pairs = zip(runs["device_name"], runs["accelerator"], strict=True)
    devices = sorted({f"{d} ({a})" for d, a in pairs})
    nodes = sorted({n for names in runs["node_names"].dropna() for n in str(names).split(",") if n})
    versions: dict[str, str] = {}
    for v in runs["versions"]:
        for package in ("torch", "lightning"):
            if isinstance(v, dict) and v.get(package):
                versions.setdefault(package, str(v[package]))
    repeats = runs.groupby(["nodes", "devices_per_node"]).size()
    rep = (
        f"{repeats.min()}" if repeats.min() == repeats.max() else f"{repeats.min()}-{repeats.max()}"
    )
    soft = ", ".join(f"{k} {v}" for k, v in versions.items()) or "versions not recorded"
    return (
        f"Measured on {', '.join(devices)} over {len(nodes)} node(s) with {soft}, {rep} "
        "repeat(s) per scale; throughput is the steady state, which leaves out the warm-up steps, "
        "start-up and validation (the plan adds start-up and warm-up back once per job). "
        "Projected rows come from a step model fitted to these runs, with 95% prediction "
        "intervals; measured rows carry 95% confidence intervals of the throughput."
    )


def _chosen(a: Mapping[str, Any]) -> str:
    f = a["fastest"]
    if f is None:
        return "No node count is chosen: no scale keeps the floor."
    return (
        f"Node count chosen: {int(f['nodes'])} node(s) of {int(f['devices_per_node'])} devices "
        f"({f['source']}), which implies {amount(f['node_hours'])} node-hours "
        f"{_interval(f, 'node_hours_low', 'node_hours_high')} for this training."
    )


def plan_study(plan: PlanResult, scaling: pd.DataFrame, runs: pd.DataFrame) -> list[dict[str, Any]]:
    """summary.json's ``plan_study``: per series the study's parts (``answer``, the table's
    ``columns`` and string ``rows``, ``chosen``, ``method``, the scaling mode)."""
    study = []
    for a in plan.answers:
        part = plan.table[plan.table["series"] == a["series"]]
        rows = part.sort_values(["world_size", "nodes"]).to_dict("records")
        modes = scaling.loc[scaling["series"] == a["series"], "scaling_mode"]
        frame = table_rows(rows, plan.request)
        study.append(
            {
                "series": a["series"],
                "scaling_mode": str(modes.iloc[0]) if len(modes) else "",
                "answer": answer_text(a, plan.request, float(rows[0]["work_samples"])),
                "columns": list(frame.columns),
                "rows": frame.values.tolist(),
                "chosen": _chosen(a),
                "method": _method(runs),
            }
        )
    return study


def study_markdown(doc: Mapping[str, Any]) -> list[str]:
    """report.md's "Scaling study" section, no line wider than :data:`WIDTH`."""
    if not doc.get("plan_study"):
        return []

    def fill(text: str) -> list[str]:
        return textwrap.wrap(text, WIDTH, break_on_hyphens=False)

    out = ["## Scaling study", ""]
    for s in doc["plan_study"]:
        kind = "Weak" if s["scaling_mode"] == "weak" else "Strong"
        out += [f"### {s['series']}", "", *fill(s["answer"]), ""]
        out += [f"{kind}-scaling table:", ""]
        out += markdown_table(pd.DataFrame(s["rows"], columns=s["columns"]))
        out += ["", *fill(s["chosen"]), "", *fill(s["method"]), ""]
    return out
