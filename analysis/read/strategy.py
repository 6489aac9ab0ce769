"""A series' parallel strategy as the analysis reads it: ``ddp`` or ``fsdp``.

The record's ``identity.strategy`` is a series key; records made before FSDP carry none, and
a frame or table row without the column is DDP's (:func:`strategy_of`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

DEFAULT = "ddp"


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
