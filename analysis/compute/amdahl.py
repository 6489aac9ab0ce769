"""Serial fractions (formulas: :mod:`analysis.compute.metrics`): Karp-Flatt per scale point,
Amdahl's law fitted per strong-scaling series, and the speedups it predicts beyond the
largest measured scale. A fraction outside [0, 1] is no serial fraction: it is withheld, with
a note saying why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.compute.groups import DEFAULT_CONFIDENCE
from analysis.compute.stats import t_ppf

PREDICT_FACTORS = (2, 4)


# --- Karp-Flatt -------------------------------------------------------------------------------


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


AMDAHL_COLUMNS = [
    "series",
    "baseline_world_size",
    "max_world_size",
    "points",
    "serial_fraction",
    "serial_fraction_se",
    "serial_fraction_ci_low",
    "serial_fraction_ci_high",
    "fit_note",
    *(
        column
        for k in PREDICT_FACTORS
        for column in (
            f"world_size_{k}x",
            f"predicted_speedup_{k}x",
            f"predicted_speedup_{k}x_low",
            f"predicted_speedup_{k}x_high",
            f"predicted_efficiency_{k}x",
        )
    ),
]
"""Columns of :func:`amdahl_table`."""


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
            rows.append(_amdahl_row(series, part, confidence))
    return pd.DataFrame(rows, columns=AMDAHL_COLUMNS)


def _amdahl_row(series: Any, part: pd.DataFrame, confidence: float) -> dict[str, Any]:
    """One strong-scaling series' fit and its predictions (see :func:`amdahl_table`)."""
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
    return row


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
