"""Shared by the tracking tests of the unit and integration tiers."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

from scalescope.record import read_result_json

FAKE_KEY = "FAKEKEY-scalescope-0123456789abcdef"

NAME = "spiral-1n2d-4242"

RECORD: dict[str, Any] = {
    "event": "result",
    "schema_version": 1,
    "job_id": "4242",
    "run_id": "4242.r0",
    "steps": 62,
    "epochs": 2,
    "setup_time_s": 7.5,
    "train_time_s": 0.3,
    "mean_epoch_time_s": 0.15,
    "mean_epoch_time_excl_first_s": 0.14,
    "samples_per_s": 52000.0,
    "samples_per_s_per_device": 26000.0,
    "step_time_s": None,
    "mfu": None,
    "peak_mem_gib": None,
    "peak_host_rss_gib": [0.43, 0.41],
    "epoch_times_s": [0.16, 0.14],
    "node_names": ["node1", "node2"],
    "versions": {"torch": "2.13.0", "lightning": "2.6.6"},
    "config": {"tracking": {"mode": "auto"}},
    "tracking": {},
}


def archives(directory: Path) -> list[Path]:
    """Every Comet offline archive under directory, sorted."""
    return sorted(directory.rglob("*.zip"))


def one_result(out: Path) -> Any:
    """The result.json of the one run under out (fails when there is not exactly one)."""
    found = glob.glob(str(out / "runs" / "*" / "*" / "result.json"))
    assert len(found) == 1, found
    return read_result_json(found[0])
