"""A strategy's collectives, named once (scalescope.collectives): DDP's first, in the order the
job's step clock keeps them, and another strategy's registered beside them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scalescope import collectives
from scalescope.collectives import (
    DDP_BROADCAST,
    DDP_GRADIENT,
    FSDP_ALL_GATHER,
    FSDP_REDUCE_SCATTER,
    Collective,
    register,
    series,
)


@pytest.fixture
def registry() -> Iterator[None]:
    """The registry as it was after the test (a test's own strategy does not stay)."""
    saved = dict(collectives.STRATEGIES)
    yield
    collectives.STRATEGIES.clear()
    collectives.STRATEGIES.update(saved)


def gathered(key: str, strategy: str = "tp") -> Collective:
    return Collective(
        key=key,
        strategy=strategy,
        operation="all_gather",
        bus_factor=lambda n: (n - 1) / n,
        wait="before a unit's forward",
        modelled=True,
    )


def test_ddp_is_the_first_strategy_gradient_then_broadcast() -> None:
    """The order is the step clock's per-step series and the record's by_collective: the
    gradient all-reduce first (a step counts where it was timed on every rank)."""
    assert series()[:2] == ("gradient", "broadcast")
    assert collectives.STRATEGIES["ddp"] == (DDP_GRADIENT, DDP_BROADCAST)
    assert (DDP_GRADIENT.operation, DDP_BROADCAST.operation) == ("all_reduce", "broadcast")


def test_the_step_clock_keeps_each_strategys_collectives() -> None:
    from scalescope.job.diagnosis.step_clock import COLLECTIVES

    assert COLLECTIVES == {
        "ddp": ("gradient", "broadcast"),
        "fsdp": ("all_gather", "reduce_scatter", "replica_all_reduce"),
    }


def test_fsdp_registers_beside_ddp() -> None:
    """FSDP2's gathers and reduce-scatters, and under HSDP the all-reduce of each gradient
    shard across the shard groups, which the step model does not time yet."""
    keys = ("gradient", "broadcast", "all_gather", "reduce_scatter", "replica_all_reduce")
    assert series() == keys
    assert collectives.STRATEGIES["fsdp"] == (
        FSDP_ALL_GATHER,
        FSDP_REDUCE_SCATTER,
        collectives.FSDP_REPLICA_ALL_REDUCE,
    )
    assert collectives.FSDP_REPLICA_ALL_REDUCE.operation == "all_reduce"
    assert [c.operation for c in collectives.modelled("fsdp")] == [
        "all_gather",
        "reduce_scatter",
        "all_reduce",
    ]


@pytest.mark.parametrize("world", [1, 2, 8, 64])
def test_bus_factors_are_nccl_tests(world: int) -> None:
    """busbw / algbw: 2 (N - 1) / N for the ring all-reduce, 1 for a broadcast (none on one
    rank: nothing crosses a link)."""
    assert DDP_GRADIENT.bus_factor(world) == pytest.approx(2 * (world - 1) / world)
    assert DDP_BROADCAST.bus_factor(world) == (1.0 if world > 1 else 0.0)
    for c in (FSDP_ALL_GATHER, FSDP_REDUCE_SCATTER):  # (N - 1) / N on the full size
        assert c.bus_factor(world) == pytest.approx((world - 1) / world)


def test_only_the_gradient_all_reduce_is_modelled() -> None:
    assert DDP_GRADIENT.modelled and not DDP_BROADCAST.modelled


@pytest.mark.usefixtures("registry")
def test_another_strategy_registers_beside_ddp_without_changing_it() -> None:
    before = collectives.STRATEGIES["ddp"]
    added = register(gathered("tp_gather"), gathered("tp_scatter"))
    assert series()[-2:] == ("tp_gather", "tp_scatter")
    assert collectives.STRATEGIES["tp"] == added
    assert collectives.STRATEGIES["ddp"] is before


@pytest.mark.usefixtures("registry")
@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(("gradient", "tp"), id="a key taken by DDP"),
        pytest.param(("x", "ddp"), id="the strategy again"),
    ],
)
def test_a_taken_key_or_strategy_is_refused(batch: tuple[str, str]) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(gathered(*batch))
    assert series() == (
        "gradient",
        "broadcast",
        "all_gather",
        "reduce_scatter",
        "replica_all_reduce",
    )


def test_one_strategy_at_a_time() -> None:
    with pytest.raises(ValueError, match="one strategy at a time"):
        register(gathered("a", "tp"), gathered("b", "pp"))
