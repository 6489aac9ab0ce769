"""What the diagnosis' unit tests share: a real gloo process group of one rank."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch.distributed as dist


@pytest.fixture
def one_rank_group() -> Iterator[None]:
    """A real gloo process group of one rank (an in-memory store: no port, no process)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
