"""Statistics of repeated measurements: summaries, intervals and tests (scipy.stats underneath).

Everything is pure: floats in, floats out, NaN where a quantity is undefined (a single
observation has no spread, so no interval and no test).

Which interval, and around what
-------------------------------
* ``summarize(values)`` (any sign allowed): the two-sided Student-t interval of the
  arithmetic mean, ``mean -/+ t_{(1+c)/2, n-1} * std / sqrt(n)``. It contains the mean.
* ``summarize(values, log_scale=True)`` (strictly positive quantities: times, rates): the
  Student-t interval of the mean of ``log(x)``, back-transformed,
  ``exp(mean(log x) -/+ t_{(1+c)/2, n-1} * std(log x) / sqrt(n))``. It is an interval for the
  geometric mean ``gmean = exp(mean(log x))``, which it always contains; both ends are
  positive, so a time's interval never goes below zero however few and spread the repeats.
  A non-positive value makes it NaN (a time of zero or less is not a measurement).
* ``ratio_ci(num, den)``: the ratio of arithmetic means with a delta-method interval on
  the log of the ratio and Welch-Satterthwaite degrees of freedom: positive, contains the
  ratio.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats as _sps


def t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t: the t with P(T <= t) = q; NaN outside 0 < q < 1 or df <= 0."""
    if not 0.0 < q < 1.0 or not df > 0:
        return math.nan
    return float(_sps.t.ppf(q, df))


def t_sf(t: float, df: float) -> float:
    """Survival function P(T > t) of Student's t with ``df`` degrees of freedom."""
    if math.isnan(t) or not df > 0:
        return math.nan
    return float(_sps.t.sf(t, df))


@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of one sample; NaN where undefined (std, CI and CV need n >= 2)."""

    n: int
    mean: float
    median: float
    std: float
    """Sample standard deviation (n - 1 in the denominator)."""
    min: float
    max: float
    ci_low: float
    ci_high: float
    """Two-sided interval: of the mean, or of the geometric mean on the log scale (see the
    module doc and ``log_scale``)."""
    cv: float
    """Coefficient of variation std / mean."""
    gmean: float = math.nan
    """Geometric mean exp(mean(log x)); NaN unless every value is positive."""
    log_scale: bool = False
    """True when ci_low / ci_high are the back-transformed interval of the log values."""


def _finite(values: Sequence[float | None]) -> list[float]:
    return sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))


def summarize(
    values: Sequence[float | None], confidence: float = 0.95, *, log_scale: bool = False
) -> Summary:
    """Summary of the finite values in ``values`` (NaN and None are dropped first).

    ``log_scale=True`` is for strictly positive quantities: the interval is that of the
    geometric mean, computed on the log values (see the module doc).
    """
    xs = _finite(values)
    n = len(xs)
    nan = math.nan
    if n == 0:
        return Summary(0, nan, nan, nan, nan, nan, nan, nan, nan, nan, log_scale)
    mean = math.fsum(xs) / n
    # Clamp: a rounding error must not put the mean outside [min, max] for equal values.
    mean = min(max(mean, xs[0]), xs[-1])
    mid = n // 2
    median = xs[mid] if n % 2 else 0.5 * (xs[mid - 1] + xs[mid])
    positive = xs[0] > 0
    logs = [math.log(x) for x in xs] if positive else []
    log_mean = math.fsum(logs) / n if positive else nan
    gmean = min(max(math.exp(log_mean), xs[0]), xs[-1]) if positive else nan
    if n < 2:
        return Summary(n, mean, median, nan, xs[0], xs[-1], nan, nan, nan, gmean, log_scale)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    cv = std / mean if mean != 0 else nan
    t = t_ppf(0.5 + confidence / 2.0, n - 1)
    if log_scale:
        if not positive:
            low = high = nan
        else:
            log_std = math.sqrt(math.fsum((v - log_mean) ** 2 for v in logs) / (n - 1))
            half = t * log_std / math.sqrt(n)
            # Clamped like the mean: equal values give gmean == low == high exactly.
            low, high = min(gmean * math.exp(-half), gmean), max(gmean * math.exp(half), gmean)
    else:
        half = t * std / math.sqrt(n)
        low, high = mean - half, mean + half
    return Summary(n, mean, median, std, xs[0], xs[-1], low, high, cv, gmean, log_scale)


@dataclass(frozen=True)
class Welch:
    """Welch's unequal-variances t-test of mean(a) - mean(b); NaN when either side has n < 2."""

    t: float
    df: float
    p_value: float
    """Two-sided."""


def welch_test(a: Sequence[float], b: Sequence[float]) -> Welch:
    xa, xb = _finite(a), _finite(b)
    if len(xa) < 2 or len(xb) < 2:
        return Welch(math.nan, math.nan, math.nan)
    sa, sb = summarize(xa), summarize(xb)
    if sa.std == 0 and sb.std == 0:
        # Both samples constant: identical means are no evidence of a difference, different
        # means are as certain as the data can make them (scipy returns NaN here).
        diff = sa.mean - sb.mean
        return Welch(
            0.0 if diff == 0 else math.copysign(math.inf, diff), math.inf, 1.0 if diff == 0 else 0.0
        )
    res = _sps.ttest_ind(xa, xb, equal_var=False)
    return Welch(float(res.statistic), float(res.df), float(res.pvalue))


@dataclass(frozen=True)
class BelowTest:
    """One-sided test that the centre of positive repeats lies below a bound."""

    n: int
    p_value: float
    """P(data at least this low | centre = bound), one-sided; NaN with n < 2 or a non-positive
    value."""
    upper: float
    """One-sided upper confidence bound of the geometric mean at 1 - alpha."""


def below_test(values: Sequence[float | None], bound: float, alpha: float = 0.05) -> BelowTest:
    """One-sample, one-sided t-test of log(values) against log(bound): is the (geometric) mean
    of a positive quantity below ``bound``? On the log scale, like every interval of a
    positive quantity here, so ``p_value < alpha`` exactly when ``upper < bound``."""
    xs = _finite(values)
    n = len(xs)
    if n < 2 or xs[0] <= 0 or not bound > 0:
        return BelowTest(n, math.nan, math.nan)
    logs = [math.log(x) for x in xs]
    mean = math.fsum(logs) / n
    se = math.sqrt(math.fsum((v - mean) ** 2 for v in logs) / (n - 1) / n)
    if se == 0:
        below = mean < math.log(bound)
        return BelowTest(n, 0.0 if below else 1.0, math.exp(mean))
    t = (mean - math.log(bound)) / se
    upper = math.exp(mean + t_ppf(1.0 - alpha, n - 1) * se)
    return BelowTest(n, float(_sps.t.cdf(t, n - 1)), upper)


@dataclass(frozen=True)
class LogRatio:
    """A ratio of means R with the standard error of log R and its degrees of freedom."""

    ratio: float
    log_se: float
    df: float


def log_ratio(num: Summary, den: Summary) -> LogRatio:
    """num.mean / den.mean; var(log R) ~= cv_num^2 / n_num + cv_den^2 / n_den (delta method),
    Welch-Satterthwaite df. NaN spread when either side has n < 2 or a non-positive mean."""
    if not (num.n and den.n) or den.mean == 0:
        return LogRatio(math.nan, math.nan, math.nan)
    ratio = num.mean / den.mean
    if num.n < 2 or den.n < 2 or num.mean <= 0 or den.mean <= 0:
        return LogRatio(ratio, math.nan, math.nan)
    va = (num.std / num.mean) ** 2 / num.n
    vb = (den.std / den.mean) ** 2 / den.n
    var = va + vb
    if var == 0:
        return LogRatio(ratio, 0.0, math.inf)
    df = var**2 / (va**2 / (num.n - 1) + vb**2 / (den.n - 1))
    return LogRatio(ratio, math.sqrt(var), df)


def ratio_ci(num: Summary, den: Summary, confidence: float = 0.95) -> tuple[float, float, float]:
    """Ratio of means num.mean / den.mean with a delta-method interval on its logarithm.

    The interval is R * exp(-/+ t_{(1+c)/2, df} * SE(log R)) (:func:`log_ratio`). The log
    scale keeps the interval positive and puts R inside it. NaN bounds when either side has
    fewer than two observations: one run says nothing about its own spread.
    """
    lr = log_ratio(num, den)
    if math.isnan(lr.log_se):
        return lr.ratio, math.nan, math.nan
    if lr.log_se == 0:
        return lr.ratio, lr.ratio, lr.ratio
    half = t_ppf(0.5 + confidence / 2.0, lr.df) * lr.log_se
    return lr.ratio, lr.ratio * math.exp(-half), lr.ratio * math.exp(half)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a boolean), else None."""
    if not is_number(value):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def finite_mean(values: Sequence[float]) -> float:
    """The mean of the finite values (NaN when there is none)."""
    finite = [v for v in values if math.isfinite(v)]
    return math.fsum(finite) / len(finite) if finite else math.nan


def ratio_or_nan(a: float, b: float) -> float:
    """``a / b``, NaN where ``b`` is zero or NaN."""
    return a / b if b and not math.isnan(b) else math.nan


def number_at(data: Any, key: str) -> float:
    """``data[key]`` as a float when ``data`` is a mapping and that is a finite number, else NaN."""
    value = finite_number(data.get(key)) if isinstance(data, Mapping) else None
    return math.nan if value is None else value


REPEATS_CAP = 1000
"""The most repeats per scale :func:`repeats_to_settle` searches: beyond it, repeating is not
how the question gets answered."""


def repeats_to_settle(
    cvs: Sequence[float], margin_log: float, confidence: float = 0.95, cap: int = REPEATS_CAP
) -> int | None:
    """The fewest repeats m per group that would settle a comparison made from a ratio of
    group means R (a product of means over means, e.g. an efficiency against a floor, or one
    efficiency against another): the interval of :func:`ratio_ci`, taken with ``m`` runs in
    every group at the spreads measured (``cvs``, one coefficient of variation per group),
    excludes a value ``|margin_log|`` away from log R:

        t_{(1+c)/2, df(m)} * sqrt(sum cv^2 / m) < |margin_log|,
        df(m) = (m - 1) (sum cv^2)^2 / sum cv^4  (Welch-Satterthwaite, equal m).

    It assumes the spread stays as measured: a sample size of the t-test's kind, not a
    promise. None where a spread is unknown (NaN), the margin is zero, or no m <= ``cap``
    does it."""
    if not cvs or any(not math.isfinite(c) or c < 0 for c in cvs) or not math.isfinite(margin_log):
        return None
    margin = abs(margin_log)
    if margin == 0:
        return None
    s2 = math.fsum(c * c for c in cvs)
    if s2 == 0:
        return 2
    s4 = math.fsum(c**4 for c in cvs)
    q = 0.5 + confidence / 2.0
    for m in range(2, cap + 1):
        df = (m - 1) * s2 * s2 / s4
        if t_ppf(q, df) * math.sqrt(s2 / m) < margin:
            return m
    return None
