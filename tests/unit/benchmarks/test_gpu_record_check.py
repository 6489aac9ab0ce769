"""The GPU check reads what the job writes: records whose diagnosis comes from the job's own
section builders (the compute split of a 1-GPU run, NVML sampled), read by the same function
the script runs. The script once read ``gpu_busy_share``, a key no record holds, and would
have reported its own mistake as the GPU run's failure."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from analysis_helpers import REPO

from scalescope.job.diagnosis.compute_split import compute_split

SCRIPT = REPO / "benchmarks" / "gpu_record_check.py"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_record_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(clock: str, util_pct: float | None) -> dict[str, Any]:
    """A 1-GPU run's record: a 10 ms step of 1 ms input wait and 9 ms compute."""
    rank = {
        "rank": 0,
        "node": "gpu01",
        "local_rank": 0,
        "step_time_s": 0.010,
        "input_wait_s": 0.001,
        "compute_s": 0.009,
        "comm_wait_s": 0.0,
        "syncs_per_step": 1,
        "wait_s": 0.0,
    }
    nvml = (
        {"status": "sampled", "gpus": [{"node": "gpu01", "index": 0, "util_mean_pct": util_pct}]}
        if util_pct is not None
        else {"status": "unavailable", "reason": "no NVML on this node"}
    )
    return {
        "diagnosis": {
            "status": "recorded",
            "clock": clock,
            "ranks": [rank],
            "compute_split": compute_split([rank], nvml, clock),
        }
    }


def test_a_gpu_record_shows_the_idle_share_of_compute() -> None:
    # NVML busy 45% of a 10 ms step: 4.5 ms of kernels in 9 ms of compute, the GPU idle half
    line, ok = _script().record_line(_record("cuda_events", 45.0))
    assert ok, line
    assert line == (
        "clock cuda_events, step 10.00 ms = input 1.00 + compute 9.00 ms; GPU idle 50% of compute"
    )


def test_a_record_without_a_split_fails_the_check_with_its_reason() -> None:
    line, ok = _script().record_line(_record("cuda_events", None))
    assert not ok
    assert "compute split not recorded: NVML did not sample the GPUs" in line
    line, ok = _script().record_line(_record("wall", 45.0))
    assert not ok and "a CPU run" in line


def test_the_command_reads_the_run_folders_one_record(tmp_path: Path, capsys: Any) -> None:
    run = tmp_path / "runs" / "resnet" / "r0"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps(_record("cuda_events", 45.0)))
    assert _script().main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.endswith("GPU idle 50% of compute\n")
    assert _script().main([str(tmp_path / "runs" / "none")]) == 1
