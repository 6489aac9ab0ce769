"""HSDP (``trainer.strategy: hsdp``) as the analysis reads it: the model state per device
sharded over a shard group, not the world; its series not projected with a step model that
has no term for it; its advice and captions those of a sharded series."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.compute.plan.memory import memory_columns, shard_ranks
from analysis.compute.projection.project import HSDP_NOT_MODELLED, series_term
from analysis.read.strategy import is_sharded


def _runs(strategy: str, world: int, shard: int, state_gib: float) -> pd.DataFrame:
    mesh = {"dims": ["replicate", "shard"], "shape": [world // shard, shard]}
    return pd.DataFrame(
        [
            {
                "strategy": strategy,
                "sharding": {"mesh": mesh},
                "model_state_gib_max": state_gib,
                "device_memory_gib": 80.0,
            }
        ]
    )


def test_hsdp_shards_the_state_over_a_shard_group_and_keeps_it_beyond() -> None:
    """Shard groups of 2 (a node's devices): 1x2 and 2x2 hold the same state per device,
    half of what one device holds; projected to 4 and 8 nodes it stays there. Under FSDP the
    same records would shard over the world and shrink."""
    measured = [
        {"source": "measured", "world_size": 1, "_rows": _runs("hsdp", 1, 1, 12.0)},
        {"source": "measured", "world_size": 2, "_rows": _runs("hsdp", 2, 2, 7.0)},
        {"source": "measured", "world_size": 4, "_rows": _runs("hsdp", 4, 2, 7.0)},
    ]
    projected = [
        {"source": "projected", "world_size": w, "_rows": _runs("hsdp", 4, 2, 7.0)} for w in (8, 16)
    ]
    got = memory_columns(measured + projected)
    assert [g["model_state_gib"] for g in got] == pytest.approx([12.0, 7.0, 7.0, 7.0, 7.0])
    assert [g["model_state_basis"] for g in got[3:]] == ["sharded: as measured"] * 2
    assert shard_ranks(_runs("hsdp", 8, 2, 7.0), 8) == 2
    assert shard_ranks(_runs("fsdp", 8, 8, 7.0), 8) == 8
    fsdp = [{**r, "_rows": _runs("fsdp", r["world_size"], r["world_size"], 0.0)} for r in measured]
    for r, state in zip(fsdp, (12.0, 7.0, 4.5), strict=True):
        r["_rows"]["model_state_gib_max"] = state
    shrinking = memory_columns(
        [*fsdp, {"source": "projected", "world_size": 16, "_rows": fsdp[-1]["_rows"]}]
    )
    assert shrinking[-1]["model_state_gib"] == pytest.approx(2 + 10 / 16)


def test_an_hsdp_series_is_not_projected_and_says_why() -> None:
    class Group:
        rows = pd.DataFrame([{"strategy": "hsdp", "sharding": {}}])

    term, why = series_term([Group()])
    assert term is None and why == HSDP_NOT_MODELLED


def test_hsdp_is_read_as_sharded() -> None:
    assert is_sharded("hsdp") and is_sharded("fsdp") and not is_sharded("ddp")
