"""The job's clocks (scalescope.job.clocks.timing): how many warm-up steps a setting resolves
to, and the headline steady time's arithmetic on hand-built timings."""

from __future__ import annotations

import pytest

from scalescope.job.clocks.timing import (
    Timings,
    combine,
    median_step_time,
    rank_part,
    rank_steady_s,
    resolve_warmup,
)


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


# --- the headline steady time, on hand-built timings ----------------------------------------


def _timings(epochs: list[float], warmup_s: float, *, start: float = 100.0) -> Timings:
    """One rank's clocks: three epochs of 10 steps, a warm-up of 10 steps that took
    ``warmup_s`` of training time."""
    return Timings(
        process_start_unix=start,
        train_start_unix=start + 5.0,
        train_end_unix=start + 5.0 + sum(epochs) + 1.5,
        epoch_times_s=epochs,
        epoch_steps=[10, 10, 10],
        val_time_s=1.5,
        warmup_steps=10,
        warmup_train_s=warmup_s,
    )


def test_a_ranks_steady_time_is_its_training_less_the_warm_up() -> None:
    """Epochs of 3, 2 and 2 s with a 2.5 s warm-up: 7 - 2.5 = 4.5 s of steady state; no
    steady state while the warm-up never ended."""
    assert rank_steady_s(_timings([3.0, 2.0, 2.0], 2.5)) == pytest.approx(4.5)
    unfinished = _timings([3.0], 3.0)
    unfinished.warmup_steps = None
    assert rank_steady_s(unfinished) is None


def test_the_job_is_as_slow_as_its_slowest_rank() -> None:
    """Rank 0: 7 s of epochs, 2.5 s warm-up (4.5 s steady); rank 1: 3, 2.5 and 2.5 s, 2 s
    warm-up (6 s steady), started 1 s later. The steady time is the slowest rank's 6 s; each
    epoch the slower one's; the setup ends when the last rank starts training."""
    fast = rank_part(_timings([3.0, 2.0, 2.0], 2.5), "n1", 0)
    slow = rank_part(_timings([3.0, 2.5, 2.5], 2.0, start=101.0), "n1", 1)
    agreed = combine([fast, slow])
    assert agreed.steady_time_s == pytest.approx(6.0)
    assert agreed.epoch_times_s == [3.0, 2.5, 2.5]
    assert agreed.setup_time_s == pytest.approx(106.0 - 100.0)
    assert agreed.job_time_s == pytest.approx(101.0 + 5.0 + 8.0 + 1.5 - 100.0)
    assert agreed.warmup_steps == 10 and agreed.node_names == ["n1", "n1"]
    assert combine([slow, fast]).steady_time_s == pytest.approx(6.0)  # whichever rank it is
    ended_in_warmup = rank_part(_timings([3.0, 2.0, 2.0], 2.5), "n1", 0)
    ended_in_warmup["steps"] = [10]
    assert combine([ended_in_warmup]).steady_time_s is None  # 10 steps, all warm-up


def test_the_median_step_time_leaves_the_warm_up_windows_out() -> None:
    """Windows of (first step, steps, seconds): a slow one in the warm-up (0.5 s a step), then
    0.10, 0.12 and 0.08 s a step: the median is 0.10 s; none after the warm-up: None."""
    windows = [(0, 10, 5.0), (10, 10, 1.0), (20, 10, 1.2), (30, 5, 0.4)]
    assert median_step_time(windows, 10) == pytest.approx(0.10)
    assert median_step_time(windows[:1], 10) is None
