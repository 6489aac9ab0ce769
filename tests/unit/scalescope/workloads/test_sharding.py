"""What the record's ``sharding`` says FSDP2 gathers (scalescope.workloads.sharding.describe):
a real ``fully_shard`` of the gpt workload's tiny module in a one-rank gloo group in this
process (an in-memory store: no port, no process). That the per-step all-gathers of 2 ranks
move these bytes (the root's once, each block's twice) is tested with 2 processes
(tests/integration/test_fsdp_runs.py)."""

from __future__ import annotations

import pytest
import torch

from scalescope.workloads.gpt import build
from scalescope.workloads.params import GptParams
from scalescope.workloads.sharding import FsdpSetting, describe, shard


def _sharded(precision: str) -> tuple[dict[str, object], torch.nn.Module]:
    model, _ = build(GptParams(), batch_size=4, seed=0)
    shard(model, model.blocks, None, FsdpSetting(precision=precision))
    return describe(model, None, "scalescope"), model


@pytest.mark.usefixtures("one_rank_group")
def test_each_unit_gathers_its_own_parameters_in_forward_order() -> None:
    """gpt tiny: the root (embeddings, the tied LM head counted once, the final norm) and 2
    blocks, by hand from the preset's sizes (width 32, no biases in the linear layers): a
    block is 2 layer norms (2 x 2 x 32), the attention's qkv and projection (96 x 32,
    32 x 32) and the MLP (128 x 32, 32 x 128): 12,416 parameters, 49,664 B in fp32; the
    root, the 64 x 32 token and 32 x 32 position embeddings and the final norm (2 x 32):
    3,136, 12,544 B. Per step of 2 ranks: 12,544 + 2 x 2 x 49,664 = 211,200 B gathered."""
    section, model = _sharded("32")
    assert section["wrapped"] == ["", "blocks.0", "blocks.1"]
    assert section["unit_bytes"] == [12_544, 49_664, 49_664]
    whole = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(section["unit_bytes"]) == whole  # type: ignore[arg-type]


@pytest.mark.usefixtures("one_rank_group")
def test_bf16_gathers_are_counted_in_bf16() -> None:
    """bf16-mixed gathers bf16 parameters (their fp32 shards stay): half the bytes."""
    section, _ = _sharded("bf16-mixed")
    assert section["param_dtype"] == "bfloat16"
    assert section["unit_bytes"] == [6_272, 24_832, 24_832]
