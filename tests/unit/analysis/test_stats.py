"""The statistics under every table (analysis.compute.stats): summaries and their intervals,
ratios of means, the t distribution, Welch's test and the one-sided test of the gate, checked
as properties and against scipy."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from analysis.compute.stats import (
    REPEATS_CAP,
    below_test,
    ratio_ci,
    repeats_to_settle,
    summarize,
    t_ppf,
    t_sf,
    welch_test,
)

positive = st.floats(min_value=1e-2, max_value=1e5, allow_nan=False, allow_infinity=False)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=30))
def test_summary_order_and_interval(values: list[float]) -> None:
    s = summarize(values)
    assert s.min <= s.median <= s.max
    assert s.min <= s.mean <= s.max
    if s.n >= 2:
        assert s.ci_low <= s.mean <= s.ci_high
    else:
        assert math.isnan(s.ci_low) and math.isnan(s.std)


@given(st.lists(positive, min_size=1, max_size=6), st.lists(positive, min_size=1, max_size=6))
def test_ratio_interval_contains_the_ratio(a: list[float], b: list[float]) -> None:
    ratio, low, high = ratio_ci(summarize(a), summarize(b))
    assert ratio == pytest.approx(summarize(a).mean / summarize(b).mean)
    if len(a) >= 2 and len(b) >= 2:
        assert low <= ratio * (1 + 1e-12) and ratio <= high * (1 + 1e-12)
    else:
        assert math.isnan(low) and math.isnan(high)


@given(st.lists(positive, min_size=1, max_size=12), st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_intervals_of_positive_data_are_positive_and_contain_the_geometric_mean(
    values: list[float], confidence: float
) -> None:
    s = summarize(values, confidence, log_scale=True)
    assert s.min <= s.gmean <= s.max
    assert s.gmean <= s.mean * (1 + 1e-12)  # AM-GM
    if s.n >= 2:
        assert 0 < s.ci_low <= s.gmean <= s.ci_high
        assert s.ci_high / s.gmean == pytest.approx(s.gmean / s.ci_low, rel=1e-9)  # log-symmetric
    else:
        assert math.isnan(s.ci_low) and math.isnan(s.ci_high)


@given(
    st.lists(positive, min_size=2, max_size=12, unique=True),
    st.sampled_from([0.8, 0.9, 0.95, 0.99]),
)
def test_intervals_are_scipys_own_t_intervals(values: list[float], confidence: float) -> None:
    """Against scipy's own Student-t interval: of the mean, and on the log scale of the mean
    of log(x), back-transformed (the interval every table of positive figures prints)."""
    logs = [math.log(v) for v in values]
    assume(max(logs) - min(logs) > 1e-6)  # scipy's sem of near-equal logs is rounding noise
    n = len(values)
    lin = summarize(values, confidence)
    low, high = sps.t.interval(confidence, n - 1, loc=sps.tmean(values), scale=sps.sem(values))
    assert (lin.ci_low, lin.ci_high) == (
        pytest.approx(low, rel=1e-9, abs=1e-9),
        pytest.approx(high, rel=1e-9, abs=1e-9),
    )
    geo = summarize(values, confidence, log_scale=True)
    low, high = sps.t.interval(confidence, n - 1, loc=sps.tmean(logs), scale=sps.sem(logs))
    assert geo.ci_low == pytest.approx(math.exp(low), rel=1e-9)
    assert geo.ci_high == pytest.approx(math.exp(high), rel=1e-9)


@pytest.mark.parametrize("df", [1, 2, 3.7, 10, 250])
@pytest.mark.parametrize("q", [0.6, 0.9, 0.975, 0.995])
def test_t_quantile_matches_scipy(df: float, q: float) -> None:
    assert t_ppf(q, df) == pytest.approx(sps.t.ppf(q, df), rel=1e-8)
    assert t_sf(1.7, df) == pytest.approx(sps.t.sf(1.7, df), rel=1e-8)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # scipy on near-identical samples
@given(st.lists(positive, min_size=2, max_size=8), st.lists(positive, min_size=2, max_size=8))
def test_welch_matches_scipy(a: list[float], b: list[float]) -> None:
    # two constant samples: scipy's variance is rounding noise (1e-24 for 43691.1, thrice),
    # which it turns into an arbitrary p-value; there is no spread to test
    assume(len(set(a)) > 1 or len(set(b)) > 1)
    ours = welch_test(a, b)
    ref = sps.ttest_ind(a, b, equal_var=False)
    assume(math.isfinite(ref.pvalue))  # scipy gives NaN when both samples are constant
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # scipy on near-identical samples
@given(st.lists(positive, min_size=2, max_size=8), positive)
def test_below_test_is_scipys_one_sided_t_test_on_logs(values: list[float], bound: float) -> None:
    ours = below_test(values, bound)
    logs = [math.log(v) for v in values]
    ref = sps.ttest_1samp(logs, math.log(bound), alternative="less")
    assume(math.isfinite(ref.pvalue))  # scipy gives NaN for identical values
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-12)
    assert (ours.p_value < 0.05) == (ours.upper < bound) or math.isclose(
        ours.upper, bound, rel_tol=1e-9
    )


# --- repeats that would settle a comparison ---------------------------------------------------


def _settles(cvs: list[float], margin: float, m: int) -> bool:
    s2 = sum(c * c for c in cvs)
    s4 = sum(c**4 for c in cvs)
    df = (m - 1) * s2 * s2 / s4
    return t_ppf(0.975, df) * math.sqrt(s2 / m) < margin


@settings(max_examples=200, deadline=None)
@given(
    cvs=st.lists(st.floats(min_value=1e-3, max_value=0.5), min_size=2, max_size=4),
    margin=st.floats(min_value=1e-3, max_value=2.0),
)
def test_repeats_to_settle_is_the_fewest_that_do(cvs: list[float], margin: float) -> None:
    m = repeats_to_settle(cvs, margin)
    if m is None:
        assert not _settles(cvs, margin, REPEATS_CAP)
        return
    assert _settles(cvs, margin, m)
    assert m == 2 or not _settles(cvs, margin, m - 1)
    # a wider margin never needs more; a larger spread never fewer
    wider = repeats_to_settle(cvs, margin * 1.5)
    assert wider is not None and wider <= m
    noisier = repeats_to_settle([c * 1.5 for c in cvs], margin)
    assert noisier is None or noisier >= m


def test_repeats_to_settle_matches_a_hand_case() -> None:
    """Two groups of 5% spread, a 10% gap (log 0.0953): 3 runs leave t(0.975, 4) x
    sqrt(0.005 / 3) = 0.113 > 0.0953; 4 runs give t(0.975, 6) x sqrt(0.005 / 4) = 0.0865."""
    assert repeats_to_settle([0.05, 0.05], math.log(1.1)) == 4
    assert repeats_to_settle([0.05, math.nan], 0.1) is None
    assert repeats_to_settle([0.05, 0.05], 0.0) is None
    assert repeats_to_settle([0.0, 0.0], 0.1) == 2
