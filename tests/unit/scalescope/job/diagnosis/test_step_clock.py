"""The step-time breakdown's clocks: intervals added into the per-step series of their
collective, on the wall clock and on CUDA events."""

from __future__ import annotations

from typing import Any

import pytest


def _intervals_into_steps(device: Any) -> None:
    """Three intervals into per-step series: two in step 0 of the broadcast (they add up, as
    the broadcasts of one step's micro-batches do), one in step 2 of the gradient; step 1 keeps
    NaN in both, so the ranks' series stay aligned. Each step holds exactly the sum of the
    clock's own intervals, and each interval lasts at least what was slept (on a busy machine
    a sleep overruns, never falls short), so the checks hold however loaded the machine is."""
    import time

    import numpy as np
    import torch

    from scalescope.job.diagnosis.step_clock import COLLECTIVES, clock_for

    clock = clock_for(device, COLLECTIVES["ddp"])
    cuda = device.type == "cuda"
    spin = (lambda s: torch.cuda._sleep(int(s * 1.4e9))) if cuda else time.sleep
    least = 0.5 if cuda else 1.0  # GPU cycles a second vary by part: about s seconds of work
    spans = []
    for key, step, seconds in (
        ("broadcast", 0, 0.02),
        ("broadcast", 0, 0.03),
        ("gradient", 2, 0.05),
    ):
        start = clock.mark()
        spin(seconds)
        waited = clock.mark()
        clock.add("comm_wait_s", start, waited)
        end = clock.mark()
        clock.add(key, start, end, step=step)
        spans.append((key, step, seconds, start, waited, end))
    first = clock.mark()  # two marks read apart, as the bucket readiness reads them
    spin(0.02)
    second = clock.mark()
    clock.settle()
    assert least * 0.02 <= clock.seconds(first, second) < 0.02 + 5.0
    took = [(key, step, clock.seconds(a, c)) for key, step, _, a, _, c in spans]
    for (_, _, seconds, *_), (_, _, t) in zip(spans, took, strict=True):
        assert least * seconds <= t < seconds + 5.0, took
    bcast, grad = clock.steps["broadcast"], clock.steps["gradient"]
    assert bcast[0] == pytest.approx(took[0][2] + took[1][2], rel=1e-9), (bcast, took)
    assert grad[2] == pytest.approx(took[2][2], rel=1e-9), (grad, took)
    assert np.isnan(bcast[1]) and np.isnan(grad[1]) and np.isnan(grad[0]) and np.isnan(bcast[2])
    waits = sum(clock.seconds(a, b) for *_, a, b, _ in spans)
    assert clock.totals["comm_wait_s"] == pytest.approx(waits, rel=1e-9)


def test_the_wall_clock_adds_intervals_into_their_step() -> None:
    import torch

    _intervals_into_steps(torch.device("cpu"))


@pytest.mark.gpu
def test_cuda_events_add_intervals_into_their_step() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    _intervals_into_steps(torch.device("cuda", torch.cuda.current_device()))
