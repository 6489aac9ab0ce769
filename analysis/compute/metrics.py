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

This module holds the baseline and the scaling table. The grouping, labels and group
statistics are :mod:`analysis.compute.groups`', Karp-Flatt and Amdahl
:mod:`analysis.compute.amdahl`'s, the mixed-precision comparison
:mod:`analysis.compute.precision`'s; their public names can be imported from here as well.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.compute.amdahl import (
    NO_SPEEDUP,
    PREDICT_FACTORS,
    SUPERLINEAR,
    AmdahlFit,
    amdahl_fit,
    amdahl_table,
    karp_flatt,
    karp_flatt_note,
    serial_fraction_notes,
)
from analysis.compute.groups import (
    DEFAULT_CONFIDENCE,
    DEFAULT_CV_THRESHOLD,
    STATS,
    STEADY,
    WHOLE,
    ScaleGroup,
    accumulation_label,
    efficiency_column,
    group_row,
    group_stats,
    headline_columns,
    key_value,
    natural_key,
    positive_quantity,
    precision_label,
    scale_groups,
    series_keys,
    series_labels,
    series_scale_groups,
)
from analysis.compute.precision import FP32, PRECISION_COLUMNS, precision_table
from analysis.compute.stats import ratio_ci, ratio_or_nan
from analysis.read.frame import SCALE_KEYS, SERIES_KEYS

VERSION_PREFIX = "version_"
"""Runs frame columns ``version_<package>`` (scalescope, torch, lightning, ...)."""
WARMUP_SHARE_NOTE = 0.25
"""A warm-up above this share of training time is called out: train longer."""
EFFICIENCY_REFERENCE = 0.75
"""The efficiency the charts draw a line at, and below which the projection calls a scale out
(the N where the curve falls under it)."""

DEFAULT_LOSS_TOLERANCE = 0.05
"""Relative: a group's final validation loss more than 5 % above the baseline's is flagged."""
DEFAULT_ACC_TOLERANCE = 0.01
"""Absolute: a final validation accuracy more than 1 point below the baseline's is flagged."""
SUPERLINEAR_EFFICIENCY = 1.10
"""Parallel efficiency above this is called out: it is more often a measurement problem."""


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
    rows = []
    for _key, label, members in series_scale_groups(runs, confidence):
        base, note = pick_baseline(members, baseline)
        mixed = mixed_versions(pd.concat([g.rows for g in members]))
        for g in members:
            row = group_row(label, g)
            row.update(
                baseline_nodes=base.nodes,
                baseline_devices_per_node=base.devices_per_node,
                baseline_world_size=base.world_size,
                baseline_note=note,
                is_baseline=g is base,
            )
            row.update(_headline(g, base, confidence, cv_threshold))
            row.update(_quality(g, base, loss_tolerance, acc_tolerance))
            row["mixed_versions"] = mixed
            rows.append(row)
    return pd.DataFrame(rows, columns=SCALING_COLUMNS)


def _headline(
    g: ScaleGroup, base: ScaleGroup, confidence: float, cv_threshold: float
) -> dict[str, Any]:
    """A group's means and its speedups and efficiencies against ``base``."""
    p = g.world_size / base.world_size
    x, xd, basis = headline_columns(g, base)
    cv = g.stats[x].cv
    return dict(
        n=g.stats[x].n,
        baseline_n=base.stats[x].n,
        relative_scale=p,
        headline_basis=basis,
        train_time_s_mean=g.stats["train_time_s"].mean,
        steady_time_s_mean=g.stats["steady_time_s"].mean,
        job_time_s_mean=g.stats["job_time_s"].mean,
        samples_per_s_mean=g.stats[x].mean,
        samples_per_s_per_device_mean=g.stats[xd].mean,
        whole_train_samples_per_s_mean=g.stats["samples_per_s"].mean,
        mfu_mean=g.stats["steady_mfu" if x.startswith("steady") else "mfu"].mean,
        warmup_share_mean=g.stats["warmup_share"].mean,
        **_ratios(g, base, x, xd, p, confidence),
        high_variance=bool(cv > cv_threshold) if not math.isnan(cv) else False,
        headline_cv=cv,
    )


def _ratios(
    g: ScaleGroup, base: ScaleGroup, x: str, xd: str, p: float, confidence: float
) -> dict[str, Any]:
    """Speedups and efficiencies of ``g`` against ``base`` at relative scale ``p``: the
    headline (throughput column ``x``, per device ``xd``), whole training and whole job."""
    if g is base:
        speed = pde = (1.0, math.nan, math.nan)
        job_speed = whole = 1.0
    else:
        j, bj = g.stats["job_time_s"], base.stats["job_time_s"]
        speed = ratio_ci(g.stats[x], base.stats[x], confidence)
        pde = ratio_ci(g.stats[xd], base.stats[xd], confidence)
        job_speed = bj.mean / j.mean if j.mean else math.nan
        whole = ratio_or_nan(g.stats["samples_per_s"].mean, base.stats["samples_per_s"].mean)
    weak = g.series_key[2] == "weak"
    return dict(
        speedup=speed[0],
        speedup_ci_low=speed[1],
        speedup_ci_high=speed[2],
        parallel_efficiency=speed[0] / p,
        parallel_efficiency_ci_low=speed[1] / p,
        parallel_efficiency_ci_high=speed[2] / p,
        karp_flatt=karp_flatt(speed[0], p) if not weak else math.nan,
        karp_flatt_note=karp_flatt_note(speed[0], p) if not weak else "weak scaling",
        whole_train_speedup=whole,
        whole_train_efficiency=whole / p,
        job_time_speedup=job_speed,
        job_time_efficiency=job_speed / p,
        per_device_throughput_efficiency=pde[0],
        per_device_throughput_efficiency_ci_low=pde[1],
        per_device_throughput_efficiency_ci_high=pde[2],
    )


def _quality(
    g: ScaleGroup, base: ScaleGroup, loss_tolerance: float, acc_tolerance: float
) -> dict[str, Any]:
    """A group's final validation loss and accuracy against ``base``, and the verdict."""
    loss_delta, acc_delta, parity = _parity(
        g.stats["val_loss_final"].mean,
        base.stats["val_loss_final"].mean,
        g.stats["val_acc_final"].mean,
        base.stats["val_acc_final"].mean,
        loss_tolerance,
        acc_tolerance,
    )
    return dict(
        val_loss_final_mean=g.stats["val_loss_final"].mean,
        val_loss_final_min=g.stats["val_loss_final"].min,
        val_loss_final_max=g.stats["val_loss_final"].max,
        val_loss_delta_rel=loss_delta,
        val_acc_final_mean=g.stats["val_acc_final"].mean,
        val_acc_delta=acc_delta,
        parity=parity,
    )


def mixed_versions(rows: pd.DataFrame) -> str:
    """``torch 2.4.0/2.5.1; scalescope 0.1.0/0.2.0`` for every package whose version differs
    between the rows of one series, '' when they agree (missing versions are not counted)."""
    parts = []
    for col in sorted(c for c in rows.columns if c.startswith(VERSION_PREFIX)):
        seen = sorted({str(v) for v in rows[col].tolist() if key_value(v) is not None})
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

__all__ = [  # this module's own names, and those of the modules it was split into
    "DEFAULT_ACC_TOLERANCE",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_CV_THRESHOLD",
    "DEFAULT_LOSS_TOLERANCE",
    "EFFICIENCY_REFERENCE",
    "FP32",
    "NO_SPEEDUP",
    "PRECISION_COLUMNS",
    "PREDICT_FACTORS",
    "SCALE_KEYS",
    "SCALING_COLUMNS",
    "SERIES_KEYS",
    "STATS",
    "STEADY",
    "SUPERLINEAR",
    "SUPERLINEAR_EFFICIENCY",
    "VERSION_PREFIX",
    "WARMUP_SHARE_NOTE",
    "WHOLE",
    "AmdahlFit",
    "BaselineSpec",
    "ScaleGroup",
    "accumulation_label",
    "amdahl_fit",
    "amdahl_table",
    "efficiency_column",
    "group_stats",
    "headline_columns",
    "karp_flatt",
    "karp_flatt_note",
    "mixed_versions",
    "natural_key",
    "pick_baseline",
    "positive_quantity",
    "precision_label",
    "precision_table",
    "scale_groups",
    "scaling_table",
    "serial_fraction_notes",
    "series_keys",
    "series_labels",
    "series_scale_groups",
]
