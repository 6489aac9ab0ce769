"""Series beside their twins at the same scale: mixed precision against fp32 (see
:func:`precision_table`: speed, memory, final validation loss), and a sharded strategy against
DDP (see :func:`strategy_table`: speed, each one's efficiency, model state and memory).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd

from analysis.compute.groups import (
    DEFAULT_CONFIDENCE,
    ScaleGroup,
    efficiency_column,
    group_row,
    headline_columns,
    scale_groups,
    series_labels,
)
from analysis.compute.stats import ratio_ci, ratio_or_nan, repeats_to_settle
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
    rows = []
    for g, base in twins(groups, "precision", FP32):
        row = group_row(labels[g.series_key], g)
        row["fp32_series"] = labels[base.series_key]
        row.update(_against_fp32(g, base, confidence))
        rows.append(row)
    return pd.DataFrame(rows, columns=PRECISION_COLUMNS)


def twins(
    groups: list[ScaleGroup], key: str, base_value: str
) -> Iterator[tuple[ScaleGroup, ScaleGroup]]:
    """Each group paired with its twin on ``base_value``: the group whose series keys differ
    only in ``key`` (``base_value`` there) at the same scale; groups that are the base, or
    have no twin, are left out. In the groups' order."""
    i = SERIES_KEYS.index(key)

    def twin_key(g: ScaleGroup) -> tuple[Any, ...]:
        return (*g.series_key[:i], *g.series_key[i + 1 :], g.nodes, g.devices_per_node)

    bases = {twin_key(g): g for g in groups if str(g.series_key[i]) == base_value}
    for g in groups:
        base = bases.get(twin_key(g))
        if base is not None and str(g.series_key[i]) != base_value:
            yield g, base


def _speed(g: ScaleGroup, base: ScaleGroup, confidence: float, prefix: str) -> dict[str, Any]:
    """The headline throughput of ``g`` beside its twin's (columns of the twin ``prefix``)
    and their ratio with its :func:`ratio_ci` interval."""
    x, _, basis = headline_columns(g, base)
    speed = ratio_ci(g.stats[x], base.stats[x], confidence)
    return {
        "n": g.stats[x].n,
        f"{prefix}n": base.stats[x].n,
        "headline_basis": basis,
        "samples_per_s_mean": g.stats[x].mean,
        f"{prefix}samples_per_s_mean": base.stats[x].mean,
        "speed_ratio": speed[0],
        "speed_ratio_ci_low": speed[1],
        "speed_ratio_ci_high": speed[2],
    }


def _recorded_ratio(
    g: ScaleGroup, base: ScaleGroup, column: str, name: str, prefix: str
) -> dict[str, float]:
    """The mean recorded ``column`` of ``g`` and of its twin, and their ratio (NaN where
    either recorded none): ``{name}_mean``, ``{prefix}{name}_mean`` and the ratio without the
    unit (``peak_mem_gib`` gives ``peak_mem_ratio``)."""
    mine, theirs = _mean_recorded(g.rows, column), _mean_recorded(base.rows, column)
    stem = name.removesuffix("_gib")
    return {
        f"{name}_mean": mine,
        f"{prefix}{name}_mean": theirs,
        f"{stem}_ratio": ratio_or_nan(mine, theirs),
    }


def _against_fp32(g: ScaleGroup, base: ScaleGroup, confidence: float) -> dict[str, Any]:
    """A mixed-precision group's figures beside its fp32 twin ``base``."""
    loss, base_loss = g.stats["val_loss_final"].mean, base.stats["val_loss_final"].mean
    return dict(
        **_speed(g, base, confidence, "fp32_"),
        **_recorded_ratio(g, base, "peak_mem_gib_max", "peak_mem_gib", "fp32_"),
        val_loss_final_mean=loss,
        fp32_val_loss_final_mean=base_loss,
        val_loss_rel_diff=ratio_or_nan(loss - base_loss, base_loss),
    )


# --- FSDP against DDP ---------------------------------------------------------------------

DDP = "ddp"
STRATEGY_COLUMNS = [
    "series",
    "ddp_series",
    *SERIES_KEYS,
    *SCALE_KEYS,
    "n",
    "ddp_n",
    "headline_basis",
    "samples_per_s_mean",
    "ddp_samples_per_s_mean",
    "speed_ratio",
    "speed_ratio_ci_low",
    "speed_ratio_ci_high",
    "efficiency",
    "efficiency_ci_low",
    "efficiency_ci_high",
    "ddp_efficiency",
    "ddp_efficiency_ci_low",
    "ddp_efficiency_ci_high",
    "model_state_gib_mean",
    "ddp_model_state_gib_mean",
    "model_state_ratio",
    "peak_mem_gib_mean",
    "ddp_peak_mem_gib_mean",
    "peak_mem_ratio",
    "repeats_to_settle",
]


def strategy_table(
    runs: pd.DataFrame, scaling: pd.DataFrame, *, confidence: float = DEFAULT_CONFIDENCE
) -> pd.DataFrame:
    """Each other strategy (FSDP) against DDP: one row per (group, its DDP twin), twins being
    groups whose series keys differ only in ``strategy`` at the same scale.

    ``speed_ratio`` is other / DDP mean headline throughput with its :func:`ratio_ci`
    interval; ``efficiency`` and ``ddp_efficiency`` each series' own headline efficiency
    at that scale against its own baseline (the scaling table's, with its interval): which
    strategy scales better; ``model_state_ratio`` other / DDP mean largest model state per
    rank (parameters, gradients, optimizer state: exact, so no interval), and
    ``peak_mem_ratio`` the same for the GPU's training peak where both recorded it;
    ``repeats_to_settle`` the repeats per scale that would settle which scales better at the
    spread measured (:func:`_repeats`). Empty when no twins exist."""
    if "strategy" not in runs.columns:
        return pd.DataFrame(columns=STRATEGY_COLUMNS)
    groups = scale_groups(runs, confidence)
    labels = series_labels([g.series_key for g in groups])
    rows = []
    for g, base in twins(groups, "strategy", DDP):
        row = group_row(labels[g.series_key], g)
        row["ddp_series"] = labels[base.series_key]
        row.update(_against_ddp(g, base, confidence))
        for prefix, label in (("", labels[g.series_key]), ("ddp_", labels[base.series_key])):
            row.update(_efficiency(scaling, label, g.nodes, g.devices_per_node, prefix))
        row["repeats_to_settle"] = _repeats(groups, g, base, row)
        rows.append(row)
    return pd.DataFrame(rows, columns=STRATEGY_COLUMNS)


def _repeats(
    groups: list[ScaleGroup], g: ScaleGroup, twin: ScaleGroup, row: dict[str, Any]
) -> int | None:
    """Repeats per scale that would settle which of the two scales better: each efficiency is
    a ratio of the group's mean throughput to its series' baseline's, so the ratio of the two
    efficiencies rests on four groups' spreads (:func:`repeats_to_settle`). None at a
    baseline, or where a spread is unknown (a group run once)."""
    x, _, _ = headline_columns(g, twin)

    def first(key: tuple[Any, ...]) -> ScaleGroup:
        return min(
            (m for m in groups if m.series_key == key), key=lambda m: (m.world_size, m.nodes)
        )

    mine, theirs = first(g.series_key), first(twin.series_key)
    if mine is g or theirs is twin:
        return None
    eff, ddp = row["efficiency"], row["ddp_efficiency"]
    if not (eff > 0 and ddp > 0):
        return None
    cvs = [m.stats[x].cv for m in (g, mine, twin, theirs)]
    return repeats_to_settle(cvs, math.log(eff / ddp))


def _against_ddp(g: ScaleGroup, base: ScaleGroup, confidence: float) -> dict[str, Any]:
    """Another strategy's group beside its DDP twin ``base``: speed, model state, peak."""
    return dict(
        **_speed(g, base, confidence, "ddp_"),
        **_recorded_ratio(g, base, "model_state_gib_max", "model_state_gib", "ddp_"),
        **_recorded_ratio(g, base, "peak_mem_gib_max", "peak_mem_gib", "ddp_"),
    )


def _efficiency(
    scaling: pd.DataFrame, series: str, nodes: int, dpn: int, prefix: str
) -> dict[str, float]:
    """A series' headline efficiency and its interval at one scale, from the scaling table
    (the per-device throughput efficiency for weak scaling, else S / p); NaN where absent."""
    rows = scaling[
        (scaling["series"] == series)
        & (scaling["nodes"] == nodes)
        & (scaling["devices_per_node"] == dpn)
    ]
    keys = ("efficiency", "efficiency_ci_low", "efficiency_ci_high")
    if rows.empty:
        return {f"{prefix}{k}": math.nan for k in keys}
    r = rows.iloc[0]
    eff = efficiency_column(scaling.loc[scaling["series"] == series, "scaling_mode"])
    values = (r[eff], r[f"{eff}_ci_low"], r[f"{eff}_ci_high"])
    return {f"{prefix}{k}": float(v) for k, v in zip(keys, values, strict=True)}
