"""How scored points add up: coverage, median error and width, and the mean interval score
of the points :func:`..model_error.score` scored, whatever model scored them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from analysis.compute.projection.model_error import COVERAGE_TARGET


def totals(scored: Sequence[dict[str, float | bool | str]]) -> dict[str, float]:
    """Coverage, median absolute error, median width (points) and mean interval score
    (:func:`interval_score`) of scored points: the coverage over every point (one without an
    interval is a miss), the error over the points with a centre, the width and the score
    over those with an interval (NaN where none has one)."""
    if not scored:
        return {
            "coverage": math.nan,
            "median_abs_error_pts": math.nan,
            "median_width_pts": math.nan,
            "interval_score_pts": math.nan,
        }
    errors = [abs(float(p["error_pts"])) for p in scored if math.isfinite(float(p["error_pts"]))]
    widths = [float(p["width_pts"]) for p in scored if math.isfinite(float(p["width_pts"]))]
    return {
        "coverage": sum(bool(p["covered"]) for p in scored) / len(scored),
        "median_abs_error_pts": float(np.median(errors)) if errors else math.nan,
        "median_width_pts": float(np.median(widths)) if widths else math.nan,
        "interval_score_pts": interval_score(scored),
    }


def interval_score(scored: Sequence[dict[str, float | bool | str]]) -> float:
    """The mean interval score (points) of scored points' central 95% intervals: the width,
    plus 2 / 0.05 times how far the truth falls outside (Gneiting and Raftery, 2007, the
    proper scoring rule for a central interval: lowest in expectation for the true quantiles,
    so it weighs narrowness against misses at the interval's own level); over the points with
    an interval, as the median width is (NaN where none has one)."""
    got = [
        float(p["width_pts"]) + 2 / (1 - COVERAGE_TARGET) * float(p["miss_pts"])
        for p in scored
        if math.isfinite(float(p["width_pts"]))
    ]
    return float(np.mean(got)) if got else math.nan
