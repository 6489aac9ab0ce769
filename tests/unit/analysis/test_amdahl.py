"""Amdahl's law fitted to measured speedups, and Karp-Flatt's serial fraction
(analysis.compute.amdahl)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as sps

from analysis.compute.amdahl import amdahl_fit, amdahl_table, karp_flatt


@given(
    f=st.floats(min_value=0.0, max_value=0.9),
    ps=st.lists(
        st.sampled_from([2.0, 3.0, 4.0, 8.0, 16.0, 64.0]), min_size=1, max_size=5, unique=True
    ),
)
def test_amdahl_fit_recovers_the_serial_fraction_and_matches_karp_flatt(
    f: float, ps: list[float]
) -> None:
    speedups = [1.0 / (f + (1.0 - f) / p) for p in ps]
    fit = amdahl_fit([1.0, *ps], [1.0, *speedups])
    assert fit.serial_fraction == pytest.approx(f, abs=1e-9)
    assert fit.points == len(ps)
    if len(ps) >= 2:
        assert fit.stderr == pytest.approx(0.0, abs=1e-7)
    else:  # one scaled point: no residual, no standard error
        assert math.isnan(fit.stderr)
    for p, s in zip(ps, speedups, strict=True):
        assert karp_flatt(s, p) == pytest.approx(f, abs=1e-9)


def test_amdahl_band_uses_the_t_quantile_of_its_residual_df() -> None:
    ps = [2.0, 4.0, 8.0]
    speedups = [1.9, 3.3, 5.6]  # f about 0.06 with residuals: a non-zero SE
    fit = amdahl_fit([1.0, *ps], [1.0, *speedups])
    assert fit.points == 3 and fit.df == 2 and fit.stderr > 0
    t = sps.t.ppf(0.975, 2)
    low_f, high_f = fit.interval(0.95)
    assert low_f == pytest.approx(fit.serial_fraction - t * fit.stderr, rel=1e-12)
    assert high_f == pytest.approx(fit.serial_fraction + t * fit.stderr, rel=1e-12)
    scaling = pd.DataFrame(
        {
            "series": "s",
            "scaling_mode": "strong",
            "relative_scale": [1.0, *ps],
            "speedup": [1.0, *speedups],
            "baseline_world_size": 1,
            "world_size": [1, 2, 4, 8],
        }
    )
    row = amdahl_table(scaling).iloc[0]
    lo, hi = max(0.0, low_f), min(1.0, high_f)
    assert row["serial_fraction_ci_low"] == pytest.approx(lo)
    assert row["serial_fraction_ci_high"] == pytest.approx(hi)
    p = 16.0  # 2x the largest world size
    assert row["predicted_speedup_2x_low"] == pytest.approx(fit.speedup(p, hi))
    assert row["predicted_speedup_2x_high"] == pytest.approx(fit.speedup(p, lo))
    # a 1-SE band (the old one) is narrower than the 95% band: t(0.975, 2) = 4.30
    assert row["predicted_speedup_2x_low"] < fit.speedup(p, fit.serial_fraction + fit.stderr)
