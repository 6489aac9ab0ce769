"""The clocks of the per-rank step-time breakdown (:mod:`.step_breakdown`).

On the CPU the marks are the wall clock. On GPUs they are CUDA events on the current stream,
read lazily (never waited for inside the loop): the gap between two events is the time the
device idled or waited between them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ...collectives import STRATEGIES, keys

MAX_STEP_RECORDS = 1 << 16
"""Steady-state steps whose communication waits are kept one by one (8 bytes each and
collective, preallocated); later steps still count in the totals."""

COLLECTIVES: dict[str, tuple[str, ...]] = {strategy: keys(strategy) for strategy in STRATEGIES}
"""Per strategy, the collectives a training step waits in, each kept per step, as
:mod:`scalescope.collectives` registers them. DDP: its gradient all-reduce (from backward's
last gradient to ``backward`` returning) and, for modules with buffers, its broadcast of them
before forward (from the training call's start to the module's forward). FSDP: its
all-gathers and reduce-scatters (:mod:`.sharded.waits`). The first key of each is the one every
counted step has."""


class Clock:
    """Marks and accumulated intervals: the wall clock on CPUs, CUDA events on GPUs.

    ``add(..., step=i)`` also adds the interval into slot ``i`` of the per-step series
    ``steps[key]`` (preallocated for the keys named at construction): a step with no interval
    of that key keeps NaN, so the series of all ranks stay aligned step for step, and several
    intervals of one step (one buffer broadcast per micro-batch) add up in its slot.
    """

    kind = "wall"

    def __init__(self, series: Sequence[str] = (), capacity: int = MAX_STEP_RECORDS) -> None:
        self.totals: dict[str, float] = {}
        self.steps = {key: np.full(capacity, np.nan) for key in series}

    def mark(self) -> Any:
        return time.perf_counter()

    def add(self, key: str, start: Any, end: Any, *, step: int | None = None) -> None:
        self._count(key, end - start, step)

    def _count(self, key: str, seconds: float, step: int | None) -> None:
        self.totals[key] = self.totals.get(key, 0.0) + seconds
        if step is None:
            return
        series = self.steps.get(key)
        if series is not None and 0 <= step < len(series):
            old = series[step]
            series[step] = seconds if np.isnan(old) else old + seconds

    def settle(self) -> None:
        """Resolve everything pending (call where the device was synchronised)."""

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds from one mark to a later one (on GPUs: once both events completed)."""
        return float(end - start)


class CudaClock(Clock):
    kind = "cuda_events"
    _MAX_PENDING = 1024

    def __init__(
        self, device: torch.device, series: Sequence[str] = (), capacity: int = MAX_STEP_RECORDS
    ) -> None:
        super().__init__(series, capacity)
        self.device = device
        self.pending: list[tuple[str, Any, Any, int | None]] = []
        self._spare: list[Any] = []

    def mark(self) -> Any:
        event = self._spare.pop() if self._spare else torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def add(self, key: str, start: Any, end: Any, *, step: int | None = None) -> None:
        # The step's slot is known now; its value when the events have completed.
        self.pending.append((key, start, end, step))
        if len(self.pending) > self._MAX_PENDING:
            self._drain(block=False)

    def _drain(self, *, block: bool) -> None:
        done = 0
        for key, start, end, step in self.pending:
            if not block and not (end.query() and start.query()):
                break
            if block:
                start.synchronize()
                end.synchronize()
            self._count(key, start.elapsed_time(end) / 1000.0, step)
            done += 1
        for _, start, end, _ in self.pending[:done]:
            if len(self._spare) < 2 * self._MAX_PENDING:
                self._spare += [start, end]
        del self.pending[:done]

    def settle(self) -> None:
        self._drain(block=True)

    def seconds(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(start.elapsed_time(end)) / 1000.0


def clock_for(device: torch.device, series: Sequence[str]) -> Clock:
    return CudaClock(device, series) if device.type == "cuda" else Clock(series)
