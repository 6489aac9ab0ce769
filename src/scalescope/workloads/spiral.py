"""Spiral classification: two interleaved spirals, an MLP, cross-entropy, Adam.

The data set is generated identically on every rank from ``data_seed`` and held in device
memory, so data loading is never what is measured. Each rank trains on its own shard of a
per-epoch permutation (the same permutation on every rank), which is what a
DistributedSampler with ``drop_last=True`` does, without the DataLoader machinery.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import lightning as L
import torch
from torch import Tensor, nn

from .base import ClassifierModule
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


class ShardedBatches:
    """This rank's batches of an in-memory data set; each ``iter()`` is one epoch.

    Training: every rank draws the same permutation (seed + epoch); global batch ``k`` is
    ``perm[k*G:(k+1)*G]`` for global batch size ``G = batch_size * world_size``, and rank
    ``r`` takes slice ``r`` of it. Ranks never share a sample, all run the same number of
    steps (one step more would hang the gradient all-reduce), and under strong scaling the
    averaged gradient of step ``k`` is the same at every world size: runs at different
    scales follow the same trajectory up to floating-point rounding.
    """

    def __init__(
        self,
        x: Tensor,
        y: Tensor,
        *,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        shuffle: bool,
    ) -> None:
        self.x, self.y = x, y
        self.batch_size = batch_size
        self.rank, self.world_size = rank, world_size
        self.seed, self.shuffle = seed, shuffle
        self.epoch = 0
        n = x.shape[0]
        if shuffle:  # training: equal full batches on every rank (drop_last)
            self.num_batches = n // (batch_size * world_size)
        else:  # evaluation: every sample once; equal batch *count* on every rank
            self.num_batches = max(1, math.ceil(math.ceil(n / world_size) / batch_size))

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        n = self.x.shape[0]
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            used = self.num_batches * self.batch_size * self.world_size
            order = torch.randperm(n, generator=g)[:used]
            mine = order.view(self.num_batches, self.world_size, self.batch_size)[:, self.rank]
            chunks = mine.to(self.x.device).unbind(0)
        else:
            # min(): a rank beyond the last sample gets an empty slice, not an error
            order = torch.arange(min(self.rank, n), n, self.world_size, device=self.x.device)
            chunks = order.tensor_split(self.num_batches)
        self.epoch += 1
        for idx in chunks:
            yield self.x.index_select(0, idx), self.y.index_select(0, idx)


class StepGroups:
    """Hands Lightning ``k`` consecutive batches at a time: one ``training_step`` call, k steps.

    Lightning's fixed cost per ``training_step`` call (hook dispatch, profiler contexts,
    signature inspection: about 0.25 ms on a 2-core CPU) is then paid once per k optimizer
    steps, as with Keras' ``steps_per_execution``. The batches, their order and the updates
    are exactly those of k separate calls. ``num_steps`` is the number of optimizer steps
    per epoch; ``len()`` the number of groups.
    """

    def __init__(self, batches: ShardedBatches, k: int) -> None:
        self.batches, self.k = batches, k

    @property
    def num_steps(self) -> int:
        return len(self.batches)

    def __len__(self) -> int:
        return math.ceil(len(self.batches) / self.k)

    def __iter__(self) -> Iterator[list[tuple[Tensor, Tensor]]]:
        it: Iterator[tuple[Tensor, Tensor]] = iter(self.batches)
        while group := list(itertools.islice(it, self.k)):
            yield group


class SpiralDataModule(L.LightningDataModule):
    def __init__(
        self, params: SpiralParams, *, batch_size: int, seed: int, steps_per_call: int = 1
    ) -> None:
        super().__init__()
        self.params, self.batch_size, self.seed = params, batch_size, seed
        self.steps_per_call = steps_per_call
        self.train_x = self.train_y = self.val_x = self.val_y = torch.empty(0)

    @property
    def num_train(self) -> int:
        return self.params.train_samples

    @property
    def num_val(self) -> int:
        return self.params.val_samples

    def setup(self, stage: str) -> None:
        x, y = make_spirals(self.params)
        device = self.trainer.strategy.root_device if self.trainer else torch.device("cpu")
        x, y = x.to(device), y.to(device)
        self.val_x, self.val_y = x[: self.num_val], y[: self.num_val]
        self.train_x, self.train_y = x[self.num_val :], y[self.num_val :]

    def _rank_world(self) -> tuple[int, int]:
        if self.trainer is None:
            return 0, 1
        return self.trainer.global_rank, self.trainer.world_size

    def train_dataloader(self) -> StepGroups:
        rank, world = self._rank_world()
        return StepGroups(self._train_batches(rank, world), self.steps_per_call)

    def _train_batches(self, rank: int, world: int) -> ShardedBatches:
        return ShardedBatches(
            self.train_x,
            self.train_y,
            batch_size=self.batch_size,
            rank=rank,
            world_size=world,
            seed=self.seed,
            shuffle=True,
        )

    def transfer_batch_to_device(self, batch, device, dataloader_idx):  # type: ignore[no-untyped-def]
        return batch  # the data set already lives on the device

    def val_dataloader(self) -> ShardedBatches:
        rank, world = self._rank_world()
        return ShardedBatches(
            self.val_x,
            self.val_y,
            batch_size=VAL_BATCH_SIZE,
            rank=rank,
            world_size=world,
            seed=self.seed,
            shuffle=False,
        )


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
