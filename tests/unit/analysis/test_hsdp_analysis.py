"""HSDP (``trainer.strategy: hsdp``) as the analysis reads it: the model state per device
sharded over a shard group, not the world; its advice and captions those of a sharded series
(its projection: test_hsdp_projection.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.compute.plan.memory import memory_columns, shard_ranks
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


def test_hsdp_is_read_as_sharded() -> None:
    assert is_sharded("hsdp") and is_sharded("fsdp") and not is_sharded("ddp")


def _diag(nodes: list[str], replica_s: float | None) -> dict:
    """Ranks on ``nodes``; rank 0 the typical one, its exposed all-reduce across shard
    groups ``replica_s`` (None: not in the record)."""
    ranks = []
    for i, node in enumerate(nodes):
        row = {"rank": i, "node": node}
        if replica_s is not None:
            row["by_collective"] = {
                "all_gather": {"exposed_s": 0.004, "wait_s": 0.0},
                "replica_all_reduce": {"exposed_s": replica_s, "wait_s": 0.0},
            }
        ranks.append(row)
    return {"ranks": ranks}


SHARD_BY_NODE = {"mesh": {"groups": {"shard": [[0, 1], [2, 3]], "replicate": [[0, 2], [1, 3]]}}}


@pytest.mark.parametrize(
    ("nodes", "strategy", "sharding", "replica", "expected"),
    [
        (1, "ddp", None, None, 0.0),  # one node: all within it
        (2, "ddp", None, None, 0.010),  # every collective spans the nodes
        (2, "fsdp", None, None, 0.010),
        (2, "hsdp", SHARD_BY_NODE, 0.006, 0.006),  # its all-reduce across the nodes only
        (2, "hsdp", {"mesh": {"groups": {"shard": [[0, 2], [1, 3]]}}}, 0.006, 0.010),
    ],
    ids=["1 node", "ddp", "fsdp", "hsdp by node", "hsdp groups span nodes"],
)
def test_the_exposed_communication_between_nodes(
    nodes: int, strategy: str, sharding: dict | None, replica: float | None, expected: float
) -> None:
    from analysis.compute.run_parts import RunParts, inter_node

    parts = RunParts(t_s=0.01, per_device_batch_size=8, comm_step_s=0.010, typical_rank=0)
    diagnosis = _diag(["a", "a", "b", "b"], replica)
    inter, note = inter_node(parts, diagnosis, nodes, strategy, sharding)
    assert inter == pytest.approx(expected) and note


def test_hsdp_without_its_all_reduce_timed_apart_says_so() -> None:
    from analysis.compute.run_parts import RunParts, inter_node

    parts = RunParts(t_s=0.01, per_device_batch_size=8, comm_step_s=0.010, typical_rank=0)
    inter, note = inter_node(parts, _diag(["a", "a", "b", "b"], None), 2, "hsdp", SHARD_BY_NODE)
    assert inter != inter and "not timed apart" in note  # NaN, and why


def test_the_advice_speaks_full_against_hybrid_where_communication_crosses_nodes() -> None:
    from analysis.compute.findings import fsdp_comm_advice

    row = {"accelerator": "cuda", "nodes": 4, "comm_inter_pts_mean": 12.3}
    full = fsdp_comm_advice({**row, "strategy": "fsdp"})
    assert "hybrid sharding (trainer.strategy: hsdp)" in full and "12.3 pts" in full
    hybrid = fsdp_comm_advice({**row, "strategy": "hsdp"})
    assert "a larger fsdp.shard_size" in hybrid and "reshard_after_forward: false" in hybrid
    one_node = fsdp_comm_advice({**row, "nodes": 1, "strategy": "fsdp"})
    assert "hsdp" not in one_node and "bf16 gathers" in one_node
    # as the waterfall table gives it: a row of numpy numbers
    table_row = pd.DataFrame([{**row, "strategy": "fsdp"}]).iloc[0]
    assert "hybrid sharding (trainer.strategy: hsdp)" in fsdp_comm_advice(table_row)
    assert "12.3 pts" in fsdp_comm_advice(table_row)
