"""Shared by the tests of the diagnosis: its record section, its cross-rank gather, and the
real runs whose records they read."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

from core_helpers import TrainRun

from scalescope.record import ResultRecord


def windows(rank: int) -> dict[str, Any]:
    """One rank's calibration windows: no_sync 10 ms (+1 ms per rank), synced 4 ms more."""
    return {
        "status": "measured",
        "reason": None,
        "steps": 8,
        "windows": 2,
        "isolates": "all_reduce",
        "fwd_bwd_windows_s": [0.010 + rank * 0.001] * 2,
        "fwd_bwd_sync_windows_s": [0.014 + rank * 0.001] * 2,
        "seconds": 0.5,
    }


def only_result(run: TrainRun) -> ResultRecord:
    """The one record of a run that must have succeeded."""
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    return result


def diag(result: ResultRecord) -> dict[str, Any]:
    """The record's diagnosis section, which must be there."""
    assert result.diagnosis is not None
    return result.diagnosis


def summarize_in_process(*argv: str) -> tuple[int, str, str]:
    """``python -m analysis.summarize ARGV`` in this process: (status, stdout, stderr)."""
    from analysis import summarize

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = summarize.main(list(argv))
    return rc, out.getvalue(), err.getvalue()
