"""The calibration windows' budget: the plan of windows within it, and the training steps'
estimate of one pass that can rule the windows out before anything runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.diagnosis.calibration import calibration_plan


@given(
    pass_s=st.floats(1e-6, 100.0),
    steps=st.integers(1, 64),
    windows=st.integers(1, 8),
    budget_s=st.floats(0.01, 600.0),
)
def test_the_calibration_plan_keeps_to_its_budget(
    pass_s: float, steps: int, windows: int, budget_s: float
) -> None:
    k, w = calibration_plan(pass_s, steps, windows, budget_s)
    if 2 * pass_s > budget_s * (1 + 1e-9):
        assert (k, w) == (0, 0)  # not even one pair fits: no calibration at all
        return
    assert 1 <= k <= steps and 1 <= w <= windows
    assert 2 * k * w * pass_s <= budget_s * (1 + 1e-9)
    if 2 * steps * windows * pass_s <= budget_s * (1 - 1e-9):
        assert (k, w) == (steps, windows)  # a budget that affords everything changes nothing


def test_a_slow_pass_takes_passes_off_before_windows() -> None:
    # 8 passes x 2 windows x 2 kinds = 32 passes wanted; 5 s at 0.5 s a pass affords 10.
    assert calibration_plan(0.5, 8, 2, 5.0) == (2, 2)
    assert calibration_plan(2.0, 8, 2, 5.0) == (1, 1)
    assert calibration_plan(2.5, 8, 4, 3.0) == (0, 0)  # gpt on 2 CPU cores: skipped


def test_a_pair_the_training_steps_show_too_long_runs_nothing() -> None:
    """gpt on two CPU cores: 2.5 s a step, so one pair of one-pass windows (5 s) exceeds the
    3 s budget: the training steps say so, and not even the trial pass runs."""
    from types import SimpleNamespace

    from scalescope.job.diagnosis.calibration import pair_exceeds_budget, pass_estimate

    gathered = SimpleNamespace(
        per_rank=[{"diagnosis": {"compute_s": 2.1}}, {"diagnosis": {"compute_s": 2.5}}]
    )
    estimate = pass_estimate(gathered, 1)
    assert estimate == 2.5
    assert pair_exceeds_budget(estimate, 3.0) == (
        "one pair of one-pass windows (about 5 s, from the training steps' compute per "
        "micro-batch) would exceed diagnosis.calibration_budget_s (3 s)"
    )
    assert pair_exceeds_budget(1.5, 3.0) is None  # exactly fits: the trial pass decides
    assert pair_exceeds_budget(None, 3.0) is None
    # a rank without the figure: no estimate
    assert pass_estimate(SimpleNamespace(per_rank=[{"diagnosis": {}}, {}]), 1) is None
    assert pass_estimate(None, 1) is None


def test_the_budget_is_checked_per_pass_not_per_accumulated_step() -> None:
    """Accumulation 8, a 1 s optimizer step and a 1.5 s budget: a pass is one micro-batch,
    about 1/8 s, so a pair of one-pass windows (0.25 s) fits and the trial pass decides."""
    from types import SimpleNamespace

    from scalescope.job.diagnosis.calibration import pair_exceeds_budget, pass_estimate

    gathered = SimpleNamespace(per_rank=[{"diagnosis": {"compute_s": 1.0}}] * 2)
    assert pass_estimate(gathered, 8) == pytest.approx(0.125)
    assert pair_exceeds_budget(pass_estimate(gathered, 8), 1.5) is None
    assert pair_exceeds_budget(pass_estimate(gathered, 1), 1.5) is not None  # the old check
