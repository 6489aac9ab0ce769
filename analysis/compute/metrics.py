"""Scaling metrics: pure functions from the runs frame to tables of numbers.

Vocabulary
----------
series
    Runs that differ only in scale: same ``config_name``, workload, scaling mode, precision,
    accelerator, device model, cluster, the batch size the scaling mode holds constant
    (global for strong scaling, per device for weak), number of epochs and workload
    parameters. Runs on another GPU model or another cluster never share a baseline. A
    series whose runs used different code or library versions is flagged
    (``mixed_versions``), not split.
group
    One scale of a series (``nodes`` x ``devices_per_node``; 2 nodes x 4 and 1 node x 8 are
    two groups): its repetitions are aggregated.
baseline
    The group every other group of its series is compared with: the 1-device group, else
    the smallest world size present (fewest nodes first), unless one is chosen explicitly.
p
    Relative scale ``world_size / baseline world_size``.

Formulas (means over repetitions)
---------------------------------
The headline is the steady state: X = ``steady_samples_per_s``, the throughput after the
warm-up (``trainer.warmup_steps``: the first epoch, at most 200 steps, by default).

* speedup S = mean X / mean X_baseline; parallel efficiency E = S / p. Under strong scaling
  (the same global batches at every scale) this equals the ratio of steady-state times for
  the same steps; under weak scaling it is the scaled speedup, and E the weak-scaling
  efficiency.
* per-device throughput efficiency = mean (X / world_size) / mean (X_baseline / baseline
  world_size)
* steady-state MFU: ``steady_mfu`` averaged per group (None where the peak is unknown)
* whole-training variants, labelled as such: the same ratios from ``samples_per_s`` over
  all training steps, warm-up included (``whole_train_speedup``/``_efficiency``)
* job-time speedup and efficiency: mean ``job_time_s``_baseline / mean ``job_time_s``,
  start-up included
* A group whose runs (or whose baseline's runs) lack a steady state (training ended within
  the warm-up, or records from before it existed) falls back to the whole-training figures,
  and ``headline_basis`` says so.
* Karp-Flatt serial fraction e = (1/S - 1/p) / (1 - 1/p), for p > 1 (strong scaling),
  only where 1 < S <= p: a slowdown or a superlinear speedup has no serial fraction, and
  the value is NaN with ``karp_flatt_note`` saying why
* Amdahl: 1/S = f + (1 - f)/p, fitted by least squares (see :func:`amdahl_fit`), with the
  t-interval f -/+ t_{(1+c)/2, m-1} SE(f) over the m scaled points; withheld (NaN, with
  ``fit_note``) when f falls outside [0, 1]

Intervals (two-sided, 95% unless ``confidence`` says otherwise): a group's mean has a
Student-t interval (n >= 2); for times and rates (strictly positive) it is the t-interval of
the log values, back-transformed, i.e. an interval of the geometric mean that never goes
below zero (:func:`analysis.compute.stats.summarize`). A ratio of two
group means (speedup, efficiency, throughput ratios) has a delta-method interval on its
logarithm with Welch-Satterthwaite degrees of freedom (:func:`analysis.compute.stats.ratio_ci`);
both groups need n >= 2, otherwise no interval is given. The baseline's own speedup is 1
by definition and carries no interval.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.compute.stats import Summary, ratio_ci, summarize, t_ppf
from analysis.read.frame import SCALE_KEYS, SERIES_KEYS, STAT_COLUMNS

VERSION_PREFIX = "version_"
"""Runs frame columns ``version_<package>`` (scalescope, torch, lightning, ...)."""
WARMUP_SHARE_NOTE = 0.25
"""A warm-up above this share of training time is called out: train longer."""
STATS = ("mean", "median", "gmean", "std", "min", "max", "ci_low", "ci_high", "cv")
EFFICIENCY_REFERENCE = 0.75
"""The efficiency the charts draw a line at, and below which the projection calls a scale out
(the N where the curve falls under it)."""

DEFAULT_CONFIDENCE = 0.95
DEFAULT_CV_THRESHOLD = 0.10
DEFAULT_LOSS_TOLERANCE = 0.05
"""Relative: a group's final validation loss more than 5 % above the baseline's is flagged."""
DEFAULT_ACC_TOLERANCE = 0.01
"""Absolute: a final validation accuracy more than 1 point below the baseline's is flagged."""
PREDICT_FACTORS = (2, 4)
SUPERLINEAR_EFFICIENCY = 1.10
"""Parallel efficiency above this is called out: it is more often a measurement problem."""


# --- labels -----------------------------------------------------------------------------------


def precision_label(precision: Any) -> str:
    text = str(precision)
    return f"fp{text}" if text.isdigit() else text


def accumulation_label(accumulate: Any) -> str:
    """`` · 4 micro-batches/step`` for gradient accumulation; nothing without it."""
    k = _key_value(accumulate)
    return f" · {int(k)} micro-batches/step" if k is not None and int(k) > 1 else ""


def _key_value(value: Any) -> Any:
    return (
        None
        if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA
        else value
    )


def series_labels(keys: Sequence[tuple[Any, ...]]) -> dict[tuple[Any, ...], str]:
    """A short readable name per series key: ``spiral · strong · fp32``; accelerator, batch
    size, epochs and workload parameters are appended only where they tell series apart."""
    base: dict[tuple[Any, ...], str] = {}
    for key in keys:
        k = dict(zip(SERIES_KEYS, key, strict=True))
        name = str(k["config_name"])
        if k["workload"] is not None and k["workload"] != k["config_name"]:
            name += f" [{k['workload']}]"
        base[key] = f"{name} · {k['scaling_mode']} · {precision_label(k['precision'])}"
        base[key] += accumulation_label(k["accumulate_grad_batches"])
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


def efficiency_column(scaling_modes: Iterable[Any]) -> str:
    """The scaling table's headline efficiency of a series: the per-device throughput
    efficiency when it scales weakly (every row weak), else the parallel efficiency S / p."""
    weak = all(m == "weak" for m in scaling_modes)
    return "per_device_throughput_efficiency" if weak else "parallel_efficiency"


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


def positive_quantity(column: str) -> bool:
    """Times (``_s``) and rates (``_per_s``) are strictly positive: their intervals are taken
    on the log scale (:func:`analysis.compute.stats.summarize`), so they never go below zero."""
    return re.search(r"_(s|per_s)(_|$)", column) is not None


def series_keys(runs: pd.DataFrame) -> list[tuple[Any, ...]]:
    """The series key of every row, missing values as None (column-wise: no row objects)."""
    columns = [runs[k].tolist() for k in SERIES_KEYS]
    return [tuple(_key_value(v) for v in values) for values in zip(*columns, strict=True)]


def _grouped(runs: pd.DataFrame) -> list[tuple[tuple[Any, int, int, int], pd.DataFrame]]:
    buckets: dict[tuple[Any, int, int, int], list[int]] = {}
    scales = zip(*(runs[k].tolist() for k in SCALE_KEYS), strict=True)
    for pos, (key, scale) in enumerate(zip(series_keys(runs), scales, strict=True)):
        if any(_key_value(v) is None for v in scale):
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
        row: dict[str, Any] = {"series": labels[g.series_key]}
        row.update(zip(SERIES_KEYS, g.series_key, strict=True))
        row.update(nodes=g.nodes, devices_per_node=g.devices_per_node, world_size=g.world_size)
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


# --- baseline ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BaselineSpec:
    """A requested baseline scale: a world size, or nodes x devices per node."""

    world_size: int | None = None
    nodes: int | None = None
    devices_per_node: int | None = None

    @classmethod
    def parse(cls, text: str) -> BaselineSpec:
        """``4`` (world size 4) or ``1x4`` (1 node x 4 devices)."""
        m = re.fullmatch(r"\s*(\d+)\s*(?:[xX×]\s*(\d+))?\s*", text)
        if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < 1):
            raise ValueError(
                f"baseline {text!r}: expected a world size (4) or nodes x devices (1x4)"
            )
        if m.group(2):
            nodes, dpn = int(m.group(1)), int(m.group(2))
            return cls(nodes * dpn, nodes, dpn)
        return cls(world_size=int(m.group(1)))

    def matches(self, g: ScaleGroup) -> bool:
        if self.nodes is not None:
            return g.nodes == self.nodes and g.devices_per_node == self.devices_per_node
        return g.world_size == self.world_size

    def __str__(self) -> str:
        if self.nodes is not None:
            return f"{self.nodes}x{self.devices_per_node}"
        return f"world size {self.world_size}"


def pick_baseline(
    groups: Sequence[ScaleGroup], spec: BaselineSpec | None
) -> tuple[ScaleGroup, str]:
    """The baseline group of one series and a sentence saying how it was chosen."""
    ordered = sorted(groups, key=lambda g: (g.world_size, g.nodes))
    if spec is not None:
        chosen = [g for g in ordered if spec.matches(g)]
        if chosen:
            return chosen[0], f"baseline chosen with --baseline {spec}"
        fallback = "1-device run" if ordered[0].world_size == 1 else "smallest world size present"
        return ordered[0], f"--baseline {spec} not measured here; baseline is the {fallback}"
    if ordered[0].world_size == 1:
        return ordered[0], "1-device run"
    return ordered[0], (
        f"no 1-device run; baseline is the smallest world size present "
        f"({ordered[0].world_size}), so speedups are relative to it"
    )


# --- scaling ----------------------------------------------------------------------------------


NO_SPEEDUP = "no speedup (S <= 1): a serial fraction is undefined"
SUPERLINEAR = "superlinear speedup (S > p): a serial fraction is undefined"
_UNIT_TOLERANCE = 1e-9
"""Rounding slack around [0, 1]: perfect scaling must give 0, not 'undefined'."""


def _unit_fraction(x: float) -> float:
    """``x`` clipped to [0, 1] when within rounding of it, else NaN."""
    if math.isnan(x) or not -_UNIT_TOLERANCE <= x <= 1.0 + _UNIT_TOLERANCE:
        return math.nan
    return min(1.0, max(0.0, x))


def karp_flatt_note(speedup: float, p: float) -> str:
    """Why :func:`karp_flatt` gives no number for this point ('' when it gives one)."""
    if not p > 1:
        return "baseline scale" if p == 1 else "below the baseline scale"
    if math.isnan(speedup):
        return "no speedup measured"
    if speedup <= 1:
        return NO_SPEEDUP
    if speedup > p * (1 + _UNIT_TOLERANCE):
        return SUPERLINEAR
    return ""


def karp_flatt(speedup: float, p: float) -> float:
    """Experimentally determined serial fraction e = (1/S - 1/p) / (1 - 1/p).

    0 for perfect scaling (S = p), towards 1 as adding processors gains nothing. Only
    defined for 1 < S <= p with p > 1: a slowdown (S <= 1) would give e >= 1 and a
    superlinear speedup e < 0, neither of which is a serial fraction, so both are NaN
    (:func:`karp_flatt_note` says why).
    """
    if karp_flatt_note(speedup, p):
        return math.nan
    return _unit_fraction((1.0 / speedup - 1.0 / p) / (1.0 - 1.0 / p))


def _parity(
    loss: float, loss_b: float, acc: float, acc_b: float, loss_tol: float, acc_tol: float
) -> tuple[float, float, str]:
    loss_delta = (loss - loss_b) / abs(loss_b) if loss_b and not math.isnan(loss_b) else math.nan
    acc_delta = acc - acc_b
    worse = []
    if loss_delta > loss_tol:
        worse.append("loss")
    if acc_delta < -acc_tol:
        worse.append("accuracy")
    if worse:
        verdict = "worse " + " and ".join(worse)
    elif math.isnan(loss_delta) and math.isnan(acc_delta):
        verdict = "n/a"
    else:
        verdict = "ok"
    return loss_delta, acc_delta, verdict


def scaling_table(
    runs: pd.DataFrame,
    *,
    baseline: BaselineSpec | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    cv_threshold: float = DEFAULT_CV_THRESHOLD,
    loss_tolerance: float = DEFAULT_LOSS_TOLERANCE,
    acc_tolerance: float = DEFAULT_ACC_TOLERANCE,
) -> pd.DataFrame:
    """One row per group with its baseline and every scaling metric (see the module doc).

    Columns: :data:`SCALING_COLUMNS`. ``samples_per_s_mean``, ``speedup``,
    ``parallel_efficiency``, ``per_device_throughput_efficiency`` and ``mfu_mean`` are the
    headline (steady state, see ``headline_basis``); ``whole_train_*`` and ``job_time_*``
    are the labelled whole-training and whole-job variants. ``n`` counts the runs the
    headline uses; ``karp_flatt_note`` says why ``karp_flatt`` is NaN; ``headline_cv`` is
    the coefficient of variation of the headline throughput.
    """
    groups = scale_groups(runs, confidence)
    labels = series_labels([g.series_key for g in groups])
    by_series: dict[tuple[Any, ...], list[ScaleGroup]] = {}
    for g in groups:
        by_series.setdefault(g.series_key, []).append(g)
    rows = []
    for key, members in by_series.items():
        base, note = pick_baseline(members, baseline)
        mixed = mixed_versions(pd.concat([g.rows for g in members]))
        bj = base.stats["job_time_s"]
        for g in members:
            p = g.world_size / base.world_size
            is_base = g is base
            x, xd, basis = headline_columns(g, base)
            j = g.stats["job_time_s"]
            if is_base:
                speed = pde = (1.0, math.nan, math.nan)
                job_speed = whole = 1.0
            else:
                speed = ratio_ci(g.stats[x], base.stats[x], confidence)
                pde = ratio_ci(g.stats[xd], base.stats[xd], confidence)
                job_speed = bj.mean / j.mean if j.mean else math.nan
                whole = _ratio(g.stats["samples_per_s"].mean, base.stats["samples_per_s"].mean)
            loss_delta, acc_delta, parity = _parity(
                g.stats["val_loss_final"].mean,
                base.stats["val_loss_final"].mean,
                g.stats["val_acc_final"].mean,
                base.stats["val_acc_final"].mean,
                loss_tolerance,
                acc_tolerance,
            )
            cv = g.stats[x].cv
            row: dict[str, Any] = {"series": labels[key]}
            row.update(zip(SERIES_KEYS, key, strict=True))
            row.update(
                nodes=g.nodes,
                devices_per_node=g.devices_per_node,
                world_size=g.world_size,
                n=g.stats[x].n,
                baseline_nodes=base.nodes,
                baseline_devices_per_node=base.devices_per_node,
                baseline_world_size=base.world_size,
                baseline_n=base.stats[x].n,
                baseline_note=note,
                is_baseline=is_base,
                relative_scale=p,
                headline_basis=basis,
                train_time_s_mean=g.stats["train_time_s"].mean,
                steady_time_s_mean=g.stats["steady_time_s"].mean,
                job_time_s_mean=j.mean,
                samples_per_s_mean=g.stats[x].mean,
                samples_per_s_per_device_mean=g.stats[xd].mean,
                whole_train_samples_per_s_mean=g.stats["samples_per_s"].mean,
                mfu_mean=g.stats["steady_mfu" if x.startswith("steady") else "mfu"].mean,
                warmup_share_mean=g.stats["warmup_share"].mean,
                speedup=speed[0],
                speedup_ci_low=speed[1],
                speedup_ci_high=speed[2],
                parallel_efficiency=speed[0] / p,
                parallel_efficiency_ci_low=speed[1] / p,
                parallel_efficiency_ci_high=speed[2] / p,
                karp_flatt=karp_flatt(speed[0], p) if key[2] != "weak" else math.nan,
                karp_flatt_note=(
                    karp_flatt_note(speed[0], p) if key[2] != "weak" else "weak scaling"
                ),
                whole_train_speedup=whole,
                whole_train_efficiency=whole / p,
                job_time_speedup=job_speed,
                job_time_efficiency=job_speed / p,
                per_device_throughput_efficiency=pde[0],
                per_device_throughput_efficiency_ci_low=pde[1],
                per_device_throughput_efficiency_ci_high=pde[2],
                val_loss_final_mean=g.stats["val_loss_final"].mean,
                val_loss_final_min=g.stats["val_loss_final"].min,
                val_loss_final_max=g.stats["val_loss_final"].max,
                val_loss_delta_rel=loss_delta,
                val_acc_final_mean=g.stats["val_acc_final"].mean,
                val_acc_delta=acc_delta,
                parity=parity,
                high_variance=bool(cv > cv_threshold) if not math.isnan(cv) else False,
                headline_cv=cv,
                mixed_versions=mixed,
            )
            rows.append(row)
    return pd.DataFrame(rows, columns=SCALING_COLUMNS)


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


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


def mixed_versions(rows: pd.DataFrame) -> str:
    """``torch 2.4.0/2.5.1; scalescope 0.1.0/0.2.0`` for every package whose version differs
    between the rows of one series, '' when they agree (missing versions are not counted)."""
    parts = []
    for col in sorted(c for c in rows.columns if c.startswith(VERSION_PREFIX)):
        seen = sorted({str(v) for v in rows[col].tolist() if _key_value(v) is not None})
        if len(seen) > 1:
            parts.append(f"{col[len(VERSION_PREFIX) :]} {'/'.join(seen)}")
    return "; ".join(parts)


SCALING_COLUMNS = [
    "series",
    *SERIES_KEYS,
    *SCALE_KEYS,
    "n",
    "baseline_nodes",
    "baseline_devices_per_node",
    "baseline_world_size",
    "baseline_n",
    "baseline_note",
    "is_baseline",
    "relative_scale",
    "headline_basis",
    "train_time_s_mean",
    "steady_time_s_mean",
    "job_time_s_mean",
    "samples_per_s_mean",
    "samples_per_s_per_device_mean",
    "whole_train_samples_per_s_mean",
    "mfu_mean",
    "warmup_share_mean",
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "parallel_efficiency",
    "parallel_efficiency_ci_low",
    "parallel_efficiency_ci_high",
    "karp_flatt",
    "karp_flatt_note",
    "whole_train_speedup",
    "whole_train_efficiency",
    "job_time_speedup",
    "job_time_efficiency",
    "per_device_throughput_efficiency",
    "per_device_throughput_efficiency_ci_low",
    "per_device_throughput_efficiency_ci_high",
    "val_loss_final_mean",
    "val_loss_final_min",
    "val_loss_final_max",
    "val_loss_delta_rel",
    "val_acc_final_mean",
    "val_acc_delta",
    "parity",
    "high_variance",
    "headline_cv",
    "mixed_versions",
]


# --- Amdahl -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AmdahlFit:
    """Serial fraction f of Amdahl's law 1/S = f + (1 - f)/p fitted to measured speedups."""

    serial_fraction: float
    """As fitted: may lie outside [0, 1] (see :func:`amdahl_table` for what is shown)."""
    stderr: float
    """Standard error of f from the residuals; NaN with fewer than two scaled points."""
    points: int

    @property
    def df(self) -> int:
        """Residual degrees of freedom: m points, one parameter."""
        return self.points - 1

    def interval(self, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float]:
        """Two-sided t-interval of f: f -/+ t_{(1+c)/2, m-1} * SE(f); NaN without an SE."""
        if math.isnan(self.stderr) or self.df < 1:
            return math.nan, math.nan
        half = t_ppf(0.5 + confidence / 2.0, self.df) * self.stderr
        return self.serial_fraction - half, self.serial_fraction + half

    def speedup(self, p: float, f: float | None = None) -> float:
        f = self.serial_fraction if f is None else f
        return 1.0 / (f + (1.0 - f) / p)


def amdahl_fit(p: Sequence[float], speedup: Sequence[float]) -> AmdahlFit:
    """Least squares of y = 1/S on x = 1/p under the constraint S(1) = 1.

    With the constraint, y - x = f (1 - x): a regression through the origin, so
    f = sum((1 - x)(y - x)) / sum((1 - x)^2) and, over the m points with p != 1,
    SE(f) = sqrt(sum(residual^2) / (m - 1) / sum((1 - x)^2)). Points at p = 1 carry no
    information and are ignored. The fit is returned as computed; f < 0 (better than
    linear) and f > 1 (slower than one device) are not serial fractions, and
    :func:`amdahl_table` withholds them.
    """
    pts = [
        (1.0 / pi, 1.0 / si)
        for pi, si in zip(p, speedup, strict=True)
        if pi > 0 and si > 0 and math.isfinite(si) and pi != 1
    ]
    m = len(pts)
    if m == 0:
        return AmdahlFit(math.nan, math.nan, 0)
    sxx = math.fsum((1 - x) ** 2 for x, _ in pts)
    f = math.fsum((1 - x) * (y - x) for x, y in pts) / sxx
    if m < 2:
        return AmdahlFit(f, math.nan, m)
    ssr = math.fsum((y - x - f * (1 - x)) ** 2 for x, y in pts)
    return AmdahlFit(f, math.sqrt(ssr / (m - 1) / sxx), m)


def _fit_note(fit: AmdahlFit, speedups: Sequence[float]) -> str:
    """Why the fit gives no serial fraction ('' when it gives one)."""
    if fit.points == 0:
        return "no scaled point"
    if fit.serial_fraction > 1 + _UNIT_TOLERANCE or all(s <= 1 for s in speedups):
        return NO_SPEEDUP
    if fit.serial_fraction < -_UNIT_TOLERANCE:
        return "superlinear speedup (f < 0): a serial fraction is undefined"
    return ""


def amdahl_table(scaling: pd.DataFrame, confidence: float = DEFAULT_CONFIDENCE) -> pd.DataFrame:
    """Per strong-scaling series: the fit, the t-interval of f at ``confidence`` and
    predictions at 2x and 4x the largest measured world size (speedup and efficiency
    relative to the baseline; the range is the speedup at the ends of f's interval, kept
    within [0, 1]).

    A fitted f outside [0, 1] is no serial fraction: ``serial_fraction`` and every
    prediction are NaN then, and ``fit_note`` says why (no speedup, superlinear)."""
    rows = []
    if not scaling.empty:
        for series, part in scaling.groupby("series", sort=False):
            if (part["scaling_mode"] == "weak").all():
                continue
            scaled = part[part["relative_scale"] != 1]
            fit = amdahl_fit(part["relative_scale"].tolist(), part["speedup"].tolist())
            base_world = int(part["baseline_world_size"].iloc[0])
            max_world = int(part["world_size"].max())
            note = _fit_note(fit, scaled["speedup"].dropna().tolist())
            usable = not note
            f = _unit_fraction(fit.serial_fraction) if usable else math.nan
            low_f, high_f = fit.interval(confidence) if usable else (math.nan, math.nan)
            if not math.isnan(low_f):
                low_f, high_f = max(0.0, low_f), min(1.0, high_f)
            if usable and fit.points == 1:
                note = "one scaled point: exact fit, no interval"
            row: dict[str, Any] = {
                "series": series,
                "baseline_world_size": base_world,
                "max_world_size": max_world,
                "points": fit.points,
                "serial_fraction": f,
                "serial_fraction_se": fit.stderr if usable else math.nan,
                "serial_fraction_ci_low": low_f,
                "serial_fraction_ci_high": high_f,
                "fit_note": note,
            }
            for k in PREDICT_FACTORS:
                world = k * max_world
                p = world / base_world
                s = fit.speedup(p, f) if usable else math.nan
                if not math.isnan(low_f):
                    low, high = fit.speedup(p, high_f), fit.speedup(p, low_f)
                else:
                    low = high = math.nan
                row[f"world_size_{k}x"] = world
                row[f"predicted_speedup_{k}x"] = s
                row[f"predicted_speedup_{k}x_low"] = low
                row[f"predicted_speedup_{k}x_high"] = high
                row[f"predicted_efficiency_{k}x"] = s / p
            rows.append(row)
    cols = [
        "series",
        "baseline_world_size",
        "max_world_size",
        "points",
        "serial_fraction",
        "serial_fraction_se",
        "serial_fraction_ci_low",
        "serial_fraction_ci_high",
        "fit_note",
    ]
    for k in PREDICT_FACTORS:
        cols += [
            f"world_size_{k}x",
            f"predicted_speedup_{k}x",
            f"predicted_speedup_{k}x_low",
            f"predicted_speedup_{k}x_high",
            f"predicted_efficiency_{k}x",
        ]
    return pd.DataFrame(rows, columns=cols)


def serial_fraction_notes(scaling: pd.DataFrame, amdahl: pd.DataFrame) -> list[str]:
    """A sentence per strong-scaling series whose Amdahl fit is withheld for lack of speedup."""
    notes = []
    for _, row in amdahl.iterrows():
        if row["fit_note"] == NO_SPEEDUP:
            notes.append(
                f"{row['series']}: no scale is faster than the baseline, so there is no serial "
                "fraction to report (Karp-Flatt and the Amdahl fit are left out)."
            )
    return notes


# --- everything at once -----------------------------------------------------------------------


# --- mixed precision vs fp32 ----------------------------------------------------------------

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
        x, _, basis = headline_columns(g, base)
        speed = ratio_ci(g.stats[x], base.stats[x], confidence)
        mem, base_mem = (
            _mean_recorded(g.rows, "peak_mem_gib_max"),
            _mean_recorded(base.rows, "peak_mem_gib_max"),
        )
        loss, base_loss = g.stats["val_loss_final"].mean, base.stats["val_loss_final"].mean
        row: dict[str, Any] = {
            "series": labels[g.series_key],
            "fp32_series": labels[base.series_key],
        }
        row.update(zip(SERIES_KEYS, g.series_key, strict=True))
        row.update(
            nodes=g.nodes,
            devices_per_node=g.devices_per_node,
            world_size=g.world_size,
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
            peak_mem_ratio=_ratio(mem, base_mem),
            val_loss_final_mean=loss,
            fp32_val_loss_final_mean=base_loss,
            val_loss_rel_diff=_ratio(loss - base_loss, base_loss),
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=PRECISION_COLUMNS)
