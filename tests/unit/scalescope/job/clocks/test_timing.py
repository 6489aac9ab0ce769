"""The job's clocks (scalescope.job.clocks.timing): how many warm-up steps a setting resolves to."""

from __future__ import annotations

import pytest

from scalescope.job.clocks.timing import resolve_warmup


@pytest.mark.parametrize(
    ("setting", "steps_per_epoch", "max_steps", "expected"),
    [
        ("auto", 50, None, 50),  # the first epoch
        ("auto", 500, None, 200),  # capped
        ("auto", 0, 40, 20),  # no length: the first half of max_steps
        ("auto", 0, 1000, 200),  # ... capped
        ("auto", 0, None, None),  # no length, no bound: the first epoch, when it ends
        (7, 0, 40, 7),  # a number is a number
    ],
)
def test_auto_warmup(
    setting: int | str, steps_per_epoch: int, max_steps: int | None, expected: int | None
) -> None:
    assert resolve_warmup(setting, steps_per_epoch, max_steps) == expected
