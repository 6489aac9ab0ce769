"""The runs of one scale grouped, and their statistics (analysis.compute.groups)."""

from __future__ import annotations

import math

import pytest
from metrics_helpers import frame
from scipy import stats as sps

from analysis.compute.groups import group_stats
from analysis.compute.stats import summarize


def test_a_time_interval_never_goes_negative() -> None:
    """Three repeats, one slow: the linear t-interval of the mean crosses zero."""
    times = [1.0, 1.2, 9.0]
    assert summarize(times).ci_low < 0
    g = group_stats(frame({1: times})).iloc[0]
    assert 0 < g["train_time_s_ci_low"] <= g["train_time_s_gmean"] <= g["train_time_s_ci_high"]
    assert g["samples_per_s_ci_low"] > 0 and g["samples_per_s_per_device_ci_low"] > 0


def test_a_groups_interval_is_scipys_t_interval_on_the_log_scale() -> None:
    """Three repeats of 1.0, 1.2 and 9.0 s: the group's time interval is scipy's 95%
    Student-t interval of the mean of the logs, back-transformed, around the geometric mean
    (2.21 s); the throughput's is the same interval turned over (samples / time)."""
    times = [1.0, 1.2, 9.0]
    g = group_stats(frame({1: times})).iloc[0]
    logs = [math.log(t) for t in times]
    low, high = sps.t.interval(0.95, 2, loc=sps.tmean(logs), scale=sps.sem(logs))
    assert g["train_time_s_gmean"] == pytest.approx(sps.gmean(times))
    assert g["train_time_s_ci_low"] == pytest.approx(math.exp(low))
    assert g["train_time_s_ci_high"] == pytest.approx(math.exp(high))
    rate = g["samples_per_s_gmean"] * g["train_time_s_gmean"]  # samples of one run
    assert g["samples_per_s_ci_low"] == pytest.approx(rate / math.exp(high))
    assert g["samples_per_s_ci_high"] == pytest.approx(rate / math.exp(low))
