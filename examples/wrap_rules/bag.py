"""A bag-of-tokens classifier whose ``training_step`` calls its submodules directly, never
``self(...)``: a pattern common in Lightning modules, and one FSDP2 cannot shard if a wrap rule
leaves the head's parameters in the root (``fsdp.wrap: [torch.nn.Embedding]``). Written with no
reference to scalescope; random tokens from a seed, whose class is their sum modulo 4.
"""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset


class Bag(L.LightningModule):
    def __init__(self, vocab: int = 64, width: int = 32, classes: int = 4, lr: float = 3e-3):
        super().__init__()
        self.save_hyperparameters()
        self.emb = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, classes)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        ids, y = batch
        loss = F.cross_entropy(self.head(self.emb(ids).mean(1)), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        ids, y = batch
        self.log("val_loss", F.cross_entropy(self.head(self.emb(ids).mean(1)), y), sync_dist=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


class Tokens(L.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_samples: int = 2048, vocab: int = 64):
        super().__init__()
        self.batch_size, self.num_samples, self.vocab = batch_size, num_samples, vocab

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, self.vocab, (self.num_samples, 8), generator=g)
        y = ids.sum(1) % 4
        n_val = self.num_samples // 4
        self.val_set = TensorDataset(ids[:n_val], y[:n_val])
        self.train_set = TensorDataset(ids[n_val:], y[n_val:])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=256)
