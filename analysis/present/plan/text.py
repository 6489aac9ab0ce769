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

from analysis.compute.groups import series_scale_groups
from analysis.compute.plan import PlanRequest, PlanResult, dominated_by
from analysis.compute.plan.table import charged_units
from analysis.present.display import DisplayTable
from analysis.read.overlap import shape_label

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


def _banded(row: Mapping[str, Any], column: str, low: str, high: str) -> str:
    """``24.7 [20.6, 62.8]``: ``column`` and its interval (``low``, ``high``); only "—"
    where the row has no such figure (a scale that cannot be projected), never "— no
    interval"."""
    if not math.isfinite(float(row[column])):
        return "—"
    return f"{amount(row[column])} {_interval(row, low, high)}"


def _interval(row: Mapping[str, Any], low: str, high: str) -> str:
    lo, hi = float(row[low]), float(row[high])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "no interval"
    return f"[{amount(lo)}, {amount(hi)}]"


def _pct(value: Any) -> str:
    v = float(value)
    return f"{100 * v:.0f}%" if math.isfinite(v) else "—"


def _efficiency(row: Mapping[str, Any], column: str = "efficiency") -> str:
    """``91% [77, 100]`` (the interval's ends in percent too)."""
    lo, hi = float(row[f"{column}_low"]), float(row[f"{column}_high"])
    band = (
        f" [{_pct(lo).rstrip('%')}, {_pct(hi).rstrip('%')}]"
        if math.isfinite(lo) and math.isfinite(hi)
        else ""
    )
    return _pct(row[column]) + band


def scale(row: Mapping[str, Any]) -> str:
    return shape_label(row["nodes"], row["devices_per_node"])


def _work(request: PlanRequest) -> str:
    return f"{request.work:.3g} {request.unit}"


# --- the table --------------------------------------------------------------------------------


def unit_word(request: PlanRequest) -> str:
    """What one charged unit is called: ``node`` or ``device``."""
    return request.charge


def _charged_label(request: PlanRequest) -> str:
    hours = "Node-hours" if request.charge == "node" else "Device-hours"
    return f"Charged {hours.lower()}" if request.charge_factor else hours


def _memory(r: Mapping[str, Any]) -> str:
    state = float(r["model_state_gib"])
    if not math.isfinite(state):
        return "—"
    text = f"{state:.3g} GiB"
    if r["source"] == "projected":
        text += " (fitted)" if str(r["model_state_basis"]).startswith("sharded") else ""
    if r.get("fits") is False:
        text += f" > {float(r['device_memory_gib']):.3g} GiB: does not fit"
    return text


def _note(r: Mapping[str, Any], chosen: Mapping[str, Any] | None) -> str:
    if not math.isfinite(float(r["efficiency"])):
        return "cannot be projected"  # why: the projection's paragraph (a micro-batch < 1)
    by = dominated_by(r)
    if by is not None:
        return f"beaten by {by}"
    return "chosen" if chosen is not None and scale(r) == scale(chosen) else ""


def table_rows(
    rows: Sequence[Mapping[str, Any]],
    request: PlanRequest,
    chosen: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """The plan table of one series as strings: scale, source (a measured scale's runs, or
    projected), efficiency per device (and per node under node charging), steady throughput
    (mean over runs), time to train (the job's start-up and warm-up in it: :func:`_method`), the
    charged hours (node-hours or device-hours, times the charge factor), cost with a price,
    the model state per device where recorded, and a note (chosen, beaten by …)."""
    out = []
    memory = any(math.isfinite(float(r["model_state_gib"])) for r in rows)
    for r in rows:
        line = {
            "Scale": scale(r),
            # a measured row by its runs (n=3), so the table fits report.md's 120 columns
            "Source": f"n={int(r['n'])}" if r["source"] == "measured" else r["source"],
            "Eff./device": _efficiency(r),
        }
        if request.charge == "node":
            line["Eff./node"] = _efficiency(r, "charged_efficiency")
        line |= {
            "Mean samples/s": amount(r["throughput"]),
            "Time to train (h)": _banded(r, "time_h", "time_low_h", "time_high_h"),
            _charged_label(request): _banded(
                r, "charged_hours", "charged_hours_low", "charged_hours_high"
            ),
        }
        if request.price_per_gpu_hour:
            line["Cost"] = _banded(r, "cost", "cost_low", "cost_high")
        if memory:
            line["Model state per device"] = _memory(r)
        line["Note"] = _note(r, chosen)
        out.append(line)
    return pd.DataFrame(out)


def display_table(series: str, frame: pd.DataFrame) -> DisplayTable:
    return DisplayTable(
        name="plan",
        title=f"Plan: {series}",
        frame=frame,
        right={c for c in frame.columns if c not in ("Scale", "Source", "Note")},
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


def _charged_hours(row: Mapping[str, Any], request: PlanRequest) -> str:
    """``15,960 node-hours [13,818, 20,800]`` (charged, device-hours as the request says)."""
    what = f"{request.charge}-hours"
    if request.charge_factor:
        what = f"charged {what}"
    band = _interval(row, "charged_hours_low", "charged_hours_high")
    return f"{amount(row['charged_hours'])} {what}" + ("" if band == "no interval" else f" {band}")


def _judged(row: Mapping[str, Any], request: PlanRequest) -> str:
    """The row's efficiency as the floor judges it: per node (and per device) or per device."""
    per = f"{_efficiency(row, 'charged_efficiency')} per {unit_word(request)}"
    if request.charge == "node":
        per += f" ({_efficiency(row)} per device)"
    return per


def _has_interval(row: Mapping[str, Any]) -> bool:
    return math.isfinite(float(row["charged_efficiency_low"]))


def _settle(a: Mapping[str, Any], what: str) -> str:
    """How the open choice would be settled: measure a projected scale, or repeat."""
    row, m = a["open"], a["open_repeats"]
    if row["source"] == "projected":
        return f"measuring {scale(row)} would settle {what}"
    if m is None:
        return (
            f"{scale(row)} and its baseline have no spread to size repeats from: repeat them "
            f"to settle {what}"
            if int(row["n"]) < 2
            else f"no number of repeats at the spread measured settles {what}"
        )
    return (
        f"about {m} repeats of {scale(row)} and of the baseline, at the spread measured, "
        f"would settle {what}"
    )


def _reference(a: Mapping[str, Any], unit: str, step: Mapping[str, Any] | None = None) -> str:
    """What one charged unit delivers, as the plan judges against it: the best measured (in
    the reference scale where a ``step`` names it), or, where the reference ran on fewer
    devices than a node holds, a node of them at the rate per device measured there."""
    ref, k = a["reference"], int(a["reference_devices"])
    if k > int(ref["world_size"]):
        return (
            f"what a {unit} of {k} devices delivers at the rate per device measured in {scale(ref)}"
        )
    if step is not None:
        return f"what one {unit} delivers in {scale(step['reference'])}"
    return f"what one {unit} delivers at its best measured"


def _fastest(a: Mapping[str, Any], request: PlanRequest) -> str:
    f = a["fastest"]
    floor, unit = _pct(request.floor), unit_word(request)
    if f is None:
        return (
            f"No undominated scale keeps {floor} efficiency per {unit} against the baseline, "
            "even at the centre of its interval."
        )
    head = f"{_where(f)}: {_judged(f, request)}, {amount(f['time_h'])} h " + (
        f"{_interval(f, 'time_low_h', 'time_high_h')} to train, {_charged_hours(f, request)}."
    )
    if a["open"] is not None and a["open"] is f:
        text = (
            f"No undominated scale keeps the {floor} floor per {unit} at the lower end of its "
            f"interval. The fastest that keeps it at its centre is {head} The choice is open: "
            + _settle(a, "whether it keeps the floor")
            + "."
        )
    else:
        if _has_interval(f):
            judged = "at the lower end of its interval"
        elif f["source"] == "measured" and int(f["n"]) >= 2:
            judged = f"(the reference: {_reference(a, unit)})"
        else:
            judged = "(no interval: judged on its centre)"
        text = f"The fastest scale that keeps the {floor} floor per {unit} {judged} is {head}"
        if a["open"] is not None:
            o = a["open"]
            text += (
                f" {_where(o)} is faster and keeps the floor at its centre "
                f"({_pct(o['charged_efficiency'])}) but not at the lower end of its interval "
                f"({_pct(o['charged_efficiency_low'])}): the choice between {scale(f)} and "
                f"{scale(o)} is open; " + _settle(a, "it") + "."
            )
    if a["no_projected_clears"]:
        text += f" No projected scale keeps the {floor} floor at the lower end of its interval."
    return text


def _dominated(a: Mapping[str, Any]) -> str:
    rows = a["dominated"]
    if not rows:
        return ""
    items = [f"{scale(r)} by {dominated_by(r)}" for r in rows]
    return (
        f"Dominated, so never the answer (another scale trains faster for no more charged "
        f"cost, at the centres): {'; '.join(items)}."
    )


def _cheapest(a: Mapping[str, Any], request: PlanRequest) -> str:
    c = a["cheapest"]
    if c is None:
        return ""
    if request.price_per_gpu_hour:
        what = f"costs {amount(c['cost'])} {_interval(c, 'cost_low', 'cost_high')}"
    else:
        what = f"takes {_charged_hours(c, request)}"
    same = "the chosen scale too, " if a["fastest"] is not None and c is a["fastest"] else ""
    text = f"The cheapest is {same}{_where(c)}: it {what} and trains in {amount(c['time_h'])} h."
    rival = a["cheapest_rival"]
    if rival is not None:
        if a["cheapest_repeats"] is not None:
            how = (
                f"about {a['cheapest_repeats']} repeats of each, at the spread measured, would "
                "settle which is cheaper"
            )
        elif rival["source"] == "projected" or c["source"] == "projected":
            proj = rival if rival["source"] == "projected" else c
            how = f"measuring {scale(proj)} would settle which is cheaper"
        else:
            how = "repeating both would settle which is cheaper"
        text += f" Its interval overlaps {scale(rival)}'s: {how}."
    return text


def _beaten_larger(a: Mapping[str, Any], request: PlanRequest) -> str:
    """The dominated scales charged more units than the reference, named ("2x1 and 4x1")."""
    least = charged_units(a["reference"], request.charge)
    names = [scale(r) for r in a["dominated"] if charged_units(r, request.charge) > least]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _stops(a: Mapping[str, Any], request: PlanRequest) -> str:
    s, unit, floor = a["stops_paying"], unit_word(request), _pct(request.floor)
    if s is None and not a["adds_units"]:
        beaten = _beaten_larger(a, request)
        if beaten:
            return (
                f"Every scale planned that adds a {unit} ({beaten}) is beaten on both time and "
                f"cost by a smaller one: there is no marginal {unit} to judge."
            )
        return f"No scale planned adds a {unit} to another: there is no marginal {unit} to judge."
    if s is None:
        return (
            f"Every step up to the largest scale planned adds {unit}s that each deliver at "
            f"least {floor} of {_reference(a, unit)}: the marginal {unit} still pays."
        )
    lo, hi = float(s["marginal_low"]), float(s["marginal_high"])
    has = math.isfinite(lo) and math.isfinite(hi)
    band = f" [{_pct(lo)}, {_pct(hi)}]" if has else ""
    if not has:
        how = "no interval: judged on its centre"
    else:
        how = "below it at the upper end too" if s["settled"] else "though its interval reaches it"
    n = int(s["added"])
    added = f"{n} {unit}{'' if n == 1 else 's'}"
    if request.charge == "node":
        d = int(s["added_devices"])
        added += f" ({d} device{'' if d == 1 else 's'})"
    elif int(s["added_nodes"]) > 0:
        k = int(s["added_nodes"])
        added += f" (on {k} more node{'' if k == 1 else 's'})"
    each = "that delivers" if n == 1 else "that each deliver"
    return (
        f"The marginal {unit} stops paying beyond {scale(s['from'])}: going to {_where(s['to'])} "
        f"adds {added} {each} {_pct(s['marginal'])}{band} of {_reference(a, unit, s)}, "
        f"under the {floor} floor ({how})."
    )


NEXT_WHY = {
    "projected": "measure {scale} ({nodes} {node_word}): the answer rests on its projection",
    "check_floor": "measure {scale} ({nodes} {node_word}) to check that it falls below the floor "
    "as projected",
    "beyond": "measure a scale above {scale} (or project with --project) to see whether the floor "
    "holds beyond it",
    "once": "repeat {scale}: it ran once, so it has no interval",
}


def _next(a: Mapping[str, Any]) -> str:
    items = [
        NEXT_WHY[why].format(
            scale=scale(r),
            nodes=int(r["nodes"]),
            node_word="node" if int(r["nodes"]) == 1 else "nodes",
        )
        for r, why in a["measure_next"]
    ]
    if not items:
        return "Every answer rests on measured points with intervals."
    return "To firm it up: " + "; ".join(items) + "."


def work_text(request: PlanRequest, work_samples: float, baseline_batch: float) -> str:
    """``Training 2e+11 tokens (6.25e+09 samples) at every scale.``"""
    if request.unit == "samples":
        return f"Training {_work(request)} at every scale."
    extra = (
        f" at the baseline's global batch of {baseline_batch:.0f}"
        if request.unit == "steps"
        else ""
    )
    return f"Training {_work(request)} ({work_samples:.3g} samples{extra}) at every scale."


def answer_text(a: Mapping[str, Any], request: PlanRequest, head: str) -> str:
    """The answer in one paragraph: the scale chosen (and whether the intervals settle it),
    the dominated scales, the cheapest, where the marginal unit stops paying, and what to
    measure next."""
    parts = [
        head,
        _fastest(a, request),
        _dominated(a),
        _cheapest(a, request),
        _stops(a, request),
        _next(a),
    ]
    return " ".join(p for p in parts if p)


# --- the scaling study ------------------------------------------------------------------------


def _method(runs: pd.DataFrame, rows: Sequence[Mapping[str, Any]]) -> str:
    """How one series' numbers were measured: hardware, software, its repeats per scale
    (each measured scale's own n), what the steady state excludes."""
    pairs = zip(runs["device_name"], runs["accelerator"], strict=True)
    devices = sorted({f"{d} ({a})" for d, a in pairs})
    nodes = sorted({n for names in runs["node_names"].dropna() for n in str(names).split(",") if n})
    versions: dict[str, str] = {}
    for v in runs["versions"]:
        for package in ("torch", "lightning"):
            if isinstance(v, dict) and v.get(package):
                versions.setdefault(package, str(v[package]))
    counts = [int(r["n"]) for r in rows if r["source"] == "measured"]
    lo, hi = min(counts), max(counts)
    rep = f"{lo}" if lo == hi else f"{lo}-{hi}"
    repeats = f"{rep} repeat{'' if hi == 1 else 's'} per scale"
    soft = ", ".join(f"{k} {v}" for k, v in versions.items()) or "versions not recorded"
    where = f"{len(nodes)} node{'' if len(nodes) == 1 else 's'}"
    fixed = [float(r["startup_s"]) + float(r["warmup_cost_s"]) for r in rows]
    span = f"{min(fixed):.1f}" if min(fixed) == max(fixed) else f"{min(fixed):.1f}-{max(fixed):.1f}"
    return (
        f"Measured on {', '.join(devices)} over {where} with {soft}, {repeats}; throughput "
        "is the steady state's mean over the runs, which leaves out the warm-up steps, "
        "start-up and validation (the time to train adds each scale's measured start-up and "
        f"warm-up back once per job: {span} s; a projected scale the largest measured one's). "
        "Projected rows come from a step model fitted to these runs, with 95% prediction "
        "intervals; measured rows carry 95% confidence intervals of the throughput."
    )


def _chosen(a: Mapping[str, Any], request: PlanRequest) -> str:
    f = a["fastest"]
    if f is None:
        return "No node count is chosen: no undominated scale keeps the floor."
    n, d = int(f["nodes"]), int(f["devices_per_node"])
    text = (
        f"Node count chosen: {n} node{'' if n == 1 else 's'} of {d} device"
        f"{'' if d == 1 else 's'} ({f['source']}), which implies {_charged_hours(f, request)} "
        "for this training"
    )
    if a["settled"]:
        return text + "."
    return text + ", provisionally: the intervals leave the choice open (see above)."


def series_runs(runs: pd.DataFrame, confidence: float = 0.95) -> dict[str, pd.DataFrame]:
    """Series label -> its runs."""
    return {
        label: pd.concat([g.rows for g in members])
        for _, label, members in series_scale_groups(runs, confidence)
    }


def plan_study(plan: PlanResult, scaling: pd.DataFrame, runs: pd.DataFrame) -> list[dict[str, Any]]:
    """summary.json's ``plan_study``: per series the study's parts (``answer``, the table's
    ``columns`` and string ``rows``, ``chosen``, ``method``, the scaling mode)."""
    study = []
    by_series = series_runs(runs)
    for a in plan.answers:
        part = plan.table[plan.table["series"] == a["series"]]
        rows = part.sort_values(["world_size", "nodes"]).to_dict("records")
        modes = scaling.loc[scaling["series"] == a["series"], "scaling_mode"]
        frame = table_rows(rows, plan.request, a["fastest"])
        base = rows[0]
        batch = (
            float(base["work_samples"]) / plan.request.work if plan.request.unit == "steps" else 0.0
        )
        head = work_text(plan.request, float(base["work_samples"]), batch)
        study.append(
            {
                "series": a["series"],
                "scaling_mode": str(modes.iloc[0]) if len(modes) else "",
                "answer": answer_text(a, plan.request, head),
                "columns": list(frame.columns),
                "rows": frame.values.tolist(),
                "chosen": _chosen(a, plan.request),
                "settled": bool(a["settled"]),
                "repeats_to_settle": a["open_repeats"],
                "method": _method(by_series.get(a["series"], runs), rows),
            }
        )
    return study


def table_heading(scaling_mode: str) -> str:
    """The line above the study's table: ``Strong-scaling table:``."""
    return f"{'Weak' if scaling_mode == 'weak' else 'Strong'}-scaling table:"


def study_markdown(doc: Mapping[str, Any]) -> list[str]:
    """report.md's "Scaling study" section, no line wider than :data:`WIDTH`."""
    if not doc.get("plan_study"):
        return []

    def fill(text: str) -> list[str]:
        return textwrap.wrap(text, WIDTH, break_on_hyphens=False)

    out = ["## Scaling study", ""]
    for s in doc["plan_study"]:
        out += [f"### {s['series']}", "", *fill(s["answer"]), ""]
        out += [table_heading(s["scaling_mode"]), ""]
        out += markdown_table(pd.DataFrame(s["rows"], columns=s["columns"]))
        out += ["", *fill(s["chosen"]), "", *fill(s["method"]), ""]
    return out
