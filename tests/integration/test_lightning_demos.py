"""Modules this project did not write: Lightning's own demo classes, unmodified, under
``scalescope train`` at 2 processes (lightning.pytorch.demos.boring_classes).

Each yields one record with the batch its loaders really yielded (batches of 1: the demos'
DataLoaders use the default batch size, whatever trainer.batch_size says), the samples it
counted and a finite throughput; a stream without a length trains, bounded by
``trainer.max_steps`` or by its own end, as Lightning trains it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from core_helpers import TrainRun, run_demo, run_train

from scalescope.config import WARMUP_AUTO_MAX_STEPS

QUIET = ("tracking.mode='off'", "trainer.devices=2")


def _record(run: TrainRun) -> object:
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    assert result.samples_per_s > 0 and result.steady_samples_per_s is not None
    return result


def test_a_sized_data_set_records_the_batch_its_loader_yielded(tmp_path: Path) -> None:
    r = _record(run_demo(tmp_path, "BoringModel", "BoringDataModule", "trainer.max_epochs=2"))
    # 64 training samples split over 2 ranks by the DistributedSampler, batches of 1
    assert r.train_samples == 64 and r.steps_per_epoch == 32 and r.steps == 64
    assert r.identity.per_device_batch_size == 1 and r.identity.global_batch_size == 2
    b = r.batch
    assert b["per_device_mean"] == 1.0 and b["per_device_max"] == 1
    assert b["micro_batches"] == 128 and b["passed"] is None and b["passed_to"] is None
    assert b["data"]["iterable"] is False and "DistributedSampler" in b["data"]["split"]
    assert b["data"]["same_first_batch"] is False and b["warnings"] == []
    assert r.diagnosis["status"] == "recorded"


def test_a_stream_without_a_length_trains_when_bounded(tmp_path: Path) -> None:
    run = run_demo(tmp_path, "BoringModel", "BoringDataModuleNoLen", "trainer.max_steps=40")
    r = _record(run)
    assert r.steps == 40 and r.steps_per_epoch == 40  # what the (cut) epoch ran
    assert r.warmup_steps == 20 and r.steady_steps == 20  # auto: half of max_steps
    assert r.train_samples == 80  # 40 batches of 1 on each of 2 ranks
    b = r.batch
    assert r.identity.per_device_batch_size == 1 and b["per_device_max"] == 1
    assert b["data"]["iterable"] is True and "not split by Lightning" in b["data"]["split"]
    # Every rank seeds the same generator: the demo's stream is the same on both ranks,
    # and the record and the output say so.
    assert b["data"]["same_first_batch"] is True
    assert any("identical" in w for w in b["warnings"]), b["warnings"]
    assert "warning: the 2 ranks' first training batches were identical" in run.stdout


def test_a_finite_stream_nothing_bounds_trains_as_lightning_does(tmp_path: Path) -> None:
    """Lightning's BoringDataModuleNoLen, unmodified and unbounded: each epoch ends when its
    stream does (512 samples, batches of 1, the same stream on both ranks), the warm-up is the
    first epoch, and the output says how such a loader is bounded."""
    run = run_demo(tmp_path, "BoringModel", "BoringDataModuleNoLen", "trainer.max_epochs=3")
    r = _record(run)
    assert r.epochs == 3 and r.steps == 3 * 512 and r.steps_per_epoch == 512
    # auto: the stream's first epoch, capped (at 200 steps) like any long epoch
    assert r.warmup_steps == WARMUP_AUTO_MAX_STEPS and r.steady_steps == 3 * 512 - 200
    assert r.train_samples == 512 * 2  # the first epoch's, every rank's stream summed
    # every sample seen in training, every epoch: what the throughput counts
    assert r.samples_per_s * r.train_time_s == pytest.approx(3 * 512 * 2, rel=1e-6)
    assert "each epoch ends when its stream does" in run.stdout, run.stdout
    assert "until the job's time limit (trainer.max_steps bounds it)" in run.stdout


LINEAR_32_2_FLOPS = 2 * 32 * 2 * 2
"""Training FLOPs per sample of the demos' one Linear(32, 2): the forward's and the weight
gradient's multiply-adds, 2 x 32 x 2 FLOPs each (the input needs no gradient)."""


def test_a_manual_optimization_demo_records(tmp_path: Path) -> None:
    # Its training_step calls self.optimizers(), which a copy without its trainer cannot:
    # the FLOPs are counted on its first real step, in the warm-up, instead.
    run = run_demo(tmp_path, "ManualOptimBoringModel", "BoringDataModule", "trainer.max_epochs=2")
    r = _record(run)
    assert r.steps == 64 and r.identity.per_device_batch_size == 1
    assert r.flops_source == "measured" and r.model_flops_per_sample == LINEAR_32_2_FLOPS
    assert "FLOPs per sample counted on the first training step" in run.stdout, run.stdout


def test_no_warm_up_leaves_a_manual_module_without_flops_and_says_why(tmp_path: Path) -> None:
    # With no warm-up the first step is in the steady state, which the counter must not slow.
    run = run_demo(
        tmp_path,
        "ManualOptimBoringModel",
        "BoringDataModule",
        "trainer.max_epochs=1",
        "trainer.warmup_steps=0",
        devices=1,
    )
    r = _record(run)
    assert r.model_flops_per_sample is None and r.flops_source is None
    assert "FLOPs per sample not measured (RuntimeError:" in run.stdout, run.stdout


TWO_LOADERS = """
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader


class TwoLoaders(BoringModel):
    def train_dataloader(self):
        return {
            "a": DataLoader(RandomDataset(32, 64), batch_size=2),
            "b": DataLoader(RandomDataset(32, 32), batch_size=1),
        }

    def training_step(self, batch, batch_idx):
        return {"loss": self.step(batch["a"]) + self.step(batch["b"])}
"""


def test_several_training_loaders_count_every_loaders_samples(tmp_path: Path) -> None:
    """A dict of two loaders (the demo model, its training step reading both): each rank's
    shard of each, 16 steps an epoch of 2 + 1 samples; FLOPs from one combined batch."""
    (tmp_path / "two_loaders.py").write_text(TWO_LOADERS)
    run = run_train(
        tmp_path,
        *QUIET,
        "workload.name=two_loaders:TwoLoaders",
        "trainer.max_epochs=2",
        output_dir=tmp_path / "out",
    )
    r = _record(run)
    assert r.steps_per_epoch == 16 and r.steps == 32
    assert r.train_samples == 96  # (32 + 16) samples a rank, 2 ranks
    assert r.identity.per_device_batch_size == 3 and r.batch["loaders"] == 2
    assert r.batch["per_device_mean"] == 3.0 and r.batch["per_device_max"] == 3
    assert r.flops_source == "measured" and r.model_flops_per_sample > 0


EMPTY = """
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset, RandomIterableDataset
from torch.utils.data import DataLoader


class NoBatches(BoringModel):
    def train_dataloader(self):
        return DataLoader(RandomDataset(32, 0))


class EmptyStream(BoringModel):
    def train_dataloader(self):
        return DataLoader(RandomIterableDataset(32, 0))
"""


def test_a_loader_that_yields_nothing_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text(EMPTY)
    for cls, bound, words in (
        ("NoBatches", (), "the training loader of NoBatches yielded no batch"),
        ("EmptyStream", ("trainer.max_steps=10",), "the training loader of EmptyStream yielded"),
    ):
        out = tmp_path / cls
        run = run_train(tmp_path, *QUIET, f"workload.name=empty:{cls}", *bound, output_dir=out)
        assert run.returncode == 2, run.describe()
        (line,) = run.stderr.strip().splitlines()
        assert line.startswith(f"scalescope train: error: {words}"), run.stderr
        assert not list(out.rglob("result.json"))
