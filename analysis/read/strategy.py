"""A series' parallel strategy as the analysis reads it: ``ddp`` or ``fsdp``, and under FSDP
the sharding its records say was applied (:func:`fsdp_sharding`).

The record's ``identity.strategy`` is a series key; records made before FSDP carry none, and
a frame or table row without the column is DDP's (:func:`strategy_of`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from scalescope.config import SHARDED

DEFAULT = "ddp"


def is_sharded(strategy: str) -> bool:
    """Whether ``strategy`` shards the module with FSDP2 (its collectives: all-gathers and
    reduce-scatters, under hsdp also an all-reduce across the shard groups)."""
    return strategy in SHARDED


def strategy_of(row: Mapping[str, Any]) -> str:
    """A row's strategy (lower case), ``ddp`` where it does not say."""
    value = row.get("strategy")
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return DEFAULT
    return str(value).strip().lower() or DEFAULT


def frame_strategy(rows: pd.DataFrame) -> str:
    """The strategy of a group's runs (one series: the first run's), ``ddp`` without the
    column."""
    if "strategy" not in rows.columns or rows.empty:
        return DEFAULT
    return strategy_of({"strategy": rows["strategy"].iloc[0]})


# --- FSDP's sharding, as the projection needs it -------------------------------------------

DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}
"""Bytes per element of the dtypes a record's ``sharding`` names."""
OWN_DTYPES = {"bf16-true": "bfloat16", "16-true": "float16", "64-true": "float64", "64": "float64"}
"""The parameters' own dtype under a Lightning precision that converts them (fp32 under
every other, the mixed ones included)."""


@dataclass(frozen=True)
class FsdpSharding:
    """What a series' records say FSDP gathered and reduced (the record's ``sharding``)."""

    unit_bytes: tuple[int, ...] | None
    """Each unit's gathered bytes in forward order, the root first (units without
    parameters of their own, which gather nothing, left out); None where the records
    predate them."""
    reshard_after_forward: bool
    """Whether the blocks gather again before backward (FSDP's default, true, where the
    record cannot say)."""
    param_dtype: str | None
    """What the units gather in (None: the parameters' own dtype)."""
    reduce_dtype: str | None
    """What gradients are reduce-scattered in (None: as gathered)."""
    own_dtype: str = "float32"
    """The parameters' own dtype, which they gather in where ``param_dtype`` is None: as the
    series' precision leaves them (16 bits under ``bf16-true`` / ``16-true``, else fp32)."""
    shard_size: int | None = None
    """Under hybrid sharding (HSDP), the ranks of a shard group (:func:`mesh_shard_size`);
    None under full sharding."""
    root_first: bool = True
    """Whether the first of ``unit_bytes`` is the root's (which FSDP2 keeps gathered from
    forward to backward): False where the root holds no parameters of its own (every one in
    a wrapped block: its empty unit is left out, and the first left is a block, gathered again
    before backward like the rest) or is not a unit (a module that sharded its blocks alone);
    True where the record does not name its units."""

    @property
    def scatter_factor(self) -> float:
        """Bytes reduce-scattered per byte gathered: the size of the dtype torch reduces in
        over the size of the one it gathers in (FSDP2's ``reduce_dtype`` None: the
        ``param_dtype``; ``param_dtype`` None: the parameters' own). 2 for bf16 gathers with
        fp32 reductions (``bf16-mixed``), 0.5 for fp32 parameters reduced in bf16."""
        gathered_dtype = self.param_dtype or self.own_dtype
        gathered = DTYPE_BYTES.get(gathered_dtype)
        reduced = DTYPE_BYTES.get(self.reduce_dtype or gathered_dtype)
        return reduced / gathered if gathered and reduced else 1.0


def fsdp_sharding(rows: pd.DataFrame) -> FsdpSharding | None:
    """The sharding of a series' runs: the first run's whose record holds a ``sharding``
    section (a series shares it: the unsharded sizes do not change with the world size),
    preferring one with ``unit_bytes``; None where no run's record has the section."""
    if "sharding" not in rows.columns:
        return None
    sections = [s for s in rows["sharding"] if isinstance(s, Mapping)]
    if not sections:
        return None
    with_units = [s for s in sections if _unit_bytes(s) is not None]
    s = (with_units or sections)[0]
    reshard = s.get("reshard_after_forward")
    precision = str(rows["precision"].iloc[0]) if "precision" in rows.columns else ""
    return FsdpSharding(
        unit_bytes=_unit_bytes(s),
        reshard_after_forward=reshard if isinstance(reshard, bool) else True,
        param_dtype=_text(s.get("param_dtype")),
        reduce_dtype=_text(s.get("reduce_dtype")),
        own_dtype=OWN_DTYPES.get(precision, "float32"),
        shard_size=mesh_shard_size(rows) if frame_strategy(rows) == "hsdp" else None,
        root_first=_root_first(s),
    )


def mesh_shard_size(rows: pd.DataFrame) -> int | None:
    """The ranks of a shard group as the runs' records name their device mesh (``sharding.
    mesh.shape``, replicate x shard under HSDP: its last dimension); None where no record
    names one."""
    if "sharding" not in rows.columns:
        return None
    for section in rows["sharding"]:
        mesh = section.get("mesh") if isinstance(section, Mapping) else None
        shape = mesh.get("shape") if isinstance(mesh, Mapping) else None
        if isinstance(shape, list) and shape and isinstance(shape[-1], int) and shape[-1] > 0:
            return int(shape[-1])
    return None


def _unit_bytes(section: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The section's ``unit_bytes`` with the empty units left out; None where absent or not
    a list of non-negative integers with some bytes."""
    values = section.get("unit_bytes")
    if not isinstance(values, list):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return None
    kept = tuple(v for v in values if v > 0)
    return kept or None


def _root_first(section: Mapping[str, Any]) -> bool:
    """Whether the first unit :func:`_unit_bytes` keeps is the root: the record's first
    wrapped module is the root (named ``""``) and it gathers some bytes of its own."""
    wrapped, values = section.get("wrapped"), section.get("unit_bytes")
    if not isinstance(wrapped, list) or not wrapped:
        return True
    if wrapped[0] != "":
        return False
    first = values[0] if isinstance(values, list) and values else None
    return not (isinstance(first, int) and first == 0)


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value else None
