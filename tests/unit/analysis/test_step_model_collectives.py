"""The step model's network term reads its collective from the registry
(scalescope.collectives): what it times, and the bytes one message puts on the busiest link."""

from __future__ import annotations

import pytest

from analysis.compute.projection.step_time.step_model import NETWORK_TERM, Level, allreduce_s
from scalescope.collectives import DDP_GRADIENT, link_bytes, modelled


def test_the_network_term_is_ddps_gradient_all_reduce() -> None:
    assert modelled("ddp") == (DDP_GRADIENT,)
    assert NETWORK_TERM is DDP_GRADIENT


@pytest.mark.parametrize("world", [2, 8, 512])
def test_the_step_model_times_the_registered_collectives_traffic(world: int) -> None:
    """t(n, N) = alpha log2 N / log2 p + bytes on the busiest link / busbw, the bytes from the
    registry (a ring all-reduce's 2 (N - 1) / N of the message)."""
    level = Level(alpha_s=1e-5, busbw_gbps=10.0, at_world=2, source="measured")
    nbytes = 25 * 2**20
    assert link_bytes(NETWORK_TERM, nbytes, world) == pytest.approx(
        nbytes * 2 * (world - 1) / world
    )
    expected = 1e-5 * (world.bit_length() - 1) + nbytes * 2 * (world - 1) / world / 10e9
    assert allreduce_s(level, nbytes, world) == pytest.approx(expected)
