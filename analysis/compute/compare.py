"""Compare two result folders configuration by configuration.

By default on the headline's quantity, the steady-state throughput per device
(``steady_samples_per_s_per_device``: after the warm-up, as the speedup and efficiency tables
use it); any of :data:`COMPARABLE` on request, the whole-training time among them.

A difference is reported only when it is both larger than a tolerance (default 5 % of A's
mean) and statistically significant by Welch's unequal-variances t-test (default
alpha 0.05) -- the rule asv and pyperf use. With fewer than two repeats on a side there is
no test: the change is shown with the verdict "not enough repeats".
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis.compute.groups import series_keys, series_labels
from analysis.compute.stats import summarize, welch_test
from analysis.read.frame import SCALE_KEYS, SERIES_KEYS

DEFAULT_TOLERANCE = 0.05
DEFAULT_ALPHA = 0.05
LOWER_IS_BETTER = (
    "train_time_s",
    "job_time_s",
    "mean_epoch_time_s",
    "setup_time_s",
    "val_loss_final",
    "step_time_s",
)
DEFAULT_METRIC = "steady_samples_per_s_per_device"
"""The headline's quantity: what ``compare`` compares unless told otherwise."""
COMPARABLE = (
    DEFAULT_METRIC,
    "steady_samples_per_s",
    *LOWER_IS_BETTER,
    "samples_per_s",
    "samples_per_s_per_device",
    "val_acc_final",
)
METRIC_NAMES = {
    "steady_samples_per_s_per_device": "steady-state throughput per device (samples/s, "
    "after the warm-up)",
    "steady_samples_per_s": "steady-state throughput (samples/s, after the warm-up)",
    "train_time_s": "whole-training time (s, warm-up included, validation excluded)",
    "job_time_s": "job time (s, process start to the end of training)",
    "mean_epoch_time_s": "mean epoch time (s, warm-up included)",
    "setup_time_s": "set-up time (s)",
    "val_loss_final": "final validation loss",
    "step_time_s": "median step time (s, after the warm-up)",
    "samples_per_s": "whole-training throughput (samples/s, warm-up included)",
    "samples_per_s_per_device": "whole-training throughput per device (samples/s, warm-up "
    "included)",
    "val_acc_final": "final validation accuracy",
}
"""What each comparable column measures, in words: the compare output names it."""

COLUMNS = [
    "series",
    *SERIES_KEYS,
    *SCALE_KEYS,
    "metric",
    "n_a",
    "n_b",
    "mean_a",
    "mean_b",
    "change_rel",
    "p_value",
    "verdict",
]


def _values(runs: pd.DataFrame, metric: str) -> dict[tuple[Any, ...], list[float]]:
    out: dict[tuple[Any, ...], list[float]] = {}
    scales = zip(*(runs[k].tolist() for k in SCALE_KEYS), strict=True)
    for key, scale, value in zip(series_keys(runs), scales, runs[metric].tolist(), strict=True):
        if any(pd.isna(v) for v in scale):
            continue
        values = out.setdefault((key, *(int(v) for v in scale)), [])
        if not pd.isna(value):
            values.append(float(value))
    return out


def compare_runs(
    runs_a: pd.DataFrame,
    runs_b: pd.DataFrame,
    *,
    metric: str = DEFAULT_METRIC,
    tolerance: float = DEFAULT_TOLERANCE,
    alpha: float = DEFAULT_ALPHA,
) -> pd.DataFrame:
    """One row per configuration and scale found in A or B; ``change_rel`` = (B - A) / A."""
    if metric not in COMPARABLE:
        raise ValueError(f"metric {metric!r}: choose one of {', '.join(COMPARABLE)}")
    a, b = _values(runs_a, metric), _values(runs_b, metric)
    keys = sorted(a.keys() | b.keys(), key=lambda k: (tuple(str(v) for v in k[0]), *k[1:]))
    labels = series_labels(list(dict.fromkeys(k[0] for k in keys)))
    lower_better = metric in LOWER_IS_BETTER
    rows = []
    for key in keys:
        sa, sb = summarize(a.get(key, [])), summarize(b.get(key, []))
        change = (sb.mean - sa.mean) / sa.mean if sa.n and sb.n and sa.mean else math.nan
        p_value = math.nan
        if key not in a or not sa.n:
            verdict = "only in B"
        elif key not in b or not sb.n:
            verdict = "only in A"
        elif sa.n < 2 or sb.n < 2:
            verdict = "not enough repeats"
        else:
            p_value = welch_test(a[key], b[key]).p_value
            if abs(change) <= tolerance:
                verdict = "same (within tolerance)"
            elif not p_value < alpha:
                verdict = "not significant"
            else:
                better = (change < 0) == lower_better
                verdict = "better" if better else "worse"
        row: dict[str, Any] = {"series": labels[key[0]]}
        row.update(zip(SERIES_KEYS, key[0], strict=True))
        row.update(zip(SCALE_KEYS, key[1:], strict=True))
        row.update(
            metric=metric,
            n_a=sa.n,
            n_b=sb.n,
            mean_a=sa.mean,
            mean_b=sb.mean,
            change_rel=change,
            p_value=p_value,
            verdict=verdict,
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)
