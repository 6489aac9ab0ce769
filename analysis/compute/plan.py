"""The plan: from efficiency to a decision. For a given amount of training (samples, tokens or
optimizer steps), the time to train, node-hours, device-hours and cost at every measured and
projected scale, each with an interval, and the rule that picks the scale to ask for.

Time to train at a scale = the work in samples / the steady-state throughput + the start-up
and warm-up cost of one job, measured:

* start-up: ``setup_time_s`` (from the job's start until training starts);
* warm-up: the time the steps before the steady state took beyond what their samples cost at
  the steady throughput, ``train_time_s * (1 - samples_per_s / steady_samples_per_s)``;
* at a projected scale both are the largest measured scale's (the nearest one measured).

The interval of a measured scale is its steady throughput's confidence interval (of the
geometric mean, :func:`analysis.compute.groups.group_stats`; none for a scale run once); of
a projected scale, the projection's prediction interval (the throughput moves with the
efficiency). The start-up cost is added as its mean to both ends.

The rule (:func:`answers`), per series: the fastest scale whose efficiency stays at or
above the floor at the lower end of its interval (the centre where it has none); the cheapest
scale (least cost with a price, else least node-hours); and where the marginal node stops
paying: the first step up whose added devices each deliver less than the floor's share of a
baseline device's throughput (marginal efficiency), with whether its interval settles it.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.compute.groups import series_scale_groups
from scalescope.workloads import tokens

UNITS = ("samples", "tokens", "steps")
DEFAULT_FLOOR = 0.70
HOUR_S = 3600.0


class PlanError(ValueError):
    """A plan that cannot be made from these records (a unit they do not count)."""


@dataclass(frozen=True)
class PlanRequest:
    """``--plan-work`` and its companions (or a sweep file's ``plan:``)."""

    work: float
    """The training to plan, in ``unit``."""
    unit: str = "samples"
    floor: float = DEFAULT_FLOOR
    """The efficiency a scale must keep (lower end of its interval) to be chosen."""
    charge_factor: float | None = None
    """A centre's charged node-hours per node-hour."""
    price_per_gpu_hour: float | None = None
    """Price of one device-hour (GPU-hour)."""

    def problem(self) -> str | None:
        """What is wrong with the request, in one line naming the setting; None if nothing."""
        if not (math.isfinite(self.work) and self.work > 0):
            return f"work: must be a number > 0 ({self.unit}), got {self.work:g}"
        if self.unit not in UNITS:
            return f"unit: one of {', '.join(UNITS)}, got {self.unit!r}"
        if not 0 < self.floor < 1:
            return f"floor: an efficiency between 0 and 1 (0.7 = 70%), got {self.floor:g}"
        for name in ("charge_factor", "price_per_gpu_hour"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                return f"{name}: must be a number > 0, got {value:g}"
        return None


PLAN_COLUMNS = [
    "series",
    "source",
    "nodes",
    "devices_per_node",
    "world_size",
    "n",
    "efficiency",
    "efficiency_low",
    "efficiency_high",
    "throughput",
    "throughput_low",
    "throughput_high",
    "work_samples",
    "startup_s",
    "warmup_cost_s",
    "time_h",
    "time_low_h",
    "time_high_h",
    "node_hours",
    "node_hours_low",
    "node_hours_high",
    "device_hours",
    "device_hours_low",
    "device_hours_high",
    "charged_node_hours",
    "charged_node_hours_low",
    "charged_node_hours_high",
    "cost",
    "cost_low",
    "cost_high",
]
"""Columns of ``plan.csv`` (and summary.json's ``plan``): ``source`` measured or projected;
efficiencies as fractions; throughput in samples/s (steady state); times in hours; the
charged node-hours and cost empty without a charge factor or price."""


# --- units ------------------------------------------------------------------------------------


def tokens_per_sample(workload: Any, params_json: Any, recorded: Any = None) -> int | None:
    """Tokens in one sample of a series' runs: the record's ``tokens_per_sample``
    (``recorded``), else, for a record made before it, what :mod:`scalescope.workloads.tokens` makes
    of its workload and parameters (the gpt workload's sequence length); None for a
    workload that does not count tokens."""
    if recorded is not None and not pd.isna(recorded) and float(recorded) > 0:
        return int(recorded)
    try:
        params = json.loads(params_json or "{}")
    except (TypeError, ValueError):
        return None
    if not isinstance(params, dict):
        return None
    return tokens.tokens_per_sample({**params, "name": workload})


def work_in_samples(request: PlanRequest, rows: pd.DataFrame, series: str) -> float:
    """The work in samples for a series' runs (``steps`` is handled per scale: its samples
    per step are the global batch)."""
    if request.unit == "samples" or request.unit == "steps":
        return request.work
    first = rows.iloc[0]
    workload = first.get("workload")
    count = tokens_per_sample(workload, first.get("workload_params"), first.get(tokens.KEY, None))
    if count is None:
        # "unit: ...": the command line names the option or the sweep file's key
        raise PlanError(
            f"unit: tokens, but the records count samples ({series}: "
            f"{tokens.no_tokens(workload)}); plan in samples or steps"
        )
    return request.work / count


# --- the table --------------------------------------------------------------------------------


def _overhead(rows: pd.DataFrame) -> tuple[float, float]:
    """(start-up s, warm-up cost s) of one job: the mean over the runs (see the module doc)."""
    setup = pd.to_numeric(rows["setup_time_s"], errors="coerce").fillna(0.0)
    train = pd.to_numeric(rows["train_time_s"], errors="coerce")
    whole = pd.to_numeric(rows["samples_per_s"], errors="coerce")
    steady = pd.to_numeric(rows["steady_samples_per_s"], errors="coerce")
    warm = (train * (1.0 - whole / steady)).where(steady > 0, 0.0).fillna(0.0).clip(lower=0.0)
    return float(setup.mean()), float(warm.mean())


def _measured_rows(
    runs: pd.DataFrame, scaling: pd.DataFrame, confidence: float
) -> dict[str, list[dict[str, Any]]]:
    """series -> its measured scales: throughput (steady, else whole training), its interval,
    the efficiency and its interval (the scaling table's), the start-up and warm-up cost."""
    out: dict[str, list[dict[str, Any]]] = {}
    for _, label, members in series_scale_groups(runs, confidence):
        part = scaling[scaling["series"] == label]
        for g in members:
            s = g.stats["steady_samples_per_s"]
            if s.n != g.stats["samples_per_s"].n or s.n == 0:
                s = g.stats["samples_per_s"]
            eff = part[
                (part["nodes"] == g.nodes) & (part["devices_per_node"] == g.devices_per_node)
            ]
            e = eff.iloc[0] if len(eff) else None
            col = "per_device_throughput_efficiency"
            startup, warm = _overhead(g.rows)
            out.setdefault(label, []).append(
                {
                    "series": label,
                    "source": "measured",
                    "nodes": g.nodes,
                    "devices_per_node": g.devices_per_node,
                    "world_size": g.world_size,
                    "n": s.n,
                    "efficiency": e[col] if e is not None else math.nan,
                    "efficiency_low": e[f"{col}_ci_low"] if e is not None else math.nan,
                    "efficiency_high": e[f"{col}_ci_high"] if e is not None else math.nan,
                    "throughput": s.gmean,
                    "throughput_low": s.ci_low,
                    "throughput_high": s.ci_high,
                    "startup_s": startup,
                    "warmup_cost_s": warm,
                    "samples_per_step": float(g.rows["global_batch_size"].astype(float).mean()),
                    "_rows": g.rows,
                }
            )
    return out


def _projected_rows(
    projection: pd.DataFrame | None, measured: Mapping[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The projection's "as measured" rows at scales not measured, the throughput's interval
    from the efficiency's (they move together), the largest measured scale's job costs."""
    if projection is None or projection.empty:
        return []
    out = []
    rows = projection[projection["what_if"] == "as measured"]
    for _, r in rows.iterrows():
        mine = measured.get(r["series"], [])
        if not mine or any(
            (m["nodes"], m["devices_per_node"]) == (r["nodes"], r["devices_per_node"]) for m in mine
        ):
            continue
        largest = max(mine, key=lambda m: (m["world_size"], m["nodes"]))
        e, th = float(r["efficiency"]), float(r["throughput"])
        scale = th / e if e > 0 else math.nan
        out.append(
            {
                **{k: r[k] for k in ("series", "nodes", "devices_per_node", "world_size")},
                "source": "projected",
                "n": 0,
                "efficiency": e,
                "efficiency_low": float(r["efficiency_low"]),
                "efficiency_high": float(r["efficiency_high"]),
                "throughput": th,
                "throughput_low": scale * float(r["efficiency_low"]),
                "throughput_high": scale * float(r["efficiency_high"]),
                "startup_s": largest["startup_s"],
                "warmup_cost_s": largest["warmup_cost_s"],
                "samples_per_step": float(r["per_device_batch_size"]) * int(r["world_size"]),
                "_rows": largest["_rows"],
            }
        )
    return out


def _costs(row: dict[str, Any], request: PlanRequest) -> dict[str, Any]:
    """The row's time, node-hours, device-hours, charged node-hours and cost, with intervals
    (a slower throughput gives the longer time)."""
    per_step = row["samples_per_step"] if request.unit == "steps" else 1.0
    work = work_in_samples(request, row["_rows"], row["series"]) * per_step
    fixed = row["startup_s"] + row["warmup_cost_s"]
    out: dict[str, Any] = {"work_samples": work}
    for end, rate in (("", "throughput"), ("_low", "throughput_high"), ("_high", "throughput_low")):
        x = float(row[rate])
        hours = (work / x + fixed) / HOUR_S if x > 0 else math.nan
        out[f"time{end}_h"] = hours
        out[f"node_hours{end}"] = hours * row["nodes"]
        out[f"device_hours{end}"] = hours * row["world_size"]
        factor, price = request.charge_factor, request.price_per_gpu_hour
        out[f"charged_node_hours{end}"] = hours * row["nodes"] * factor if factor else math.nan
        out[f"cost{end}"] = hours * row["world_size"] * price if price else math.nan
    return out


def plan_table(
    runs: pd.DataFrame,
    scaling: pd.DataFrame,
    request: PlanRequest,
    *,
    projection: pd.DataFrame | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per series and scale, measured then projected, by world size (columns:
    :data:`PLAN_COLUMNS`). Raises :class:`PlanError` when the unit does not fit a series."""
    measured = _measured_rows(runs, scaling, confidence)
    rows = [
        *(r for part in measured.values() for r in part),
        *_projected_rows(projection, measured),
    ]
    out = [{**r, **_costs(r, request)} for r in rows]
    frame = pd.DataFrame(out, columns=PLAN_COLUMNS)
    order = {s: i for i, s in enumerate(measured)}
    frame["_order"] = frame["series"].map(order)
    frame = frame.sort_values(["_order", "world_size", "nodes"], kind="stable")
    return frame.drop(columns="_order").reset_index(drop=True)


# --- the rule ---------------------------------------------------------------------------------


def lower_end(row: Mapping[str, Any]) -> float:
    """The efficiency a row is judged on: the lower end of its interval, the centre without."""
    low = float(row["efficiency_low"])
    return low if math.isfinite(low) else float(row["efficiency"])


def _pick(rows: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    finite = [r for r in rows if math.isfinite(float(r[key]))]
    return min(finite, key=lambda r: (float(r[key]), r["world_size"])) if finite else None


def marginal(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each step up in world size: the throughput its added devices deliver, per device, as a
    share of a baseline device's (the first row's), with its interval (the two throughputs'
    opposite ends)."""
    if not rows:
        return []
    base = float(rows[0]["throughput"]) / int(rows[0]["world_size"])
    steps = []
    for a, b in itertools.pairwise(rows):
        added = int(b["world_size"]) - int(a["world_size"])
        if added <= 0 or not base > 0:
            continue

        def share(hi: str, lo: str, a: Any = a, b: Any = b, added: int = added) -> float:
            return (float(b[hi]) - float(a[lo])) / added / base

        steps.append(
            {
                "from": a,
                "to": b,
                "marginal": share("throughput", "throughput"),
                "marginal_low": share("throughput_low", "throughput_high"),
                "marginal_high": share("throughput_high", "throughput_low"),
            }
        )
    return steps


def answers(table: pd.DataFrame, request: PlanRequest) -> list[dict[str, Any]]:
    """Per series: ``fastest`` (the fastest row whose :func:`lower_end` is at or above the
    floor), ``cheapest`` (least cost with a price, else least node-hours), ``stops_paying``
    (the first step up whose marginal efficiency is below the floor; ``settled`` when the
    upper end of its interval is too), ``no_projected_clears`` and ``measure_next``: the scales
    to run or repeat, each with why (``projected``, ``beyond``, ``check_floor``, ``once``)."""
    out = []
    for series, part in table.groupby("series", sort=False):
        rows = part.sort_values(["world_size", "nodes"]).to_dict("records")
        above = [r for r in rows if lower_end(r) >= request.floor]
        fastest = _pick(above, "time_h")
        cheapest = _pick(rows, "cost" if request.price_per_gpu_hour else "node_hours")
        stop = next((s for s in marginal(rows) if s["marginal"] < request.floor), None)
        if stop is not None:
            high = float(stop["marginal_high"])
            stop = {**stop, "settled": math.isfinite(high) and high < request.floor}
        projected = [r for r in rows if r["source"] == "projected"]
        out.append(
            {
                "series": series,
                "fastest": fastest,
                "cheapest": cheapest,
                "stops_paying": stop,
                "has_projection": bool(projected),
                "no_projected_clears": bool(projected) and not any(r in above for r in projected),
                "measure_next": _measure_next(rows, fastest, cheapest, projected),
            }
        )
    return out


def _measure_next(
    rows: Sequence[Mapping[str, Any]],
    fastest: Mapping[str, Any] | None,
    cheapest: Mapping[str, Any] | None,
    projected: Sequence[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], str]]:
    """(row, why) of the scales whose measurement would firm the answers up, most useful
    first: a projected answer (``projected``); the first projected scale when none clears the
    floor (``check_floor``); the next scale up when the fastest is the largest measured and
    nothing was projected (``beyond``); a measured answer run once (``once``)."""
    out: list[tuple[Mapping[str, Any], str]] = []
    measured = [r for r in rows if r["source"] == "measured"]
    for answer in (fastest, cheapest):
        if answer is not None and answer["source"] == "projected":
            out.append((answer, "projected"))
    if fastest is not None and fastest["source"] == "measured":
        if projected and not out:
            out.append((projected[0], "check_floor"))
        elif not projected and fastest is measured[-1]:
            out.append((fastest, "beyond"))
    for answer in (fastest, cheapest):
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
    """:data:`PLAN_COLUMNS`, one row per series and scale."""
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
    """The plan table and the rule's answers (:class:`PlanError` for a unit the records do
    not count, ``ValueError`` for a request :meth:`PlanRequest.problem` refuses)."""
    problem = request.problem()
    if problem is not None:
        raise PlanError(problem)
    table = plan_table(runs, scaling, request, projection=projection, confidence=confidence)
    return PlanResult(request, table, answers(table, request))
