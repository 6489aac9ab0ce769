"""What the scalescope package's unit tests share: a real gloo process group of one rank,
for FSDP2's ``fully_shard`` (the sharding, the taps, the calibration) in this process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def one_rank_group() -> Iterator[None]:
    """A real gloo process group of one rank (an in-memory store: no port, no process)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
