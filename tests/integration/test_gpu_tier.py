"""The GPU tier: what a user on a node with one GPU runs, end to end (skipped without CUDA).

A local 1-GPU sweep over precision (32 and bf16-mixed), once eager and once with
``trainer.compile``, summarised by the real command: the MFU column in the tables, the NVML
figures (utilisation, training and validation memory) and the compute split in the tables,
summary.json and report.html. ``benchmarks/gpu_check.sh`` runs this tier on a GPU node.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from core_helpers import clean_env
from sweep_helpers import write_sweep

pytestmark = pytest.mark.gpu

TRAIN = """\
name: gpt-gpu
workload: {name: gpt, preset: small, train_sequences: 2048, val_sequences: 128}
trainer: {scaling: strong, batch_size: 16, max_epochs: 2, accelerator: gpu}
diagnosis: {nvml_interval_s: 0.2}
tracking: {mode: "off"}
"""


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    root = tmp_path_factory.mktemp("gpu-tier")
    sweep = write_sweep(
        root, shapes=((1, 1),), train=TRAIN, extra='precisions: ["32", "bf16-mixed"]\n'
    )
    dirs = []
    for compiled in ("false", "true"):
        sweep_id = f"gpu-compile-{compiled}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "scalescope.cli",
                "sweep",
                "--config",
                str(sweep),
                "--executor",
                "local",
                "--sweep-id",
                sweep_id,
                "--repeats",
                "1",
                f"trainer.compile={compiled}",
            ],
            cwd=root,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        dirs.append(root / "outputs" / "sweeps" / sweep_id)
    out = root / "summary"
    proc = subprocess.run(
        [sys.executable, "-m", "analysis.summarize", *map(str, dirs), "--out", str(out)],
        cwd=root,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.timeout(1800)
def test_the_gpu_sweep_is_summarised_with_mfu_memory_and_the_compute_split(
    summary: Path,
) -> None:
    doc = json.loads((summary / "summary.json").read_text())
    runs = doc["runs"]
    assert len(runs) == 4  # 2 precisions x eager/compiled
    for r in runs:
        assert r["accelerator"] == "gpu"
        assert r["peak_mem_gib_max"] > 0 and r["val_peak_mem_gib_max"] > 0
        assert 0 < r["gpu_util_pct"] <= 100
        assert 0 <= r["gpu_idle_share"] <= 1
    bf16 = [r for r in runs if r["precision"] == "bf16-mixed"]
    assert all(r["steady_mfu"] is not None and r["steady_mfu"] > 0 for r in bf16)
    html = (summary / "report.html").read_text()
    for shown in ("MFU", "GPU util (NVML)", "GPU idle in compute", "Peak mem train/val"):
        assert shown in html, shown
