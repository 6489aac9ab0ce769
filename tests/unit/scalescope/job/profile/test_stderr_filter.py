"""libkineto's USDT marker lines are kept out of a job's stderr; everything else printed
while a capture starts or stops still reaches it."""

from __future__ import annotations

import os

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from scalescope.job.profile.stderr_filter import dropping_lines

MARKER = (
    b"USDT:2026-11-27 14:49:52 11213:11213 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
)


def test_only_the_marker_lines_are_dropped(capfd: pytest.CaptureFixture[str]) -> None:
    with dropping_lines():
        os.write(2, MARKER)
        os.write(2, b"ERROR: kineto says something that matters\n")
        os.write(2, MARKER.replace(b"52] profiler_start", b"59] profiler_stop"))
    err = capfd.readouterr().err
    assert err == "ERROR: kineto says something that matters\n"


def test_a_real_capture_prints_no_marker(capfd: pytest.CaptureFixture[str]) -> None:
    """torch's profiler prints the markers from C++ (the first capture shows it), the filter
    keeps them out of the second."""
    x = torch.ones(8, 8)
    prof = profile(activities=[ProfilerActivity.CPU])
    prof.start()
    _ = x @ x
    prof.stop()
    assert "profiler_start" in capfd.readouterr().err  # what the filter is for
    prof = profile(activities=[ProfilerActivity.CPU])
    with dropping_lines():
        prof.start()
    _ = x @ x
    with dropping_lines():
        prof.stop()
    assert "USDT" not in capfd.readouterr().err
