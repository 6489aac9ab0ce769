"""Series and scale groups: the runs frame grouped as :mod:`analysis.compute.metrics` defines
them (series, group), the labels that name them, each group's statistics and the columns its
headline uses. Pure: frames in, frames out.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.compute.stats import Summary, summarize
from analysis.read.frame import (
    SCALE_KEYS,
    SERIES_KEY_COLUMNS,
    SERIES_KEY_DEFAULTS,
    SERIES_KEYS,
    STAT_COLUMNS,
    named,
)

STATS = ("mean", "median", "gmean", "std", "min", "max", "ci_low", "ci_high", "cv")
DEFAULT_CONFIDENCE = 0.95
DEFAULT_CV_THRESHOLD = 0.10


# --- labels -----------------------------------------------------------------------------------


def precision_label(precision: Any) -> str:
    text = str(precision)
    return f"fp{text}" if text.isdigit() else text


def accumulation_label(accumulate: Any) -> str:
    """`` · 4 micro-batches/step`` for gradient accumulation; nothing without it."""
    k = key_value(accumulate)
    return f" · {int(k)} micro-batches/step" if k is not None and int(k) > 1 else ""


def strategy_label(strategy: Any) -> str:
    """`` · fsdp`` for a sharded series; nothing for DDP (the default, and every record made
    before the strategy was recorded), so DDP's labels read as they always have."""
    s = key_value(strategy)
    return f" · {s}" if s is not None and s != "ddp" else ""


def key_value(value: Any) -> Any:
    """A key field's value, with every form of missing (None, NaN, pd.NA) as None."""
    return (
        None
        if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA
        else value
    )


def series_labels(keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], str]:
    """A short readable name per series key: ``spiral · strong · fp32`` (``· fsdp`` for a
    sharded series); accelerator, batch
    size, epochs and workload parameters are appended only where they tell series apart."""
    base: dict[tuple[Any, ...], str] = {}
    for key in keys:
        k = dict(zip(SERIES_KEYS, key, strict=True))
        name = str(k["config_name"])
        if k["workload"] is not None and k["workload"] != k["config_name"]:
            name += f" [{k['workload']}]"
        base[key] = f"{name} · {k['scaling_mode']} · {precision_label(k['precision'])}"
        base[key] += accumulation_label(k["accumulate_grad_batches"])
        base[key] += strategy_label(k["strategy"])
    labels: dict[tuple[Any, ...], str] = {}
    for key, label in base.items():
        clash = [other for other, lab in base.items() if lab == label]
        extra = []
        for field_name, fmt in (
            ("accelerator", "{}"),
            ("device_name", "{}"),
            ("cluster", "on {}"),
            ("held_batch_size", "batch {}"),
            ("epochs", "{} epochs"),
            ("max_steps", "at most {} steps"),
        ):
            i = SERIES_KEYS.index(field_name)
            if len({c[i] for c in clash}) > 1:
                extra.append(fmt.format(key[i]))
        extra += _param_differences(key, clash)
        labels[key] = " · ".join([label, *extra])
    return labels


def _param_differences(key: tuple[Any, ...], clash: Sequence[tuple[Any, ...]]) -> list[str]:
    """``num_samples=4000`` for each workload parameter that differs within ``clash``."""
    i = SERIES_KEYS.index("workload_params")
    if len({c[i] for c in clash}) < 2:
        return []

    def params(k: tuple[Any, ...]) -> dict[str, Any]:
        try:
            value = json.loads(k[i] or "{}")
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    mine = params(key)
    others = [params(c) for c in clash]
    names = sorted({n for p in others for n in p})
    differing = [
        n for n in names if len({json.dumps(p.get(n), sort_keys=True) for p in others}) > 1
    ]
    return [f"{n}={json.dumps(mine.get(n), separators=(',', ':'))}" for n in differing]


def natural_key(text: Any) -> tuple[Any, ...]:
    """Sort job ids as numbers where they are numbers: 9 before 10, ``12_3`` after ``12_2``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(text)))


# --- grouping ---------------------------------------------------------------------------------


@dataclass
class ScaleGroup:
    series_key: tuple[Any, ...]
    nodes: int
    devices_per_node: int
    world_size: int
    rows: pd.DataFrame
    stats: dict[str, Summary] = field(default_factory=dict)

    def clusters(self) -> list[str]:
        """The clusters its runs' records name, sorted (none where they name none)."""
        return named(self.rows, "cluster")


def scale_groups(runs: pd.DataFrame, confidence: float) -> list[ScaleGroup]:
    """Groups in a canonical order (series key, world size, nodes) whatever the row order."""
    out: list[ScaleGroup] = []
    if runs.empty:
        return out
    for (key, nodes, dpn, world), rows in _grouped(runs):
        g = ScaleGroup(key, nodes, dpn, world, rows)
        for col in STAT_COLUMNS:
            values = rows[col].tolist() if col in rows else []
            g.stats[col] = summarize(values, confidence, log_scale=positive_quantity(col))
        out.append(g)
    return out


def series_scale_groups(
    runs: pd.DataFrame, confidence: float
) -> list[tuple[tuple[Any, ...], str, list[ScaleGroup]]]:
    """(series key, its label, its scale groups) per series, in canonical order: what the
    waterfall and the projection walk."""
    groups = scale_groups(runs, confidence)
    labels = series_labels([g.series_key for g in groups])
    by_series: dict[tuple[Any, ...], list[ScaleGroup]] = {}
    for g in groups:
        by_series.setdefault(g.series_key, []).append(g)
    return [(key, labels[key], members) for key, members in by_series.items()]


def efficiency_column(scaling_modes: Iterable[Any]) -> str:
    """The scaling table's headline efficiency of a series: the per-device throughput
    efficiency when it scales weakly (every row weak), else the parallel efficiency S / p."""
    weak = all(m == "weak" for m in scaling_modes)
    return "per_device_throughput_efficiency" if weak else "parallel_efficiency"


def positive_quantity(column: str) -> bool:
    """Times (``_s``) and rates (``_per_s``) are strictly positive: their intervals are taken
    on the log scale (:func:`analysis.compute.stats.summarize`), so they never go below zero."""
    return re.search(r"_(s|per_s)(_|$)", column) is not None


def series_keys(runs: pd.DataFrame) -> list[tuple[Any, ...]]:
    """The series key of every row, missing values as None (column-wise: no row objects).
    A field is read from its column of :data:`SERIES_KEY_COLUMNS` where the frame has it (the
    runs frame; a groups frame holds the key's own values)."""
    columns = [_key_column(runs, k) for k in SERIES_KEYS]
    return [tuple(key_value(v) for v in values) for values in zip(*columns, strict=True)]


def _key_column(runs: pd.DataFrame, field_name: str) -> list[Any]:
    source = SERIES_KEY_COLUMNS.get(field_name, field_name)
    if source in runs:
        return runs[source].tolist()
    if field_name in runs or field_name not in SERIES_KEY_DEFAULTS:
        return runs[field_name].tolist()
    return [SERIES_KEY_DEFAULTS[field_name]] * len(runs)


def _grouped(runs: pd.DataFrame) -> list[tuple[tuple[Any, int, int, int], pd.DataFrame]]:
    buckets: dict[tuple[Any, int, int, int], list[int]] = {}
    scales = zip(*(runs[k].tolist() for k in SCALE_KEYS), strict=True)
    for pos, (key, scale) in enumerate(zip(series_keys(runs), scales, strict=True)):
        if any(key_value(v) is None for v in scale):
            continue  # a record with a mistyped scale cannot be placed on any axis
        nodes, dpn, world = (int(v) for v in scale)
        buckets.setdefault((key, nodes, dpn, world), []).append(pos)

    def order(item: tuple[tuple[Any, int, int, int], list[int]]) -> tuple[Any, ...]:
        (key, nodes, dpn, world), _ = item
        return (tuple(str(v) for v in key), world, nodes, dpn)

    return [(k, runs.iloc[pos]) for k, pos in sorted(buckets.items(), key=order)]


def group_stats(
    runs: pd.DataFrame,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    cv_threshold: float = DEFAULT_CV_THRESHOLD,
) -> pd.DataFrame:
    """One row per group: n, the job ids and, per measured column, ``<col>_<stat>`` for stat
    in mean, median, gmean, std, min, max, ci_low, ci_high, cv (std/mean). The interval is
    the t-interval of the mean, except for times and rates (:func:`positive_quantity`):
    there it is the t-interval of the log values, back-transformed (around ``gmean``).
    ``high_variance`` flags a training-time CV above ``cv_threshold``."""
    groups = scale_groups(runs, confidence)
    labels = series_labels([g.series_key for g in groups])
    rows = []
    for g in groups:
        row = group_row(labels[g.series_key], g)
        row["n"] = g.stats["train_time_s"].n
        row["job_ids"] = ",".join(sorted(g.rows["job_id"].astype(str), key=natural_key))
        for col in STAT_COLUMNS:
            s = g.stats[col]
            for stat in STATS:
                row[f"{col}_{stat}"] = getattr(s, stat)
        cv = g.stats["train_time_s"].cv
        row["high_variance"] = bool(cv > cv_threshold) if not math.isnan(cv) else False
        rows.append(row)
    return pd.DataFrame(rows, columns=_group_columns())


def _group_columns() -> list[str]:
    cols = ["series", *SERIES_KEYS, *SCALE_KEYS, "n", "job_ids"]
    cols += [f"{c}_{s}" for c in STAT_COLUMNS for s in STATS]
    return [*cols, "high_variance"]


def group_row(label: str, g: ScaleGroup) -> dict[str, Any]:
    """The columns that name a group in a table: its series' label and key fields, its scale."""
    row: dict[str, Any] = {"series": label}
    row.update(zip(SERIES_KEYS, g.series_key, strict=True))
    row.update(nodes=g.nodes, devices_per_node=g.devices_per_node, world_size=g.world_size)
    return row


# --- a group's headline -----------------------------------------------------------------------


STEADY = "steady state"
WHOLE = "whole training (no steady state recorded)"


def headline_columns(g: ScaleGroup, base: ScaleGroup) -> tuple[str, str, str]:
    """(throughput column, per-device column, basis) of a group's headline: the steady
    state when every run of the group and of its baseline has one, else whole training (the
    two are never mixed within one ratio)."""
    steady = all(
        m.stats["steady_samples_per_s"].n == m.stats["samples_per_s"].n > 0 for m in (g, base)
    )
    if steady:
        return "steady_samples_per_s", "steady_samples_per_s_per_device", STEADY
    return "samples_per_s", "samples_per_s_per_device", WHOLE
