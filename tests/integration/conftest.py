"""Real runs shared across the integration tier: each starts once per session, on first use.

A training run costs seconds of start-up (importing torch and Lightning) before it trains at
all, so every test that only reads a run's record reads one of these instead of starting its
own: the tiny spiral at 1 and 2 processes (also the 1-device baseline of the diagnosis'
injected causes), and the same 2-process run with the diagnosis off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from core_helpers import TINY, TrainRun, run_train

SHARED_JOB_ID = "local-test-shared-id"


@pytest.fixture(scope="session")
def spiral_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two real runs of the same config into one output folder, with the same job id:
    first 1 process, then 2 processes (strong scaling: the same global batch of 64)."""
    root = tmp_path_factory.mktemp("spiral")
    cwd, out = root / "cwd", root / "out"
    cwd.mkdir()
    env = {"SCALESCOPE_JOB_ID": SHARED_JOB_ID}
    one = run_train(cwd, *TINY, output_dir=out, env=env)
    one_result_json = None
    if one.returncode == 0 and one.results():
        # Read before the second run: it must not change the first run's files.
        one_result_json = Path(one.results()[0].identity.run_dir, "result.json").read_bytes()
    two = run_train(cwd, *TINY, "trainer.devices=2", output_dir=out, env=env)
    return {
        "one": one,
        "two": two,
        "cwd": cwd,
        "out": out,
        "job_id": SHARED_JOB_ID,
        "one_result_json": one_result_json,
    }


@pytest.fixture(scope="session")
def spiral_two_no_diagnosis(tmp_path_factory: pytest.TempPathFactory) -> TrainRun:
    """The 2-process run of :func:`spiral_runs` with the diagnosis switched off."""
    out = tmp_path_factory.mktemp("spiral-off")
    return run_train(out, *TINY, "trainer.devices=2", "diagnosis.enabled=false", output_dir=out)
