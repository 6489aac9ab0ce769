"""The plan's rule: which scale to ask for, from the table (:mod:`.table`).

Per series:

* **dominated**: a scale another scale beats on time to train and on charged cost (at their
  centres, at least as good on both and better on one) is never recommended, whatever the
  intervals; ``dominated_by`` names the cheapest scale that beats it.
* **chosen** (``fastest``): the fastest undominated scale whose efficiency per charged unit
  (:func:`lower_end`) keeps the floor at the lower end of its interval. Where a faster
  undominated scale keeps the floor at its centre but not at its lower end, the choice is
  *open* between the two; with no undominated scale keeping the floor at its lower end, the
  fastest that keeps it at its centre is chosen, and the choice is open too.
* **cheapest**: least charged cost (the cost with a price, else the charged hours); *open*
  where the next cheapest scale's interval overlaps it.
* **stops paying**: over the undominated scales (a dominated one is no step anyone takes),
  the first step up that adds charged units (nodes, or devices) whose
  added throughput per added unit is below the floor's share of what one charged unit
  delivers at best (:func:`analysis.compute.plan.table.reference_rate`).
* **repeats**: where a measured interval leaves a choice open, the repeats per scale that
  would settle it at the spread measured (:func:`analysis.compute.stats.repeats_to_settle`);
  a projected scale is settled by measuring it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.compute.plan.table import (
    PlanError,
    PlanRequest,
    charged_reference,
    charged_units,
    plan_table,
    reference_devices,
    reference_rate,
)
from analysis.compute.stats import repeats_to_settle
from analysis.read.overlap import shape_label


def scale_name(row: Mapping[str, Any]) -> str:
    return shape_label(row["nodes"], row["devices_per_node"])


def lower_end(row: Mapping[str, Any]) -> float:
    """The efficiency per charged unit a row is judged on: the lower end of its interval,
    the centre without one."""
    low = float(row["charged_efficiency_low"])
    return low if math.isfinite(low) else float(row["charged_efficiency"])


def dominated_by(row: Mapping[str, Any]) -> str | None:
    """The scale that dominates the row, None where none does (a frame keeps that as NaN)."""
    by = row.get("dominated_by")
    return by if isinstance(by, str) and by else None


def charged_cost(row: Mapping[str, Any], request: PlanRequest, end: str = "") -> float:
    """What the row costs the user: the cost with a price, else the charged hours."""
    return float(row[f"cost{end}" if request.price_per_gpu_hour else f"charged_hours{end}"])


def mark_dominated(rows: Sequence[Mapping[str, Any]], request: PlanRequest) -> list[dict[str, Any]]:
    """One series' rows with ``dominated_by``: the cheapest scale that trains at least as
    fast for at most the charged cost, better on one of the two (None where none does)."""
    out = []
    for r in rows:
        t, c = float(r["time_h"]), charged_cost(r, request)
        better = [
            o
            for o in rows
            if o is not r
            and float(o["time_h"]) <= t
            and charged_cost(o, request) <= c
            and (float(o["time_h"]) < t or charged_cost(o, request) < c)
        ]
        by = min(better, key=lambda o: (charged_cost(o, request), float(o["time_h"])), default=None)
        out.append({**r, "dominated_by": scale_name(by) if by is not None else None})
    return out


def marginal(rows: Sequence[Mapping[str, Any]], charge: str) -> list[dict[str, Any]]:
    """Each step up that adds charged units (``charge``: nodes or devices): the throughput
    its added units deliver, per unit, as a share of the reference unit's
    (:func:`charged_reference`), with its interval
    (the two throughputs' opposite ends). A scale that adds devices on the nodes already
    charged adds nothing to pay for: the next step is measured from it. The steps go over the
    scales no other dominates (a dominated one is no step anyone takes); the reference is of
    every measured scale."""
    if not rows:
        return []
    base = charged_reference(rows, charge)
    per_unit = reference_rate(rows, charge)
    front = [r for r in rows if dominated_by(r) is None]
    if not per_unit > 0 or not front:
        return []
    steps = []
    prev = front[0]
    for b in front[1:]:
        added = charged_units(b, charge) - charged_units(prev, charge)
        if added <= 0:
            prev = b if float(b["throughput"]) >= float(prev["throughput"]) else prev
            continue

        def share(hi: str, lo: str, a: Any = prev, b: Any = b, added: int = added) -> float:
            return (float(b[hi]) - float(a[lo])) / added / per_unit

        steps.append(
            {
                "from": prev,
                "to": b,
                "reference": base,
                "added": added,
                "added_nodes": int(b["nodes"]) - int(prev["nodes"]),
                "added_devices": int(b["world_size"]) - int(prev["world_size"]),
                "marginal": share("throughput", "throughput"),
                "marginal_low": share("throughput_low", "throughput_high"),
                "marginal_high": share("throughput_high", "throughput_low"),
            }
        )
        prev = b
    return steps


def _pooled_cv(rows: Sequence[Mapping[str, Any]]) -> float:
    """The series' run-to-run spread where a scale has none of its own (run once): the root
    mean square of the measured scales' throughput CVs; NaN where no scale ran twice."""
    cvs = [float(r["throughput_cv"]) for r in rows if math.isfinite(float(r["throughput_cv"]))]
    return math.sqrt(sum(c * c for c in cvs) / len(cvs)) if cvs else math.nan


def _cv(row: Mapping[str, Any], pooled: float) -> float:
    cv = float(row["throughput_cv"])
    return cv if math.isfinite(cv) else pooled


def _floor_repeats(
    row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], floor: float, charge: str
) -> int | None:
    """Repeats per scale (the row's and the reference's) that would put the lower end of the
    row's interval above the floor, its centre staying where it is."""
    base, pooled = charged_reference(rows, charge), _pooled_cv(rows)
    centre = float(row["charged_efficiency"])
    if row["source"] != "measured" or row is base or not centre > floor:
        return None
    return repeats_to_settle([_cv(row, pooled), _cv(base, pooled)], math.log(centre / floor))


def _cheapest_rival(
    rows: Sequence[Mapping[str, Any]], cheapest: Mapping[str, Any], request: PlanRequest
) -> Mapping[str, Any] | None:
    """The next cheapest scale whose cost interval reaches the cheapest's (None where the
    cheapest is apart from every other)."""
    lo_c, hi_c = charged_cost(cheapest, request, "_low"), charged_cost(cheapest, request, "_high")
    others = sorted(
        (r for r in rows if r is not cheapest and dominated_by(r) is None),
        key=lambda r: charged_cost(r, request),
    )
    for r in others:
        lo, hi = charged_cost(r, request, "_low"), charged_cost(r, request, "_high")
        if not all(math.isfinite(v) for v in (lo, hi, lo_c, hi_c)):
            return r if r["source"] == "measured" and int(r["n"]) < 2 else None
        if lo <= hi_c and lo_c <= hi:
            return r
    return None


def _chosen(
    rows: Sequence[Mapping[str, Any]], request: PlanRequest
) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """(chosen, contender): the fastest undominated row keeping the floor at its lower end
    (else at its centre), and a faster undominated row keeping it at its centre only."""
    front = [r for r in rows if dominated_by(r) is None]
    settled = [r for r in front if lower_end(r) >= request.floor]
    centre = [r for r in front if float(r["charged_efficiency"]) >= request.floor]

    def fastest(part: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        finite = [r for r in part if math.isfinite(float(r["time_h"]))]
        return min(finite, key=lambda r: (float(r["time_h"]), r["world_size"]), default=None)

    sure, likely = fastest(settled), fastest(centre)
    if sure is None:
        return likely, None
    if likely is not None and float(likely["time_h"]) < float(sure["time_h"]):
        return sure, likely
    return sure, None


def _series_answer(rows: list[dict[str, Any]], request: PlanRequest) -> dict[str, Any]:
    chosen, contender = _chosen(rows, request)
    unsure = chosen is not None and lower_end(chosen) < request.floor
    cheapest = min(
        (r for r in rows if math.isfinite(charged_cost(r, request))),
        key=lambda r: (charged_cost(r, request), float(r["time_h"])),
        default=None,
    )
    rival = _cheapest_rival(rows, cheapest, request) if cheapest is not None else None
    pooled = _pooled_cv(rows)
    rival_repeats = None
    if rival is not None and cheapest is not None and rival["source"] == cheapest["source"]:
        ratio = charged_cost(rival, request) / charged_cost(cheapest, request)
        if cheapest["source"] == "measured" and ratio > 1:
            rival_repeats = repeats_to_settle(
                [_cv(cheapest, pooled), _cv(rival, pooled)], math.log(ratio)
            )
    open_row = contender if contender is not None else (chosen if unsure else None)
    steps = marginal(rows, request.charge)
    stop = next((s for s in steps if s["marginal"] < request.floor), None)
    if stop is not None:
        high = float(stop["marginal_high"])
        stop = {**stop, "settled": math.isfinite(high) and high < request.floor}
    projected = [r for r in rows if r["source"] == "projected"]
    return {
        "series": rows[0]["series"],
        "charge": request.charge,
        "reference": charged_reference(rows, request.charge),
        "reference_devices": reference_devices(rows, request.charge),
        "fastest": chosen,
        "settled": chosen is not None and not unsure and contender is None,
        "open": open_row,
        "open_repeats": (
            _floor_repeats(open_row, rows, request.floor, request.charge) if open_row else None
        ),
        "cheapest": cheapest,
        "cheapest_rival": rival,
        "cheapest_repeats": rival_repeats,
        "dominated": [r for r in rows if dominated_by(r) is not None],
        "stops_paying": stop,
        "adds_units": bool(steps),
        "has_projection": bool(projected),
        "no_projected_clears": bool(projected)
        and not any(lower_end(r) >= request.floor for r in projected),
        "measure_next": _measure_next(rows, chosen, cheapest, open_row, projected),
    }


def answers(table: pd.DataFrame, request: PlanRequest) -> list[dict[str, Any]]:
    """Per series: ``reference`` (the scale one charged unit is judged against, counted as
    ``reference_devices`` devices: a node's where it ran on fewer), ``fastest`` (the scale
    chosen), ``settled`` (False where the intervals
    leave it open; ``open`` the scale that would settle it, ``open_repeats`` how many
    repeats), ``cheapest`` (with ``cheapest_rival`` and ``cheapest_repeats`` where its
    interval overlaps the next one's), ``dominated`` (rows), ``stops_paying``,
    ``no_projected_clears`` and ``measure_next``: the scales to run or repeat, each with why
    (``projected``, ``beyond``, ``check_floor``, ``once``)."""
    out = []
    for _, part in table.groupby("series", sort=False):
        rows = part.sort_values(["world_size", "nodes"]).to_dict("records")
        out.append(_series_answer(rows, request))
    return out


def _measure_next(
    rows: Sequence[Mapping[str, Any]],
    fastest: Mapping[str, Any] | None,
    cheapest: Mapping[str, Any] | None,
    open_row: Mapping[str, Any] | None,
    projected: Sequence[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], str]]:
    """(row, why) of the scales whose measurement would firm the answers up, most useful
    first: a projected answer or open choice (``projected``); the first undominated projected
    scale when none clears the floor (``check_floor``); the next scale up when the fastest is the
    largest measured and nothing was projected (``beyond``); a measured answer run once
    (``once``)."""
    out: list[tuple[Mapping[str, Any], str]] = []
    measured = [r for r in rows if r["source"] == "measured"]
    for answer in (fastest, open_row, cheapest):
        if answer is not None and answer["source"] == "projected":
            out.append((answer, "projected"))
    if fastest is not None and fastest["source"] == "measured":
        first = next((r for r in projected if dominated_by(r) is None), None)
        if first is not None and not out:
            out.append((first, "check_floor"))
        elif not projected and fastest is measured[-1]:
            out.append((fastest, "beyond"))
    for answer in (fastest, open_row, cheapest):
        if answer is not None and answer["source"] == "measured" and int(answer["n"]) < 2:
            out.append((answer, "once"))
    seen: set[tuple[int, int, str]] = set()
    unique = []
    for row, why in out:
        key = (int(row["nodes"]), int(row["devices_per_node"]), why)
        if key not in seen:
            seen.add(key)
            unique.append((row, why))
    return unique


@dataclass
class PlanResult:
    request: PlanRequest
    table: pd.DataFrame
    """:data:`analysis.compute.plan.table.PLAN_COLUMNS`, one row per series and scale."""
    answers: list[dict[str, Any]]
    """:func:`answers`: per series, the rule's picks."""


def make_plan(
    runs: pd.DataFrame,
    scaling: pd.DataFrame,
    request: PlanRequest,
    *,
    projection: pd.DataFrame | None = None,
    confidence: float = 0.95,
) -> PlanResult:
    """The plan table (dominance marked) and the rule's answers (:class:`PlanError` for a
    unit the records do not count or a request :meth:`PlanRequest.problem` refuses)."""
    problem = request.problem()
    if problem is not None:
        raise PlanError(problem)
    table = plan_table(runs, scaling, request, projection=projection, confidence=confidence)
    marked = []
    for _, part in table.groupby("series", sort=False):
        marked += mark_dominated(part.to_dict("records"), request)
    table = pd.DataFrame(marked, columns=table.columns)
    return PlanResult(request, table, answers(table, request))
