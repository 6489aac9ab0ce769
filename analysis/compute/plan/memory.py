"""Memory at the planned scales: the model state one device holds (parameters, gradients and
optimizer state, counted from the tensors by every rank: the record's ``memory``), the measured
training peak and the device's memory, per row of the plan.

At a measured scale the model state is the largest any rank held, averaged over the runs. At
a projected scale:

* unsharded (DDP) every device holds the whole state: the measured value, whatever the scale;
* sharded (FSDP) a device holds ``unsharded + sharded / world``, fitted by least squares to
  the measured scales (two world sizes at least; the part that does not shrink, such as
  parameters FSDP leaves whole, is the intercept, kept >= 0). From one world size the split
  is unknown and the row says so rather than guess;
* hybrid (HSDP) the same with the ranks of a shard group in place of the world (the record's
  mesh: its last dimension), which a projected scale keeps: a node's devices by default, so
  the state per device stops shrinking beyond one node.

``fits`` is False where the model state alone exceeds the device's memory (recorded on GPUs);
activations come on top, so True means only that the state leaves room.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.read.strategy import is_sharded, mesh_shard_size


def _mean(rows: pd.DataFrame, column: str) -> float:
    if column not in rows:
        return math.nan
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    return float(values.mean()) if len(values) else math.nan


def _strategy(rows: pd.DataFrame) -> str:
    if "strategy" not in rows:
        return "ddp"
    values = rows["strategy"].dropna()
    return str(values.iloc[0]) if len(values) else "ddp"


def shard_ranks(rows: pd.DataFrame, world: int) -> int:
    """The ranks a run's model state is sharded over: the world, or under HSDP a shard
    group's (its records' mesh, ``replicate x shard``: the last dimension)."""
    if _strategy(rows) != "hsdp":
        return world
    return mesh_shard_size(rows) or world


def _sharded_fit(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """(unsharded GiB, sharded GiB) with state = a + b / world, least squares; None from
    fewer than two world sizes."""
    if len({w for w, _ in points}) < 2:
        return None
    x = np.array([1.0 / w for w, _ in points])
    y = np.array([s for _, s in points])
    b, a = np.polyfit(x, y, 1)
    if a < 0:  # nothing can be held negative: all of it shards
        a, b = 0.0, float(np.sum(x * y) / np.sum(x * x))
    return float(a), float(max(b, 0.0))


def memory_columns(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per row of one series (each with ``_rows``, the runs it rests on: a projected row's are
    the largest measured scale's): ``model_state_gib``, ``model_state_basis``,
    ``peak_mem_gib``, ``device_memory_gib`` and ``fits``."""
    measured = [r for r in rows if r["source"] == "measured"]
    points = [
        (shard_ranks(r["_rows"], int(r["world_size"])), _mean(r["_rows"], "model_state_gib_max"))
        for r in measured
        if math.isfinite(_mean(r["_rows"], "model_state_gib_max"))
    ]
    sharded = bool(measured) and is_sharded(_strategy(measured[0]["_rows"]))
    fit = _sharded_fit(points) if sharded else None
    by_ranks = dict(points)
    device = min(
        (d for r in measured if math.isfinite(d := _mean(r["_rows"], "device_memory_gib"))),
        default=math.nan,
    )
    out = []
    for r in rows:
        if r["source"] == "measured":
            state = _mean(r["_rows"], "model_state_gib_max")
            basis = "measured" if math.isfinite(state) else "not recorded"
            peak = _mean(r["_rows"], "peak_mem_gib_max")
        elif not points:
            state, basis, peak = math.nan, "not recorded", math.nan
        elif not sharded:
            state, basis, peak = max(s for _, s in points), "unsharded: as measured", math.nan
        elif (ranks := shard_ranks(r["_rows"], int(r["world_size"]))) in by_ranks:
            # as many ranks per shard as a measured scale (HSDP's shard group): its state
            state, basis, peak = by_ranks[ranks], "sharded: as measured", math.nan
        elif fit is None:
            state, basis, peak = math.nan, "sharded, one world size measured", math.nan
        else:
            state = fit[0] + fit[1] / ranks
            basis, peak = "sharded: fitted", math.nan
        fits = None if not (math.isfinite(state) and math.isfinite(device)) else state <= device
        out.append(
            {
                "model_state_gib": state,
                "model_state_basis": basis,
                "peak_mem_gib": peak,
                "device_memory_gib": device,
                "fits": fits,
            }
        )
    return out
