"""Spiral classification: two interleaved spirals, an MLP, cross-entropy, Adam.

The data set is generated identically on every rank from ``data_seed`` and held in device
memory, so data loading is never what is measured. Each rank trains on its own shard of a
per-epoch permutation (the same permutation on every rank), which is what a
DistributedSampler with ``drop_last=True`` does, without the DataLoader machinery.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .base import ClassifierModule, InMemoryDataModule, ShardedBatches, StepGroups
from .params import SpiralParams

VAL_BATCH_SIZE = 4096
"""Validation is not timed as training; big batches keep it short."""


def make_spirals(params: SpiralParams) -> tuple[Tensor, Tensor]:
    """(x [n, 2] float32, y [n] int64) on the CPU, the same on every rank for one seed."""
    g = torch.Generator().manual_seed(params.data_seed)
    per_class = params.num_samples // 2
    xs, ys = [], []
    for label in (0, 1):
        n = per_class if label == 0 else params.num_samples - per_class
        # sqrt spreads points evenly along the arc instead of crowding the centre
        t = torch.sqrt(torch.rand(n, generator=g)) * params.turns * 2 * math.pi
        r = t / (params.turns * 2 * math.pi)
        angle = t + label * math.pi
        pts = torch.stack([r * torch.cos(angle), r * torch.sin(angle)], dim=1)
        pts += params.noise * torch.randn(n, 2, generator=g)
        xs.append(pts)
        ys.append(torch.full((n,), label, dtype=torch.long))
    x, y = torch.cat(xs), torch.cat(ys)
    order = torch.randperm(params.num_samples, generator=g)
    return x[order].contiguous(), y[order].contiguous()


class SpiralDataModule(InMemoryDataModule[SpiralParams]):
    train_x = train_y = val_x = val_y = torch.empty(0)
    """This rank's copy of the data set, on the device (set by ``setup``)."""

    @property
    def num_train(self) -> int:
        return self.params.train_samples

    @property
    def num_val(self) -> int:
        return self.params.val_samples

    def setup(self, stage: str) -> None:
        x, y = make_spirals(self.params)
        device = self._data_device()
        x, y = x.to(device), y.to(device)
        self.val_x, self.val_y = x[: self.num_val], y[: self.num_val]
        self.train_x, self.train_y = x[self.num_val :], y[self.num_val :]

    def train_dataloader(self) -> StepGroups:
        train = self._sharded(self.train_x, self.train_y, self.batch_size, shuffle=True)
        return StepGroups(train, self.steps_per_call)

    def val_dataloader(self) -> ShardedBatches:
        return self._sharded(self.val_x, self.val_y, VAL_BATCH_SIZE, shuffle=False)


class SpiralMLP(ClassifierModule):
    def __init__(self, hidden_sizes: list[int], dropout: float, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.automatic_optimization = False
        layers: list[nn.Module] = []
        width = 2
        for h in hidden_sizes:
            layers += [nn.Linear(width, h), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, 2))
        self.net = nn.Sequential(*layers)
        # validation sums: loss, correct, count -- reduced over ranks at epoch end
        self._val_sums = torch.zeros(3, dtype=torch.float64)
        self.val_history: list[tuple[int, float, float]] = []

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def fsdp_blocks(self) -> list[nn.Module]:
        """The hidden layers (each Linear but the last); the root keeps the output layer."""
        linears = [m for m in self.net if isinstance(m, nn.Linear)]
        return list(linears[:-1])

    def flops_per_sample(self) -> float:
        """Training FLOPs per sample: 2 per multiply-add forward, twice that backward."""
        macs = sum(m.in_features * m.out_features for m in self.net if isinstance(m, nn.Linear))
        return 6.0 * macs

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def build(
    params: SpiralParams, *, batch_size: int, seed: int, steps_per_call: int = 1
) -> tuple[SpiralMLP, SpiralDataModule]:
    model = SpiralMLP(params.hidden_sizes, params.dropout, params.lr)
    dm = SpiralDataModule(params, batch_size=batch_size, seed=seed, steps_per_call=steps_per_call)
    return model, dm
