"""Shared by the tests of the diagnosis' record section and of its cross-rank gather."""

from __future__ import annotations

from typing import Any


def windows(rank: int) -> dict[str, Any]:
    """One rank's calibration windows: no_sync 10 ms (+1 ms per rank), synced 4 ms more."""
    return {
        "status": "measured",
        "reason": None,
        "steps": 8,
        "windows": 2,
        "fwd_bwd_windows_s": [0.010 + rank * 0.001] * 2,
        "fwd_bwd_sync_windows_s": [0.014 + rank * 0.001] * 2,
        "seconds": 0.5,
    }
