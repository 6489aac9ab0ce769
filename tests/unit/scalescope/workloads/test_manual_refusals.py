"""A user's module that optimizes manually, asked to accumulate or clip (what Lightning does
for automatic optimization only), is refused in one line before anything runs or is
submitted: built on the meta device by the checks, the same line as the job's own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from user_module_helpers import QUIET, assert_train_refused, write_package

from scalescope import cli
from scalescope.config import check_workload, load_train_config, resolve_batch

BORING = "lightning.pytorch.demos.boring_classes"
MANUAL = (
    f"workload.name={BORING}:ManualOptimBoringModel",
    f"workload.datamodule={BORING}:BoringDataModule",
)
CLIP_LINE = (
    "trainer.gradient_clip_val: ManualOptimBoringModel optimizes manually "
    "(automatic_optimization = False), and Lightning clips gradients for automatic "
    "optimization only; call self.clip_gradients(optimizer, ...) before its optimizer steps "
    "and leave trainer.gradient_clip_val null (got 1.0)"
)
ACCUMULATE_LINE = (
    "trainer.accumulate_grad_batches: ManualOptimBoringModel optimizes manually "
    "(automatic_optimization = False), and Lightning accumulates gradients for automatic "
    "optimization only; accumulate in its training_step and leave "
    "trainer.accumulate_grad_batches at 1 (got 2)"
)

# Reads a tensor's value in its constructor: no meta build, so only the job can tell.
VALUE_READER = """
import lightning as L
import torch


class ReadsValues(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.layer = torch.nn.Linear(4, 1)
        self.scale = float(self.layer.weight.abs().sum().item()) + 1.0

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=4)
"""


# Loads its weights in its constructor (a stand-in: it leaves a mark where it was built).
LOADS_WEIGHTS = """
import os

import lightning as L
import torch


class LoadsWeights(L.LightningModule):
    def __init__(self, mark: str):
        super().__init__()
        open(mark, "a").close()
        self.layer = torch.nn.Linear(4, 1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=4)
"""


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.mark.parametrize(
    ("asked", "line"),
    [
        (("trainer.gradient_clip_val=1.0",), CLIP_LINE),
        (("trainer.accumulate_grad_batches=2",), ACCUMULATE_LINE),
        # both asked: the accumulation is named, as the job names it
        (("trainer.gradient_clip_val=1.0", "trainer.accumulate_grad_batches=2"), ACCUMULATE_LINE),
    ],
    ids=["clip", "accumulate", "both"],
)
def test_train_refuses_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], asked: tuple[str, ...], line: str
) -> None:
    argv = [*QUIET, *MANUAL, "trainer.batch_size=4", *asked]
    assert_train_refused(capsys, tmp_path / "out", argv, line)


def test_a_sweep_is_refused_before_submitting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.yaml").write_text(
        f"workload:\n  name: {BORING}:ManualOptimBoringModel\n"
        f"  datamodule: {BORING}:BoringDataModule\n"
        "trainer:\n  batch_size: 4\n  gradient_clip_val: 1.0\ntracking:\n  mode: 'off'\n"
    )
    (tmp_path / "sweep.yaml").write_text(
        "name: hand\ntrain_config: train.yaml\nshapes:\n  - {nodes: 1, devices_per_node: 1}\n"
        "repeats: 1\norder_seed: 1\ntimeout_min: 10\n"
    )
    rc = cli.main(["sweep", "--config", "sweep.yaml", "--executor", "local"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("scalescope sweep: error: "), err
    assert CLIP_LINE in err, err
    assert not (tmp_path / "outputs").exists()


def test_what_optimizes_automatically_or_cannot_be_built_on_meta_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = ["trainer.gradient_clip_val=1.0", "trainer.accumulate_grad_batches=2"]
    auto = [f"workload.name={BORING}:BoringModel", f"workload.datamodule={BORING}:BoringDataModule"]
    cfg = load_train_config(None, [*auto, "trainer.batch_size=4", *asked])
    assert check_workload(cfg, resolve_batch(cfg.trainer, 1)) is not None
    # the same module manually, but unbuildable on meta: left to the job (which refuses it)
    write_package(tmp_path, "valpkg", VALUE_READER)
    monkeypatch.chdir(tmp_path)
    sys.path.insert(0, str(tmp_path))
    cfg = load_train_config(None, ["workload.name=valpkg.model:ReadsValues", *asked])
    assert check_workload(cfg, resolve_batch(cfg.trainer, 1)) is not None


def test_a_module_that_never_mentions_manual_optimization_is_not_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a module whose classes' source mentions ``automatic_optimization`` is built to ask
    it: one that loads weights in its constructor is not built on the submitting machine."""
    write_package(tmp_path, "wpkg", LOADS_WEIGHTS)
    monkeypatch.chdir(tmp_path)
    sys.path.insert(0, str(tmp_path))
    mark = tmp_path / "built"
    cfg = load_train_config(
        None,
        [
            "workload.name=wpkg.model:LoadsWeights",
            f"workload.init_args.mark={mark}",
            "trainer.gradient_clip_val=1.0",
            "trainer.accumulate_grad_batches=2",
        ],
    )
    assert check_workload(cfg, resolve_batch(cfg.trainer, 1)) is not None
    assert not mark.exists()
