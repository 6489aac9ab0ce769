"""A user's module written against Lightning's standalone package (``import
pytorch_lightning as pl``), which ``lightning`` installs beside itself as a separate copy:
scalescope's trainer is built from ``lightning``, and the module is taken as written."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from user_module_helpers import write_package

from scalescope.errors import ConfigError
from scalescope.workloads import user_import

PL_MODULE = """\
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_only
from torch.utils.data import DataLoader, TensorDataset


class Tiny(pl.LightningModule):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(width, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class TinyData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), self.batch_size)


RANK_ZERO_ONLY = rank_zero_only
"""

STANDALONE = ("pytorch_lightning", "lightning_fabric", "plmod")


@pytest.fixture
def fresh_imports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """As in a job's interpreter: neither standalone package (nor the user's package)
    imported yet; what the test imported of them is taken out again after it."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    before = {k: v for k, v in sys.modules.items() if k.split(".")[0] in STANDALONE}
    for name in before:
        del sys.modules[name]
    yield
    for name in [k for k in sys.modules if k.split(".")[0] in STANDALONE]:
        del sys.modules[name]
    sys.modules.update(before)


def test_a_pytorch_lightning_module_is_lightnings_own(tmp_path: Path, fresh_imports: None) -> None:
    import lightning

    write_package(tmp_path, "plmod", PL_MODULE)
    params = user_import.UserParams(datamodule="plmod.model:TinyData", init_args={"width": 4})
    got = user_import.check("plmod.model:Tiny", params, batch_size=16)
    assert issubclass(got.module_cls, lightning.LightningModule)
    assert got.datamodule_cls is not None
    assert issubclass(got.datamodule_cls, lightning.LightningDataModule)
    assert got.datamodule_kwargs == {"batch_size": 16}
    # one module under both names: the classes the module reaches are lightning's
    import lightning_fabric
    import pytorch_lightning
    from pytorch_lightning.callbacks import ModelCheckpoint

    model = importlib.import_module("plmod.model")
    assert pytorch_lightning is lightning.pytorch
    assert lightning_fabric is lightning.fabric
    assert ModelCheckpoint is lightning.pytorch.callbacks.ModelCheckpoint
    assert model.RANK_ZERO_ONLY is lightning.pytorch.utilities.rank_zero_only
    assert sys.modules["pytorch_lightning.callbacks"] is lightning.pytorch.callbacks
    # and each keeps its own spec: lightning's modules are still lightning's
    assert lightning.pytorch.__spec__.name == "lightning.pytorch"
    assert lightning.pytorch.callbacks.__spec__.name == "lightning.pytorch.callbacks"


def test_names_outside_the_standalone_packages_are_left_to_the_import_system() -> None:
    assert user_import._mirrored("pytorch_lightning.callbacks") == "lightning.pytorch.callbacks"
    assert user_import._mirrored("lightning_fabric") == "lightning.fabric"
    assert user_import._mirrored("pytorch_lightning_bolts") is None
    assert user_import._mirrored("lightning.pytorch") is None


def test_a_standalone_copy_imported_before_is_named_in_the_refusal(
    tmp_path: Path, fresh_imports: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where something imported pytorch_lightning's own copy before the user's module, its
    classes stay that copy's: the refusal says which LightningModule the class derives from."""
    mirrors = [f for f in sys.meta_path if isinstance(f, user_import._Mirror)]
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f not in mirrors])
    import pytorch_lightning  # the standalone copy itself

    assert pytorch_lightning.__spec__ is not None
    assert pytorch_lightning.__spec__.name == "pytorch_lightning"
    write_package(tmp_path, "plmod", PL_MODULE)
    with pytest.raises(ConfigError) as err:
        user_import.check(
            "plmod.model:Tiny", user_import.UserParams(datamodule="plmod.model:TinyData")
        )
    assert str(err.value) == (
        "workload.name: plmod.model:Tiny is not a LightningModule subclass (it is a class "
        "deriving from pytorch_lightning.core.module.LightningModule)"
    )
