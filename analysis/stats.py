"""Small statistics kernel: Student's t distribution, intervals and Welch's test.

scipy is a development dependency only, so the few functions the analysis needs live here
(tests check them against scipy). Everything is pure: floats in, floats out, NaN where a
quantity is undefined (a single observation has no spread, so no interval and no test).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

_EPS = 1e-15
_TINY = 1e-300


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + aa / c
        c = c if abs(c) > _TINY else _TINY
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    # The continued fraction converges fast for x < (a + 1) / (a + b + 2); use symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """Survival function P(T > t) of Student's t with ``df`` degrees of freedom."""
    if math.isnan(t) or not df > 0:
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


@functools.lru_cache(maxsize=1024)
def t_ppf(q: float, df: float) -> float:
    """Quantile of Student's t: the t with P(T <= t) = q (bisection on the CDF; cached, as
    every group with the same number of repeats asks for the same quantile)."""
    if not 0.0 < q < 1.0 or not df > 0:
        return math.nan
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > 1.0 - q:
        lo, hi = hi, hi * 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_sf(mid, df) > 1.0 - q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


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
    """Two-sided t-interval of the mean: mean -/+ t_{1-a/2, n-1} * std / sqrt(n)."""
    cv: float
    """Coefficient of variation std / mean."""


def summarize(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """Summary of the finite values in ``values`` (NaN and None are dropped first)."""
    xs = sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))
    n = len(xs)
    if n == 0:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan, nan, nan)
    mean = math.fsum(xs) / n
    # Clamp: a rounding error must not put the mean outside [min, max] for equal values.
    mean = min(max(mean, xs[0]), xs[-1])
    mid = n // 2
    median = xs[mid] if n % 2 else 0.5 * (xs[mid - 1] + xs[mid])
    if n < 2:
        return Summary(n, mean, median, math.nan, xs[0], xs[-1], math.nan, math.nan, math.nan)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_ppf(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n)
    cv = std / mean if mean != 0 else math.nan
    return Summary(n, mean, median, std, xs[0], xs[-1], mean - half, mean + half, cv)


@dataclass(frozen=True)
class Welch:
    """Welch's unequal-variances t-test of mean(a) - mean(b); NaN when either side has n < 2."""

    t: float
    df: float
    p_value: float
    """Two-sided."""


def welch_test(a: Sequence[float], b: Sequence[float]) -> Welch:
    sa, sb = summarize(a), summarize(b)
    if sa.n < 2 or sb.n < 2:
        return Welch(math.nan, math.nan, math.nan)
    va, vb = sa.std**2 / sa.n, sb.std**2 / sb.n
    se2 = va + vb
    diff = sa.mean - sb.mean
    if se2 == 0:
        # Both samples constant: identical means are no evidence of a difference, different
        # means are as certain as the data can make them.
        return Welch(
            0.0 if diff == 0 else math.copysign(math.inf, diff), math.inf, 1.0 if diff == 0 else 0.0
        )
    t = diff / math.sqrt(se2)
    df = se2**2 / (va**2 / (sa.n - 1) + vb**2 / (sb.n - 1))
    return Welch(t, df, min(1.0, 2.0 * t_sf(abs(t), df)))


def ratio_ci(num: Summary, den: Summary, confidence: float = 0.95) -> tuple[float, float, float]:
    """Ratio of means num.mean / den.mean with a delta-method interval on its logarithm.

    var(log R) ~= cv_num^2 / n_num + cv_den^2 / n_den; the interval is
    R * exp(-/+ t_{1-a/2, df} * sqrt(var)), with Welch-Satterthwaite degrees of freedom. The
    log scale keeps the interval positive and puts R inside it. NaN bounds when either side
    has fewer than two observations: one run says nothing about its own spread.
    """
    if not (num.n and den.n) or den.mean == 0:
        return math.nan, math.nan, math.nan
    ratio = num.mean / den.mean
    if num.n < 2 or den.n < 2 or num.mean <= 0 or den.mean <= 0:
        return ratio, math.nan, math.nan
    va = (num.std / num.mean) ** 2 / num.n
    vb = (den.std / den.mean) ** 2 / den.n
    var = va + vb
    if var == 0:
        return ratio, ratio, ratio
    df = var**2 / (va**2 / (num.n - 1) + vb**2 / (den.n - 1))
    half = t_ppf(0.5 + confidence / 2.0, df) * math.sqrt(var)
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)
