"""The plan's table: for a given amount of training (samples, tokens or optimizer steps), the
time to train, node-hours, device-hours, the charged hours and cost at every measured and
projected scale, each with an interval, and the model state one device holds there.

Time to train at a scale = the work in samples / the steady-state throughput + the start-up
and warm-up cost of one job, measured:

* start-up: ``setup_time_s`` (from the job's start until training starts);
* warm-up: the time the steps before the steady state took beyond what their samples cost at
  the steady throughput, ``train_time_s * (1 - samples_per_s / steady_samples_per_s)``;
* at a projected scale both are the largest measured scale's (the nearest one measured).

Throughput is the arithmetic mean over a scale's runs, the mean the scaling table's speedup
and efficiency divide (one mean everywhere). Its interval is the rate's confidence interval
(:func:`analysis.compute.groups.group_stats`: taken on the log scale), as a ratio to the
geometric mean, around that mean; none for a scale run once. A projected scale's throughput
is its efficiency x its devices x the baseline's throughput per device, so that the row
multiplies back, and its interval the projection's prediction interval. The start-up cost is
added as its mean to both ends.

What is charged (:attr:`PlanRequest.charge`): whole nodes (``node``: node-hours, the default,
as on sites that allocate nodes exclusively) or devices (``device``: device-hours, shared
nodes); times the centre's charge factor where one is given. A price turns charged hours into
money: a device-hour's price, a node charged as the most devices a scale of the series uses
on one node. ``charged_efficiency`` is the throughput per charged unit against what one
charged unit delivers at best, measured (:func:`reference_rate`): under node charging the
best measured single-node scale, a node counted whole (where it ran on fewer devices than a
node of the series holds, its rate per device times the node's devices), so that 1x1 on a
2-device node (charged the whole node, using half of it) keeps 50% and 1x2 100%, a scale of
several nodes is judged against a node used well, not against a lone device, and a projected
node of 4 devices against 4 devices at the rate measured on 2, not against the 2.
:mod:`.rule` decides from it.

``steps`` plans the same training at every scale: optimizer steps at the baseline's global
batch, in samples (under weak scaling a larger scale takes those samples in fewer, larger
steps)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.compute.groups import series_scale_groups
from analysis.compute.plan.memory import memory_columns
from analysis.compute.stats import ratio_ci
from scalescope.workloads import tokens

UNITS = ("samples", "tokens", "steps")
CHARGES = ("node", "device")
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
    """The efficiency per charged unit a scale must keep (lower end of its interval) to be
    chosen, against the baseline's."""
    charge_factor: float | None = None
    """A centre's charged hours per hour of what it charges (nodes or devices)."""
    price_per_gpu_hour: float | None = None
    """Price of one device-hour (GPU-hour)."""
    charge: str = "node"
    """What the centre charges: ``node`` (whole nodes: node-hours) or ``device``."""

    def problem(self) -> str | None:
        """What is wrong with the request, in one line naming the setting; None if nothing."""
        if not (math.isfinite(self.work) and self.work > 0):
            return f"work: must be a number > 0 ({self.unit}), got {self.work:g}"
        if self.unit not in UNITS:
            return f"unit: one of {', '.join(UNITS)}, got {self.unit!r}"
        if self.charge not in CHARGES:
            return f"charge: one of {', '.join(CHARGES)}, got {self.charge!r}"
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
    "throughput_cv",
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
    "charged_efficiency",
    "charged_efficiency_low",
    "charged_efficiency_high",
    "charged_hours",
    "charged_hours_low",
    "charged_hours_high",
    "cost",
    "cost_low",
    "cost_high",
    "dominated_by",
    "model_state_gib",
    "model_state_basis",
    "peak_mem_gib",
    "device_memory_gib",
    "fits",
]
"""Columns of ``plan.csv`` (and summary.json's ``plan``): ``source`` measured or projected;
efficiencies as fractions (``efficiency`` per device, ``charged_efficiency`` per charged
unit); throughput in samples/s (steady state, mean over runs); times in hours; the charged
hours (node-hours or device-hours, times the charge factor) always, the cost empty without
a price; ``dominated_by`` the scale that trains faster for no more charged cost (empty
where none does); the model state one device holds (GiB, ``model_state_basis`` says how it
is known), the measured training peak and the device's memory where recorded (GPUs), and
``fits`` (False where the model state alone exceeds the device's memory; empty where
unknown)."""


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
    """The work in samples for a series' runs (``steps`` is counted at the baseline's global
    batch by :func:`plan_table`)."""
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
            rel = s.mean / s.gmean if s.gmean > 0 else math.nan
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
                    "throughput": s.mean,
                    "throughput_low": s.ci_low * rel,
                    "throughput_high": s.ci_high * rel,
                    "throughput_cv": s.cv,
                    "startup_s": startup,
                    "warmup_cost_s": warm,
                    "samples_per_step": float(g.rows["global_batch_size"].astype(float).mean()),
                    "_rows": g.rows,
                    "_stats": s,
                }
            )
    return out


def baseline_row(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The measured row the series' efficiencies are against: the one whose efficiency is 1
    by definition (no interval), else the smallest measured scale."""
    measured = [r for r in rows if r["source"] == "measured"]
    for r in measured:
        if float(r["efficiency"]) == 1.0 and not math.isfinite(float(r["efficiency_low"])):
            return r
    return measured[0]


def _projected_rows(
    projection: pd.DataFrame | None, measured: Mapping[str, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The projection's "as measured" rows at scales not measured: the throughput is the
    efficiency x devices x the baseline's throughput per device (so the row multiplies back),
    its interval the efficiency's; the largest measured scale's job costs."""
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
        base = baseline_row(mine)
        per_device = float(base["throughput"]) / int(base["world_size"])
        world = int(r["world_size"])
        e = float(r["efficiency"])
        out.append(
            {
                **{k: r[k] for k in ("series", "nodes", "devices_per_node", "world_size")},
                "source": "projected",
                "n": 0,
                "efficiency": e,
                "efficiency_low": float(r["efficiency_low"]),
                "efficiency_high": float(r["efficiency_high"]),
                "throughput": e * world * per_device,
                "throughput_low": float(r["efficiency_low"]) * world * per_device,
                "throughput_high": float(r["efficiency_high"]) * world * per_device,
                "throughput_cv": math.nan,
                "startup_s": largest["startup_s"],
                "warmup_cost_s": largest["warmup_cost_s"],
                "samples_per_step": float(r["per_device_batch_size"]) * world,
                "_rows": largest["_rows"],
            }
        )
    return out


def charged_units(row: Mapping[str, Any], charge: str) -> int:
    """What a row is charged for at once: its nodes, or its devices."""
    return int(row["nodes"]) if charge == "node" else int(row["world_size"])


def charged_reference(rows: Sequence[Mapping[str, Any]], charge: str) -> Mapping[str, Any]:
    """What a charged unit delivers at best, measured: among the measured scales on the
    fewest charged units (one node; one device), the one with the highest throughput. Under
    node charging that is a node used as well as it was measured (not a 1-device run that
    leaves the rest of its node idle but is charged for all of it); under device charging,
    the series' baseline device."""
    measured = [r for r in rows if r["source"] == "measured"]
    fewest = min(charged_units(r, charge) for r in measured)
    return max(
        (r for r in measured if charged_units(r, charge) == fewest),
        key=lambda r: (float(r["throughput"]), -int(r["world_size"])),
    )


def node_devices(rows: Sequence[Mapping[str, Any]]) -> int:
    """What a node of a series holds, in devices: the most any of its scales uses on one."""
    return max(int(r["devices_per_node"]) for r in rows)


def reference_devices(rows: Sequence[Mapping[str, Any]], charge: str) -> int:
    """The devices one charged unit counts as: one under device charging; under node
    charging a node's whole (:func:`node_devices`), though the reference scale
    (:func:`charged_reference`, one node) may have run on fewer."""
    return node_devices(rows) if charge == "node" else 1


def reference_rate(rows: Sequence[Mapping[str, Any]], charge: str) -> float:
    """What one charged unit delivers at best, measured (samples/s): the reference scale's
    (:func:`charged_reference`) throughput per device times the devices a unit counts as
    (:func:`reference_devices`): a part-used node is judged against the node it is charged
    as, used whole at the rate measured."""
    ref = charged_reference(rows, charge)
    return float(ref["throughput"]) / int(ref["world_size"]) * reference_devices(rows, charge)


def _charged(
    row: Mapping[str, Any], ref: Mapping[str, Any], per_ref: float, charge: str
) -> dict[str, float]:
    """The row's throughput per charged unit against ``per_ref`` (:func:`reference_rate`, of
    the reference scale ``ref``). A measured row's interval is the ratio of the two groups'
    means' (:func:`analysis.compute.stats.ratio_ci`, as the scaling table's efficiencies);
    a projected row's is its efficiency's prediction interval, in proportion."""
    units = charged_units(row, charge)
    centre = float(row["throughput"]) / units / per_ref if per_ref > 0 else math.nan
    if row is ref:
        low = high = math.nan
    elif row["source"] == "measured":
        _, lo, hi = ratio_ci(row["_stats"], ref["_stats"])
        rel = float(ref["throughput"]) / units / per_ref
        low, high = lo * rel, hi * rel
    else:
        e = float(row["efficiency"])
        low = centre * float(row["efficiency_low"]) / e if e > 0 else math.nan
        high = centre * float(row["efficiency_high"]) / e if e > 0 else math.nan
    return {
        "charged_efficiency": centre,
        "charged_efficiency_low": low,
        "charged_efficiency_high": high,
    }


def _costs(
    row: dict[str, Any], request: PlanRequest, work: float, node_devices: int
) -> dict[str, Any]:
    """The row's time, node-hours, device-hours, charged hours and cost, with intervals (a
    slower throughput gives the longer time); ``node_devices``: what a node is charged as,
    in devices, when a price is given under node charging."""
    fixed = row["startup_s"] + row["warmup_cost_s"]
    factor, price = request.charge_factor or 1.0, request.price_per_gpu_hour
    per_unit_devices = node_devices if request.charge == "node" else 1
    units = charged_units(row, request.charge)
    out: dict[str, Any] = {"work_samples": work}
    for end, rate in (("", "throughput"), ("_low", "throughput_high"), ("_high", "throughput_low")):
        x = float(row[rate])
        hours = (work / x + fixed) / HOUR_S if x > 0 else math.nan
        out[f"time{end}_h"] = hours
        out[f"node_hours{end}"] = hours * row["nodes"]
        out[f"device_hours{end}"] = hours * row["world_size"]
        out[f"charged_hours{end}"] = hours * units * factor
        out[f"cost{end}"] = hours * units * factor * per_unit_devices * price if price else math.nan
    return out


def _series_rows(rows: list[dict[str, Any]], request: PlanRequest) -> list[dict[str, Any]]:
    """One series' rows with their costs, charged efficiency and memory: the work in samples
    the same at every scale (``steps`` at the baseline's global batch)."""
    rows = sorted(rows, key=lambda r: (int(r["world_size"]), int(r["nodes"])))
    base = baseline_row(rows)
    ref = charged_reference(rows, request.charge)
    per_ref = reference_rate(rows, request.charge)
    work = work_in_samples(request, base["_rows"], base["series"])
    if request.unit == "steps":
        work *= float(base["samples_per_step"])
    whole = node_devices(rows)
    memory = memory_columns(rows)
    return [
        {
            **r,
            **_costs(r, request, work, whole),
            **_charged(r, ref, per_ref, request.charge),
            **m,
        }
        for r, m in zip(rows, memory, strict=True)
    ]


def plan_table(
    runs: pd.DataFrame,
    scaling: pd.DataFrame,
    request: PlanRequest,
    *,
    projection: pd.DataFrame | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per series and scale, by world size (columns: :data:`PLAN_COLUMNS`;
    ``dominated_by`` left empty: :func:`analysis.compute.plan.rule.mark_dominated` fills it).
    Raises :class:`PlanError` when the unit does not fit a series."""
    measured = _measured_rows(runs, scaling, confidence)
    projected = _projected_rows(projection, measured)
    out: list[dict[str, Any]] = []
    for series, mine in measured.items():
        rows = _series_rows([*mine, *(r for r in projected if r["series"] == series)], request)
        out += rows
    return pd.DataFrame(out, columns=PLAN_COLUMNS)
