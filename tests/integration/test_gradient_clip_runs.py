"""trainer.gradient_clip_val clips what it says, for a built-in workload (whose step loop is
its own, Lightning clipping only automatic optimization) and for a user's module (Lightning
clips it), and a user's module that optimizes by hand is refused in one line.

Clipping every gradient element into [-1e-12, 1e-12] (or their norm to 1e-12) leaves Adam's
steps about 1e-4 of their size (its epsilon, 1e-8, dominates the normalisation): the same
seeded run learns without it and stays at its initial loss with it, a difference far beyond
run-to-run noise (none: the runs are seeded and deterministic on the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
from core_helpers import run_train
from user_module_helpers import EXAMPLE, _example_sweep, write_package

STILL = ("trainer.gradient_clip_val=1e-12", "trainer.gradient_clip_algorithm=value")


def _final_val_loss(tmp_path: Path, name: str, *args: str, config: str | None = None) -> float:
    run = run_train(
        tmp_path,
        "tracking.mode='off'",
        "trainer.max_epochs=3",
        *args,
        output_dir=tmp_path / name,
        module_args=("--config", config) if config else (),
    )
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    clip = result.config["trainer"]["gradient_clip_val"]
    assert clip == (1e-12 if STILL[0] in args else None)
    assert result.val_loss_final is not None
    return result.val_loss_final


@pytest.mark.parametrize("workload", ["built-in", "built-in under fsdp", "user"])
def test_clipped_to_nothing_a_run_does_not_learn(tmp_path: Path, workload: str) -> None:
    """Under FSDP by norm: the gradients are sharded (DTensors), their global norm summed
    over the ranks (Adam's epsilon dominates there too: every element is below 1e-12)."""
    config = None
    if workload == "user":
        _example_sweep(tmp_path, shapes="")
        config = EXAMPLE
    how = ("trainer.strategy=fsdp", "trainer.devices=2") if "fsdp" in workload else ()
    plain = _final_val_loss(tmp_path, "plain", *how, config=config)
    clip = STILL[:1] if "fsdp" in workload else STILL
    clipped = _final_val_loss(tmp_path, "clipped", *how, *clip, config=config)
    assert clipped > plain + 0.05, (plain, clipped)


# Its constructor reads a weight's value, so the checks before start-up cannot build it on the
# meta device (they refuse one that builds there: tests/unit/.../test_manual_refusals.py) and
# the job itself refuses it, on every rank.
MANUAL_STEP = """\
import torch
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class ByHand(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.layer = torch.nn.Linear(4, 1)
        self.start_norm = float(self.layer.weight.norm())

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(self.layer(batch[0]).pow(2).mean())
        opt.step()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
"""


def test_a_module_stepping_by_hand_is_told_to_clip_itself(tmp_path: Path) -> None:
    write_package(tmp_path, "handpkg", MANUAL_STEP)
    run = run_train(
        tmp_path,
        "workload.name=handpkg.model:ByHand",
        "trainer.gradient_clip_val=1.0",
        "tracking.mode='off'",
        output_dir=tmp_path / "out",
    )
    assert run.returncode == 2, run.describe()
    assert '"event":"start"' in run.stdout, run.describe()  # refused by the job, not before
    assert "UserWarning" not in run.stderr, run.describe()  # the meta build's, kept quiet
    assert (
        "error: trainer.gradient_clip_val: ByHand optimizes manually (automatic_optimization "
        "= False), and Lightning clips gradients for automatic optimization only"
    ) in run.stderr, run.describe()
    assert not run.results()
