"""A classifier of Gaussian blobs: an ordinary LightningModule and LightningDataModule.

Written the way a Lightning project is written, with no reference to scalescope: automatic
optimization, ``self.log``, plain DataLoaders, its own ``configure_optimizers``. The data
are generated from a seed, so nothing is downloaded and every process sees the same set.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset


class MyModel(L.LightningModule):
    def __init__(self, features: int = 32, classes: int = 4, hidden: int = 128, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), sync_dist=True)
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean(), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


class MyData(L.LightningDataModule):
    def __init__(
        self,
        batch_size: int = 64,
        num_samples: int = 4096,
        features: int = 32,
        classes: int = 4,
        val_fraction: float = 0.25,
        seed: int = 0,
    ):
        super().__init__()
        self.batch_size = batch_size
        self.num_samples, self.features, self.classes = num_samples, features, classes
        self.val_fraction, self.seed = val_fraction, seed

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(self.seed)
        centres = 0.4 * torch.randn(self.classes, self.features, generator=g)
        y = torch.randint(0, self.classes, (self.num_samples,), generator=g)
        x = centres[y] + torch.randn(self.num_samples, self.features, generator=g)
        n_val = int(self.num_samples * self.val_fraction)
        self.val_set = TensorDataset(x[:n_val], y[:n_val])
        self.train_set = TensorDataset(x[n_val:], y[n_val:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=512)
