"""The step-time breakdown's clocks: intervals added into the per-step series of their
collective, on the wall clock and on CUDA events."""

from __future__ import annotations

from typing import Any

import pytest


def _intervals_into_steps(device: Any) -> None:
    """Three intervals of known length into per-step series: two in step 0 of the broadcast
    (they add up, as the broadcasts of one step's micro-batches do), one in step 2 of the
    gradient; step 1 keeps NaN in both, so the ranks' series stay aligned."""
    import time

    import numpy as np
    import torch

    from scalescope.job.diagnosis.step_clock import COLLECTIVES, clock_for

    clock = clock_for(device, COLLECTIVES["ddp"])
    spin = (
        (lambda s: torch.cuda._sleep(int(s * 1.4e9)))  # about s seconds of GPU work
        if device.type == "cuda"
        else time.sleep
    )
    for key, step, seconds in (
        ("broadcast", 0, 0.02),
        ("broadcast", 0, 0.03),
        ("gradient", 2, 0.05),
    ):
        start = clock.mark()
        spin(seconds)
        clock.add("comm_wait_s", start, clock.mark())
        clock.add(key, start, clock.mark(), step=step)
    first = clock.mark()  # two marks read apart, as the bucket readiness reads them
    spin(0.02)
    second = clock.mark()
    clock.settle()
    assert clock.seconds(first, second) == pytest.approx(0.02, rel=0.5)
    bcast, grad = clock.steps["broadcast"], clock.steps["gradient"]
    assert bcast[0] == pytest.approx(0.05, rel=0.5) and grad[2] == pytest.approx(0.05, rel=0.5)
    assert np.isnan(bcast[1]) and np.isnan(grad[1]) and np.isnan(grad[0]) and np.isnan(bcast[2])
    assert clock.totals["comm_wait_s"] == pytest.approx(bcast[0] + grad[2], rel=0.1)


def test_the_wall_clock_adds_intervals_into_their_step() -> None:
    import torch

    _intervals_into_steps(torch.device("cpu"))


@pytest.mark.gpu
def test_cuda_events_add_intervals_into_their_step() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    _intervals_into_steps(torch.device("cuda", torch.cuda.current_device()))
