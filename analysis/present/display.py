"""What a display table is, and how its numbers are written for people.

A :class:`DisplayTable` is a frame of strings with a title and caption; the same tables
render as Markdown (report, ``--format markdown``) and as rich tables (terminal), see
:mod:`analysis.present.tables.tables`. Machine formats (CSV, JSON) use the numeric frames, never
these strings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

MISSING = "—"


@dataclass
class DisplayTable:
    name: str
    """Machine name (``summary``, ``speedup``...), also the CSV file stem of its numbers."""
    title: str
    frame: pd.DataFrame
    caption: list[str] = field(default_factory=list)
    right: set[str] = field(default_factory=set)
    """Columns aligned right (numbers)."""


def is_missing(x: Any) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def num(x: Any, digits: int = 2) -> str:
    if is_missing(x):
        return MISSING
    return f"{float(x):,.{digits}f}"


def sig(x: Any, digits: int = 4) -> str:
    """Four significant digits, no exponent for the sizes met here."""
    if is_missing(x):
        return MISSING
    x = float(x)
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def times(x: Any) -> str:
    return MISSING if is_missing(x) else f"{float(x):.2f}x"


def pct(x: Any, digits: int = 1) -> str:
    return MISSING if is_missing(x) else f"{100 * float(x):.{digits}f}%"


def with_ci(x: Any, lo: Any, hi: Any, kind: str = "x") -> str:
    """``3.57x [3.42, 3.73]`` or ``89.3% [85.4, 93.3]``; the value alone without an interval."""
    if is_missing(x):
        return MISSING
    if kind == "%":
        core = pct(x)
        ci = f" [{100 * lo:.1f}, {100 * hi:.1f}]" if not (is_missing(lo) or is_missing(hi)) else ""
    else:
        core = f"{float(x):.2f}x"
        ci = f" [{lo:.2f}, {hi:.2f}]" if not (is_missing(lo) or is_missing(hi)) else ""
    return core + ci


def devices_header(accelerators: Sequence[Any]) -> str:
    """ "GPUs" only when every run used GPUs; CPU processes are not GPUs."""
    values = {str(a) for a in accelerators if not is_missing(a)}
    return "GPUs" if values == {"gpu"} else "Devices"
