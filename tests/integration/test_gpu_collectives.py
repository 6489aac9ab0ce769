"""The collectives' kernels on two GPUs (skipped with fewer): the calibration's profiled window
times NCCL's all-reduce kernels on each rank, and the compute split takes the time they ran
alone out of NVML's busy time (scalescope.job.diagnosis.comm_kernels,
scalescope.job.diagnosis.compute_split).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from core_helpers import run_train

pytestmark = pytest.mark.gpu


def test_two_gpus_time_their_collective_kernels_and_split_compute_without_them(
    tmp_path: Path,
) -> None:
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("fewer than 2 CUDA GPUs visible: no NCCL all-reduce between them")
    run = run_train(
        tmp_path,
        "workload.name=gpt",
        "workload.preset=small",
        "workload.train_sequences=1024",
        "workload.val_sequences=64",
        "trainer.batch_size=16",
        "trainer.max_epochs=2",
        "trainer.accelerator=gpu",
        "trainer.devices=2",
        "diagnosis.nvml_interval_s=0.2",
        "tracking.mode=off",
        output_dir=tmp_path / "out",
    )
    assert run.returncode == 0, run.describe()
    (r,) = run.results()
    d = r.diagnosis
    assert d is not None and d["calibration"]["status"] == "measured", d["calibration"]
    parts = d["calibration"]["comm_kernels"]
    assert len(parts) == 2
    for part in parts:
        assert part["status"] == "measured", part
        assert part["collective_kernels"] > 0 and part["kernels"] > part["collective_kernels"]
        assert 0 < part["alone_s"] <= part["kernel_s"]
    split = d["compute_split"]
    if d["nvml"]["status"] != "sampled":  # no NVML on this node: the split says so
        assert split["status"] == "not recorded" and "NVML" in split["reason"]
        return
    assert split["status"] == "recorded" and split["collectives_source"] == "comm_kernels"
    by_rank = {row["rank"]: row for row in d["ranks"]}
    for row, part in zip(split["ranks"], parts, strict=True):
        rank = by_rank[row["rank"]]
        syncs = rank.get("syncs_per_step", 1.0)
        alone = part["alone_s"] * syncs + max(0.0, rank.get("wait_s", 0.0))
        assert row["comm_alone_s"] == pytest.approx(alone)
        busy = row["gpu_util_pct"] / 100 * rank["step_time_s"]
        assert row["gpu_work_s"] == pytest.approx(min(max(busy - alone, 0.0), rank["compute_s"]))
