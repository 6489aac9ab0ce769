"""The runs of one scale grouped, and their statistics (analysis.compute.groups)."""

from __future__ import annotations

from metrics_helpers import frame

from analysis.compute.groups import group_stats
from analysis.compute.stats import summarize


def test_a_time_interval_never_goes_negative() -> None:
    """Three repeats, one slow: the linear t-interval of the mean crosses zero."""
    times = [1.0, 1.2, 9.0]
    assert summarize(times).ci_low < 0
    g = group_stats(frame({1: times})).iloc[0]
    assert 0 < g["train_time_s_ci_low"] <= g["train_time_s_gmean"] <= g["train_time_s_ci_high"]
    assert g["samples_per_s_ci_low"] > 0 and g["samples_per_s_per_device_ci_low"] > 0
