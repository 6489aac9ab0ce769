"""SIGTERM stops every rank at the same step, within seconds, and the record says why."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.clocks.preemption import CHECK_INTERVAL_S, next_interval_steps


@given(
    every=st.integers(1, 10_000),
    elapsed_s=st.floats(0.0, 1e4),
    steps=st.integers(0, 10_000),
    interval_s=st.floats(0.1, 10.0),
)
def test_interval_is_at_least_one_and_grows_at_most_twofold(
    every: int, elapsed_s: float, steps: int, interval_s: float
) -> None:
    nxt = next_interval_steps(every, elapsed_s, steps, interval_s)
    assert 1 <= nxt <= 2 * every
    # the same inputs give the same answer: ranks that share them stay in lockstep
    assert nxt == next_interval_steps(every, elapsed_s, steps, interval_s)


@given(step_s=st.floats(CHECK_INTERVAL_S, 3600.0), every=st.integers(1, 1000))
def test_slow_steps_are_checked_every_step(step_s: float, every: int) -> None:
    assert next_interval_steps(every, step_s * 10, 10, CHECK_INTERVAL_S) == 1


@given(step_s=st.floats(1e-5, 1.0), every=st.integers(1, 1000))
def test_fast_steps_are_checked_about_once_per_interval(step_s: float, every: int) -> None:
    nxt = next_interval_steps(every, step_s * 50, 50, CHECK_INTERVAL_S)
    assert nxt * step_s <= CHECK_INTERVAL_S * (1 + 1e-9) or nxt == 1


def test_growth_from_one_reaches_the_interval() -> None:
    every = 1
    for _ in range(20):
        every = next_interval_steps(every, 0.001 * every, every, CHECK_INTERVAL_S)
    assert every == int(CHECK_INTERVAL_S / 0.001)


@pytest.mark.parametrize(
    ("every", "elapsed_s", "steps", "expected"),
    [
        (10, 0.5, 50, 20),  # 10 ms steps: 20 steps (0.2 s) fit in 1 s, so twice as many
        (50, 5.0, 50, 10),  # 100 ms steps: 100 would take 10 s; 1 s holds 10
        (4, 0.0, 0, 8),  # nothing timed yet: twice as many
        (7, 30.0, 10, 1),  # 3 s steps: every step
    ],
)
def test_the_next_interval_worked_by_hand(
    every: int, elapsed_s: float, steps: int, expected: int
) -> None:
    assert next_interval_steps(every, elapsed_s, steps, 1.0) == expected
