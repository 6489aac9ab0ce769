"""Gradient accumulation (``trainer.accumulate_grad_batches``) in real 2-process runs.

A built-in workload splits each device's batch into micro-batches in its own step loop; a
user's module gets Lightning's accumulation over its loader's batches. Either way the record
counts optimizer steps and the samples of each, DDP all-reduces once per optimizer step (the
diagnosis counts the backwards that asked for it), and the trajectory of a built-in workload
is the one without accumulation: the gradient of the whole batch, summed in parts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from core_helpers import TINY, run_demo, run_train


def test_a_built_in_workload_accumulates_to_the_same_trajectory(
    tmp_path: Path, spiral_runs: dict[str, Any]
) -> None:
    run = run_train(
        tmp_path, *TINY, "trainer.devices=2", "trainer.accumulate_grad_batches=4",
        output_dir=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.describe()
    assert "batch 32/device 64 global (strong scaling) in 4 micro-batches of 8" in run.stdout
    (acc,) = run.results()
    (plain,) = spiral_runs["two"].results()
    assert acc.identity.accumulate_grad_batches == 4
    assert plain.identity.accumulate_grad_batches == 1
    # The batch of an optimizer step is the configured one; only its passes are split.
    assert (acc.identity.per_device_batch_size, acc.identity.global_batch_size) == (32, 64)
    assert acc.steps == plain.steps and acc.steps_per_epoch == plain.steps_per_epoch
    assert acc.train_samples == plain.train_samples
    # Four gradients of 8 samples, each loss divided by 4, summed: the gradient of the 32
    # (up to the order of floating-point sums), so the same model after every step.
    assert acc.val_loss_final == pytest.approx(plain.val_loss_final, rel=1e-4)
    assert acc.val_acc_final == pytest.approx(plain.val_acc_final, abs=1e-3)
    # One gradient all-reduce per optimizer step, on every rank, with or without it.
    for r in (acc, plain):
        d = r.diagnosis
        assert d["status"] == "recorded" and d["syncs_per_step"] == 1.0
        assert [rank["syncs_per_step"] for rank in d["ranks"]] == [1.0, 1.0]
        assert d["step_waits"]["steps"] == r.steady_steps  # one wait per optimizer step


def test_a_user_module_accumulates_with_lightning(tmp_path: Path) -> None:
    """Lightning's BoringModel, unmodified: 32 batches of 1 per rank and epoch, 3 per
    optimizer step, so 11 steps an epoch (the last one of 2 batches: Lightning steps at an
    epoch's end whatever is accumulated)."""
    run = run_demo(
        tmp_path,
        "BoringModel",
        "BoringDataModule",
        "trainer.max_epochs=2",
        "trainer.accumulate_grad_batches=3",
    )
    assert run.returncode == 0, run.describe()
    (r,) = run.results()
    assert r.steps_per_epoch == 11 and r.steps == 22
    assert r.train_samples == 64 and r.identity.accumulate_grad_batches == 3
    b = r.batch
    assert b["accumulate_grad_batches"] == 3 and b["optimizer_steps"] == 22
    assert b["micro_batches"] == 128 and b["micro_batch_max"] == 1
    assert b["micro_batch_mean"] == 1.0
    # 128 samples over 2 ranks and 22 steps; the largest step took 3
    assert b["per_device_mean"] == pytest.approx(128 / 44) and b["per_device_max"] == 3
    assert r.identity.per_device_batch_size == 3 and r.identity.global_batch_size == 6
    assert r.samples_per_s > 0 and r.steady_samples_per_s is not None
    d = r.diagnosis
    # Lightning's accumulation runs the first two backwards under DDP's no_sync
    assert d["status"] == "recorded" and d["syncs_per_step"] == 1.0
    assert d["step_waits"]["steps"] == r.steady_steps


def test_accumulation_for_a_module_that_optimizes_manually_is_one_line(tmp_path: Path) -> None:
    run = run_demo(
        tmp_path,
        "ManualOptimBoringModel",
        "BoringDataModule",
        "trainer.accumulate_grad_batches=2",
        devices=1,
    )
    assert run.returncode == 2, run.describe()
    assert run.stderr.strip().splitlines() == [
        "scalescope train: error: trainer.accumulate_grad_batches: ManualOptimBoringModel "
        "optimizes manually (automatic_optimization = False), and Lightning accumulates "
        "gradients for automatic optimization only; accumulate in its training_step and "
        "leave trainer.accumulate_grad_batches at 1 (got 2)"
    ]
    assert not list(tmp_path.rglob("result.json"))
