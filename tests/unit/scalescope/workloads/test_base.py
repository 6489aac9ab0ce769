"""The batching every built-in workload shares: each rank's shard of an in-memory data set
(ShardedBatches) and the groups of steps handed to one training_step call (StepGroups).

The core design property is strong-scaling invariance: at a fixed global batch size, the
global batch of step k is the same samples whatever the world size, so runs at different
scales follow the same trajectory.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from scalescope.workloads.base import ShardedBatches, StepGroups
from scalescope.workloads.params import SpiralParams
from scalescope.workloads.spiral import SpiralMLP, make_spirals


def _indexed(n: int) -> tuple[Tensor, Tensor]:
    """A data set whose samples say which index they are (x[i] = [i, -i], y[i] = i)."""
    idx = torch.arange(n)
    return torch.stack([idx.float(), -idx.float()], dim=1), idx


def _epochs(
    n: int, *, global_batch: int, world: int, seed: int = 7, epochs: int = 1
) -> list[list[list[list[int]]]]:
    """[epoch][rank][batch] -> sample indices, each rank iterating its own ShardedBatches."""
    assert global_batch % world == 0
    x, y = _indexed(n)
    loaders = [
        ShardedBatches(
            x,
            y,
            batch_size=global_batch // world,
            rank=r,
            world_size=world,
            seed=seed,
            shuffle=True,
        )
        for r in range(world)
    ]
    out = []
    for _ in range(epochs):
        per_rank = []
        for loader in loaders:
            batches = []
            for bx, by in loader:
                assert torch.equal(bx[:, 0].long(), by)  # x and y stay paired
                batches.append(by.tolist())
            per_rank.append(batches)
        out.append(per_rank)
    return out


def _val(n: int, *, batch: int, world: int) -> list[list[list[int]]]:
    x, y = _indexed(n)
    return [
        [
            by.tolist()
            for _, by in ShardedBatches(
                x, y, batch_size=batch, rank=r, world_size=world, seed=0, shuffle=False
            )
        ]
        for r in range(world)
    ]


# --- training shards ---------------------------------------------------------------------------

N = 103  # not a multiple of the global batch: a remainder is dropped
GLOBAL_BATCH = 12  # divisible by 1, 2, 3, 4


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_training_shards_are_disjoint_and_equal_length(world: int) -> None:
    (epoch,) = _epochs(N, global_batch=GLOBAL_BATCH, world=world)
    lengths = {len(batches) for batches in epoch}
    assert lengths == {N // GLOBAL_BATCH}  # every rank runs the same number of steps
    seen: list[int] = []
    for batches in epoch:
        for batch in batches:
            assert len(batch) == GLOBAL_BATCH // world
            seen += batch
    assert len(seen) == len(set(seen)) == (N // GLOBAL_BATCH) * GLOBAL_BATCH
    assert set(seen) <= set(range(N))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_global_batch_is_the_same_at_every_world_size(world: int) -> None:
    """Strong-scaling invariance: rank slices of step k concatenate to world 1's batch k."""
    (single,) = _epochs(N, global_batch=GLOBAL_BATCH, world=1)
    (many,) = _epochs(N, global_batch=GLOBAL_BATCH, world=world)
    for k, expected in enumerate(single[0]):
        joined = [i for rank in range(world) for i in many[rank][k]]
        assert joined == expected, f"step {k} differs at world {world}"


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 300),
    per_device=st.integers(1, 16),
    world=st.integers(1, 6),
    seed=st.integers(0, 2**31),
)
def test_strong_scaling_invariance_property(n: int, per_device: int, world: int, seed: int) -> None:
    global_batch = per_device * world
    (single,) = _epochs(n, global_batch=global_batch, world=1, seed=seed)
    (many,) = _epochs(n, global_batch=global_batch, world=world, seed=seed)
    assert all(len(batches) == n // global_batch for batches in many)
    for k, expected in enumerate(single[0]):
        assert [i for rank in range(world) for i in many[rank][k]] == expected


def test_epochs_reshuffle_but_runs_repeat() -> None:
    first = _epochs(N, global_batch=GLOBAL_BATCH, world=2, epochs=3)
    again = _epochs(N, global_batch=GLOBAL_BATCH, world=2, epochs=3)
    assert first == again  # same seed, same order: reproducible
    assert first[0] != first[1] != first[2]
    other_seed = _epochs(N, global_batch=GLOBAL_BATCH, world=2, seed=8)
    assert other_seed[0] != first[0]


def test_fewer_samples_than_a_global_batch_gives_no_steps() -> None:
    (epoch,) = _epochs(10, global_batch=12, world=2)
    assert epoch == [[], []]


def test_shards_live_on_the_data_device() -> None:
    x, y = _indexed(40)
    loader = ShardedBatches(x, y, batch_size=4, rank=1, world_size=2, seed=0, shuffle=True)
    assert len(loader) == 5
    bx, by = next(iter(loader))
    assert bx.device == x.device and bx.shape == (4, 2) and by.shape == (4,)


# --- validation shards -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "batch", "world"), [(400, 4096, 1), (400, 64, 3), (5, 2, 4), (3, 8, 4)]
)
def test_validation_covers_every_sample_once_with_equal_counts(
    n: int, batch: int, world: int
) -> None:
    shards = _val(n, batch=batch, world=world)
    assert len({len(batches) for batches in shards}) == 1  # same number of reduce calls
    everything = [i for batches in shards for batch_ in batches for i in batch_]
    assert sorted(everything) == list(range(n))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 500), batch=st.integers(1, 64), world=st.integers(1, 8))
def test_validation_property(n: int, batch: int, world: int) -> None:
    shards = _val(n, batch=batch, world=world)
    assert len({len(batches) for batches in shards}) == 1
    assert all(len(b) <= batch for batches in shards for b in batches)
    everything = [i for batches in shards for b in batches for i in b]
    assert sorted(everything) == list(range(n))


def test_validation_set_smaller_than_the_world() -> None:
    """Reachable from a valid config: num_samples=10, val_fraction=0.1 on 3+ ranks."""
    shards = _val(1, batch=8, world=3)
    assert [len(b) for b in shards] == [1, 1, 1]
    assert [i for batches in shards for b in batches for i in b] == [0]


def test_validation_is_the_same_every_epoch() -> None:
    x, y = _indexed(50)
    loader = ShardedBatches(x, y, batch_size=8, rank=0, world_size=2, seed=0, shuffle=False)
    assert [b.tolist() for _, b in loader] == [b.tolist() for _, b in loader]


# --- gradients: what DDP averages is what one process computes ---------------------------------


def test_mean_of_rank_gradients_equals_the_single_process_gradient() -> None:
    """DDP averages per-rank gradients of equal-size slices; with a mean loss that is the
    gradient of the whole global batch, which is why equal slices matter."""
    torch.manual_seed(0)
    x, y = make_spirals(SpiralParams(num_samples=200))
    model = SpiralMLP([16, 8], 0.0, 1e-3)
    world, global_batch = 4, 48
    loaders = [
        ShardedBatches(
            x, y, batch_size=global_batch // world, rank=r, world_size=world, seed=5, shuffle=True
        )
        for r in range(world)
    ]
    (full_x, full_y), *_ = ShardedBatches(
        x, y, batch_size=global_batch, rank=0, world_size=1, seed=5, shuffle=True
    )

    def grads(bx: Tensor, by: Tensor) -> list[Tensor]:
        model.zero_grad()
        F.cross_entropy(model(bx), by).backward()
        return [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]

    single = grads(full_x, full_y)
    per_rank = [grads(*next(iter(loader))) for loader in loaders]
    averaged = [torch.stack(gs).mean(0) for gs in zip(*per_rank, strict=True)]
    for a, b in zip(averaged, single, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# --- groups of steps -----------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 3, 8, 100])
def test_step_groups_hand_over_the_same_batches_in_the_same_order(k: int) -> None:
    x, y = _indexed(1000)

    def loader() -> ShardedBatches:
        return ShardedBatches(x, y, batch_size=32, rank=1, world_size=2, seed=3, shuffle=True)

    plain = [[b.tolist() for _, b in loader()] for _ in range(1)]
    groups = StepGroups(loader(), k)
    flat = [b.tolist() for group in groups for _, b in group]
    assert flat == plain[0]
    assert groups.num_steps == len(plain[0]) == 15
    assert len(groups) == -(-15 // k)
    assert all(1 <= len(g) <= k for g in groups)
