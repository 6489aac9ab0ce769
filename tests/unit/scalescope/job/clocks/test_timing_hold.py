"""The warm-up hold (:class:`~scalescope.job.clocks.timing.WarmupHold`): the profiler's capture
keeps
the TimingCallback's warm-up open, so that no profiled step lands in the steady state. Driven
through the callback's hooks with a stand-in trainer (no process, no Lightning loop)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from scalescope.job.clocks.timing import TimingCallback


class Hold:
    """Holds the warm-up until step ``until``; remembers the target it was told."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.target: Any = "unset"

    def resolve(self, trainer: Any, target: int | None) -> None:
        self.target = target

    def holds(self, step: int) -> bool:
        return step < self.until


def trainer(steps_per_epoch: float = 25) -> Any:
    return SimpleNamespace(
        global_step=0,
        global_rank=1,  # not rank 0: nothing printed, no loss read
        world_size=2,
        current_epoch=0,
        max_steps=-1,
        num_training_batches=steps_per_epoch,
        strategy=SimpleNamespace(barrier=lambda name: None),
    )


def run(cb: TimingCallback, t: Any, boundaries: list[int], epoch_end: int | None = None) -> None:
    cb.on_train_start(t, None)  # type: ignore[arg-type]
    cb.on_train_epoch_start(t, None)  # type: ignore[arg-type]
    for step in boundaries:
        t.global_step = step
        cb.on_train_batch_end(t, None, None, None, 0)  # type: ignore[arg-type]
        if step == epoch_end:
            cb.on_train_epoch_end(t, None)  # type: ignore[arg-type]
            cb.on_train_epoch_start(t, None)  # type: ignore[arg-type]


def callback(warmup: int | str, hold: Hold | None, per_epoch: int = 25) -> TimingCallback:
    return TimingCallback(
        process_start=0.0,
        log_every_n_steps=50,
        warmup_steps=warmup,
        steps_per_epoch=lambda _t: per_epoch,
        hold=hold,
    )


@pytest.mark.parametrize(("warmup", "expected"), [(10, 16), (0, 16), (20, 24)])
def test_the_warm_up_ends_at_the_first_boundary_past_its_target_and_the_hold(
    warmup: int, expected: int
) -> None:
    hold = Hold(until=13)
    cb = callback(warmup, hold)
    run(cb, trainer(), [8, 16, 24, 25])
    assert hold.target == warmup  # told the resolved target at train start
    assert cb.t.warmup_steps == expected


def test_without_a_hold_the_warm_up_is_as_before() -> None:
    cb = callback(10, None)
    run(cb, trainer(), [8, 16, 24, 25])
    assert cb.t.warmup_steps == 16
    zero = callback(0, None)
    zero.on_train_start(trainer(), None)  # type: ignore[arg-type]
    assert zero.t.warmup_steps == 0


def test_a_first_epoch_warm_up_held_past_the_epoch_ends_once_released() -> None:
    # A loader without a length: the warm-up is the first epoch, but the capture after it
    # holds it to the first boundary once released.
    hold = Hold(until=30)
    cb = callback("auto", hold, per_epoch=0)
    run(cb, trainer(float("inf")), [8, 16, 24, 25, 33, 41], epoch_end=25)
    assert hold.target is None
    assert cb.t.warmup_steps == 33
