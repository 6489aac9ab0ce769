"""How a run's optimizer steps fall, as pure arithmetic both sides use: the warm-up as
resolved, the training calls' boundaries, and where a profiler capture (``trainer.profile``)
would fall. The job decides with it whether a capture fits (:mod:`scalescope.job.profile.capture`);
the analysis, whether the profiling command it suggests would capture anything
(:mod:`analysis.compute.profile_advice`). One rule, so the two never disagree.

The capture sits in the warm-up, so no timed figure holds it: the warm-up as resolved, then
:data:`MEASURE_STEPS` steps in which every rank measures how long it was busy (not waiting in
a collective), then ``trainer.profile.steps`` profiled steps; the steady state starts at the
first step boundary after them. A Lightning call can hold several optimizer steps
(``trainer.steps_per_call``): each phase starts at a call boundary, so it can run longer
than its count (the capture takes whole calls), never shorter. A capture that its epoch's
end would cut short waits for the next epoch (validation stays out of it); only an epoch
shorter than the capture ends it early.

No torch, no numpy: the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

WARMUP_AUTO_MAX_STEPS = 200
"""``trainer.warmup_steps: auto`` is the first epoch, at most this many optimizer steps."""

MEASURE_STEPS = 3
"""Optimizer steps (at least; up to the next call boundary) every rank's busy time is
measured over before the ranks to profile are chosen."""


def call_boundaries(
    steps_per_epoch: int, epochs: int, max_steps: int | None, steps_per_call: int
) -> list[int]:
    """The optimizer step counts at which a training call ends (where the warm-up, the
    measurement and the capture can start or end), over the whole run."""
    total = steps_per_epoch * epochs
    if max_steps is not None:
        total = min(total, max_steps)
    out: list[int] = []
    for epoch in range(epochs):
        start, done = epoch * steps_per_epoch, 0
        while done < steps_per_epoch:
            done = min(done + steps_per_call, steps_per_epoch)
            b = min(start + done, total)
            if not out or b > out[-1]:
                out.append(b)
            if b >= total:
                return out
    return out


@dataclass(frozen=True)
class Capture:
    """Where a capture falls in a run of known length (optimizer steps)."""

    measure_from: int
    """Call boundary the measurement starts at (the capture's own start without one)."""
    first: int
    """First profiled step (0-based: the step that runs when ``first`` steps are done)."""
    end: int
    """Steps done when the capture ends: the first call boundary at least ``steps`` after
    ``first``, or its epoch's end."""
    steady_from: int | None
    """Call boundary the steady state starts at (never the boundary the capture ends at when
    that is an epoch's end); None where the run ends first."""


def plan_capture(
    boundaries: Sequence[int],
    steps_per_epoch: int,
    *,
    base: int,
    measure: int,
    steps: int,
) -> Capture | None:
    """The capture a run whose calls end at ``boundaries`` would take: the measurement from the
    first boundary at or after the warm-up (``base``), the capture from the first boundary at
    least ``measure`` steps later (from the next epoch's start where its epoch has fewer than
    ``steps`` left and an epoch has as many), to the first boundary at least ``steps`` later
    or its epoch's end, the steady state from there (from the next boundary where the epoch's
    end cut it short). None where the run ends before the capture
    starts."""

    def first_at_or_after(step: int) -> int | None:
        return next((b for b in boundaries if b >= step), None)

    total = boundaries[-1] if boundaries else 0
    measure_from = first_at_or_after(base)
    first = first_at_or_after(measure_from + measure) if measure_from is not None else None
    if first is None or first >= total:
        return None
    epoch_end = (first // steps_per_epoch + 1) * steps_per_epoch if steps_per_epoch else math.inf
    if epoch_end - first < steps <= steps_per_epoch:
        first, epoch_end = int(epoch_end), epoch_end + steps_per_epoch
        if first >= total:
            return None
    # whole calls: to the first boundary at least `steps` later, or the epoch's end
    after = first_at_or_after(first + steps)
    end = int(min(after if after is not None else total, epoch_end, total))
    # Cut short by its epoch's end, the capture is over once the epoch has ended: the steady
    # state starts at the next epoch's first boundary.
    steady = first_at_or_after(end if end >= first + steps else end + 1)
    return Capture(
        measure_from=measure_from or 0,
        first=first,
        end=end,
        steady_from=steady if steady is not None and steady < total else None,
    )


def why_not(capture: Capture | None, *, total: int, base: int, measure: int, steps: int) -> str:
    """The one line that says why a run of ``total`` steps takes no capture."""
    need = f"the warm-up ({base} steps), the rank measurement ({measure}) and the capture ({steps})"
    if capture is None:
        return (
            f"the run ends in its warm-up: its {total} steps end before {need} are done; "
            "train longer (trainer.max_epochs) or profile fewer steps"
        )
    return (
        f"the run ends in its warm-up: after {need}, rounded to whole training calls, none of "
        f"its {total} steps would be left for the steady state; train longer "
        "(trainer.max_epochs) or profile fewer steps"
    )


def resolve_warmup(
    setting: int | str, steps_per_epoch: int, max_steps: int | None = None
) -> int | None:
    """``trainer.warmup_steps``: ``auto`` is the first epoch, capped for long epochs; where
    the epoch's length is not known before it runs (a loader without a length), the first
    half of ``max_steps`` where that bounds the run, else None: the first epoch, ended when
    its stream ends (or at the cap, whichever comes first)."""
    if setting == "auto":
        if steps_per_epoch > 0:
            return min(steps_per_epoch, WARMUP_AUTO_MAX_STEPS)
        if max_steps:
            return min(max_steps // 2, WARMUP_AUTO_MAX_STEPS)
        return None
    return int(setting)


@dataclass(frozen=True)
class RunLength:
    """What decides where a run's capture falls, all known before it runs."""

    steps_per_epoch: int
    epochs: int
    max_steps: int | None
    steps_per_call: int
    """Optimizer steps in one training call (a built-in loader's group, else 1)."""
    warmup_steps: int
    """The warm-up as resolved (:func:`resolve_warmup`)."""
    measures: bool
    """Whether the ranks' busy time is measured before the capture (``ranks: auto`` on
    several ranks with the diagnosis on)."""


def capture_misfit(run: RunLength, steps: int) -> str | None:
    """Why a capture of ``steps`` steps leaves the run no steady state (the one line the job
    warns with), or None where it fits."""
    boundaries = call_boundaries(
        run.steps_per_epoch, max(1, run.epochs), run.max_steps, run.steps_per_call
    )
    measure = MEASURE_STEPS if run.measures else 0
    capture = plan_capture(
        boundaries, run.steps_per_epoch, base=run.warmup_steps, measure=measure, steps=steps
    )
    if capture is not None and capture.steady_from is not None:
        return None
    total = boundaries[-1] if boundaries else 0
    return why_not(capture, total=total, base=run.warmup_steps, measure=measure, steps=steps)
