"""Mixed precision against fp32 (see :func:`precision_table`): the speed, memory and final
validation loss of each mixed-precision group beside its fp32 twin at the same scale.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis.compute.groups import (
    DEFAULT_CONFIDENCE,
    ScaleGroup,
    group_row,
    headline_columns,
    scale_groups,
    series_labels,
)
from analysis.compute.stats import ratio_ci, ratio_or_nan
from analysis.read.frame import SCALE_KEYS, SERIES_KEYS

FP32 = "32"
PRECISION_COLUMNS = [
    "series",
    "fp32_series",
    *SERIES_KEYS,
    *SCALE_KEYS,
    "n",
    "fp32_n",
    "headline_basis",
    "samples_per_s_mean",
    "fp32_samples_per_s_mean",
    "speed_ratio",
    "speed_ratio_ci_low",
    "speed_ratio_ci_high",
    "peak_mem_gib_mean",
    "fp32_peak_mem_gib_mean",
    "peak_mem_ratio",
    "val_loss_final_mean",
    "fp32_val_loss_final_mean",
    "val_loss_rel_diff",
]


def _mean_recorded(rows: pd.DataFrame, column: str) -> float:
    """Mean over the runs that recorded ``column`` (GPU peak memory is absent on the CPU)."""
    if column not in rows:
        return math.nan
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    return float(values.mean()) if len(values) else math.nan


def precision_table(runs: pd.DataFrame, *, confidence: float = DEFAULT_CONFIDENCE) -> pd.DataFrame:
    """Mixed precision against fp32: one row per (mixed-precision group, its fp32 twin).

    Twins are groups whose series keys differ only in ``precision`` (one of them ``32``) at
    the same scale. ``speed_ratio`` is mixed / fp32 mean headline throughput (steady state
    when every run of both has one, else whole training) with its :func:`ratio_ci` interval;
    ``peak_mem_ratio`` is mixed / fp32 mean ``peak_mem_gib_max`` where both recorded it;
    ``val_loss_rel_diff`` is (mixed - fp32) / fp32 mean final validation loss. Empty when no
    twins exist.
    """
    groups = scale_groups(runs, confidence)
    labels = series_labels([g.series_key for g in groups])
    i = SERIES_KEYS.index("precision")

    def twin_key(g: ScaleGroup) -> tuple[Any, ...]:
        return (*g.series_key[:i], *g.series_key[i + 1 :], g.nodes, g.devices_per_node)

    fp32 = {twin_key(g): g for g in groups if str(g.series_key[i]) == FP32}
    rows = []
    for g in groups:
        base = fp32.get(twin_key(g))
        if base is None or str(g.series_key[i]) == FP32:
            continue
        row = group_row(labels[g.series_key], g)
        row["fp32_series"] = labels[base.series_key]
        row.update(_against_fp32(g, base, confidence))
        rows.append(row)
    return pd.DataFrame(rows, columns=PRECISION_COLUMNS)


def _against_fp32(g: ScaleGroup, base: ScaleGroup, confidence: float) -> dict[str, Any]:
    """A mixed-precision group's figures beside its fp32 twin ``base``."""
    x, _, basis = headline_columns(g, base)
    speed = ratio_ci(g.stats[x], base.stats[x], confidence)
    mem, base_mem = (
        _mean_recorded(g.rows, "peak_mem_gib_max"),
        _mean_recorded(base.rows, "peak_mem_gib_max"),
    )
    loss, base_loss = g.stats["val_loss_final"].mean, base.stats["val_loss_final"].mean
    return dict(
        n=g.stats[x].n,
        fp32_n=base.stats[x].n,
        headline_basis=basis,
        samples_per_s_mean=g.stats[x].mean,
        fp32_samples_per_s_mean=base.stats[x].mean,
        speed_ratio=speed[0],
        speed_ratio_ci_low=speed[1],
        speed_ratio_ci_high=speed[2],
        peak_mem_gib_mean=mem,
        fp32_peak_mem_gib_mean=base_mem,
        peak_mem_ratio=ratio_or_nan(mem, base_mem),
        val_loss_final_mean=loss,
        fp32_val_loss_final_mean=base_loss,
        val_loss_rel_diff=ratio_or_nan(loss - base_loss, base_loss),
    )
