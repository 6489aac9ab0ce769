"""ResNet-style image classifier fed by a real input pipeline.

Data: generated uint8 images written once to memory-mapped shards on disk (``shards.py``),
read by a ``torch.utils.data.DataLoader`` whose workers crop and flip on the CPU. Batches stay
uint8 until the device (a quarter of the bytes through pinned memory and the bus) and are
normalised there, in ``forward``.

Sharding and determinism: the batch sampler, in the training process, draws one global
permutation per epoch (seed + epoch, the same on every rank); rank ``r`` takes slice ``r`` of
global batch ``k``, as in the spiral workload. The augmentation of each sample (crop offset,
flip) is drawn in the same place from the same seed, for the whole epoch at once, and travels
to the workers with the sample's index. So what a sample becomes depends on (seed, epoch,
index) only: neither on the number of workers, nor on which worker loads it, nor on the world
size. 0 and 2 workers train identically, and 1 and 2 processes follow the same trajectory
(with ``norm: group``; BatchNorm's per-rank statistics differ by world size).

FLOPs convention: multiply-adds of every convolution and the classifier, 2 FLOPs each in the
forward pass and 3x the forward for forward + backward (6 per multiply-add: the backward pass
computes the input gradient and the weight gradient, 2 each), except the stem's input
gradient, which autograd never computes (the images need no gradient). Normalisation,
activations, pooling and the optimizer are not counted (FlopCounterMode does not count
them either).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Sampler

from .base import ClassifierModule, StepGroups, WorkloadDataModule
from .params import ResnetParams
from .shards import ImageSetSpec, OpenedShards, open_shards

# --- analytic FLOPs (pure arithmetic) ---------------------------------------------------------


def conv_out(size: int, stride: int) -> int:
    """Output size of a 3x3 conv with padding 1 (and of a 1x1 conv, padding 0)."""
    return (size - 1) // stride + 1


def resnet_macs(image_size: int, widths: list[int], depths: list[int], num_classes: int) -> int:
    """Multiply-adds of one forward pass over one image."""
    h = image_size
    macs = h * h * 9 * 3 * widths[0]  # stem
    cin = widths[0]
    for stage, (cout, depth) in enumerate(zip(widths, depths, strict=True)):
        for block in range(depth):
            stride = 2 if stage > 0 and block == 0 else 1
            h = conv_out(h, stride)
            macs += h * h * 9 * cin * cout + h * h * 9 * cout * cout
            if stride != 1 or cin != cout:
                macs += h * h * cin * cout  # 1x1 projection shortcut
            cin = cout
    return macs + cin * num_classes


def flops_per_sample(params: ResnetParams) -> float:
    """Training FLOPs per image: 6 per multiply-add (2 forward, 4 backward), less the stem's
    input gradient (2 per multiply-add), which autograd never computes."""
    assert params.image_size and params.widths and params.depths and params.num_classes
    macs = resnet_macs(params.image_size, params.widths, params.depths, params.num_classes)
    stem = params.image_size**2 * 9 * 3 * params.widths[0]
    return 6.0 * macs - 2.0 * stem


# --- the data pipeline ------------------------------------------------------------------------


def image_spec(params: ResnetParams) -> ImageSetSpec:
    assert params.image_size and params.num_classes and params.train_samples
    assert params.val_samples
    return ImageSetSpec(
        image_size=params.image_size,
        num_classes=params.num_classes,
        train_samples=params.train_samples,
        val_samples=params.val_samples,
        noise=params.noise,
        data_seed=params.data_seed,
    )


def collate_identity(batch: Any) -> Any:
    """``__getitems__`` already returns the batch (module level: workers pickle it)."""
    return batch


class AugmentedImages(Dataset):
    """One split's images read from the memory map, cropped and flipped as told.

    A key is a row ``(index, dy, dx, flip)``: the augmentation is decided by the sampler,
    so the result does not depend on the worker. Workers reopen the memory map themselves
    (a pickled memmap would be copied into every worker).
    """

    def __init__(self, folder: Path, split: str, pad: int) -> None:
        self.folder, self.split, self.pad = Path(folder), split, pad
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrays": None}

    def _open(self) -> tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:
            images = np.load(self.folder / f"{self.split}_images.npy", mmap_mode="r")
            labels = np.load(self.folder / f"{self.split}_labels.npy", mmap_mode="r")
            self._arrays = (images, labels)
        return self._arrays

    def __len__(self) -> int:
        return int(self._open()[1].shape[0])

    def __getitems__(self, keys: np.ndarray) -> tuple[Tensor, Tensor]:
        images, labels = self._open()
        keys = np.asarray(keys, dtype=np.int64).reshape(-1, 4)
        idx = keys[:, 0]
        src = images[idx]  # one gather from the memory map (fancy indexing copies)
        p = self.pad
        h, w = src.shape[2], src.shape[3]
        if p:
            src = np.pad(src, ((0, 0), (0, 0), (p, p), (p, p)))
        out = np.empty((len(idx), src.shape[1], h, w), dtype=np.uint8)
        for i, (_, dy, dx, flip) in enumerate(keys):
            crop = src[i, :, dy : dy + h, dx : dx + w]
            out[i] = crop[:, :, ::-1] if flip else crop
        return torch.from_numpy(out), torch.from_numpy(np.asarray(labels[idx]))

    def __getitem__(self, key: Any) -> tuple[Tensor, Tensor]:
        x, y = self.__getitems__(np.asarray([key]))
        return x[0], y[0]


class RankBatches(Sampler[np.ndarray]):
    """This rank's batches of keys; each ``iter()`` is one epoch.

    Training: the permutation and the augmentation of epoch e come from seed + e, identical
    on every rank; global batch k is ``perm[k*G:(k+1)*G]`` (``G = batch_size * world``) and
    rank r takes slice r of it; the last incomplete global batch is dropped. Evaluation:
    rank r takes samples ``r, r+world, ...`` unaugmented, in an equal number of batches on
    every rank (possibly empty ones).
    """

    def __init__(
        self,
        n: int,
        *,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        train: bool,
        pad: int,
        flip: bool,
    ) -> None:
        self.n, self.batch_size, self.rank, self.world = n, batch_size, rank, world_size
        self.seed, self.train, self.pad, self.flip = seed, train, pad, flip
        self.epoch = 0
        if train:
            self.num_batches = n // (batch_size * world_size)
        else:
            self.num_batches = max(1, math.ceil(math.ceil(n / world_size) / batch_size))

    def __len__(self) -> int:
        return self.num_batches

    def epoch_keys(self, epoch: int) -> np.ndarray:
        """``[num_batches, batch_size, 4]`` keys of this rank in ``epoch`` (training)."""
        rng = np.random.default_rng([self.seed, epoch])
        perm = rng.permutation(self.n)
        dy = rng.integers(0, 2 * self.pad + 1, size=self.n)
        dx = rng.integers(0, 2 * self.pad + 1, size=self.n)
        flip = rng.integers(0, 2, size=self.n) if self.flip else np.zeros(self.n, np.int64)
        used = self.num_batches * self.batch_size * self.world
        idx = perm[:used].reshape(self.num_batches, self.world, self.batch_size)[:, self.rank]
        # per-sample augmentation is indexed by the sample, not its position in the epoch
        return np.stack([idx, dy[idx], dx[idx], flip[idx]], axis=-1)

    def __iter__(self) -> Iterator[np.ndarray]:
        if self.train:
            keys = self.epoch_keys(self.epoch)
            self.epoch += 1
            yield from keys
            return
        idx = np.arange(min(self.rank, self.n), self.n, self.world)
        for part in np.array_split(idx, self.num_batches):
            center = np.full_like(part, self.pad)
            yield np.stack([part, center, center, np.zeros_like(part)], axis=-1)


def make_loader(
    params: ResnetParams,
    folder: Path,
    split: str,
    *,
    batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    seed: int = 0,
    num_workers: int | None = None,
    prefetch_factor: int | None = None,
    persistent_workers: bool | None = None,
    pin_memory: bool = False,
) -> DataLoader:
    """The DataLoader of one split for one rank (the loader settings default to params')."""
    train = split == "train"
    pad = int(params.crop_padding or 0)
    dataset = AugmentedImages(folder, split, pad)
    sampler = RankBatches(
        params.train_samples if train else params.val_samples,  # type: ignore[arg-type]
        batch_size=batch_size,
        rank=rank,
        world_size=world_size,
        seed=seed,
        train=train,
        pad=pad,
        flip=params.flip and train,
    )
    workers = params.num_workers if num_workers is None else num_workers
    kwargs: dict[str, Any] = {}
    if workers > 0:
        prefetch = params.prefetch_factor if prefetch_factor is None else prefetch_factor
        if prefetch is not None:
            kwargs["prefetch_factor"] = prefetch
        persistent = params.persistent_workers if persistent_workers is None else persistent_workers
        kwargs["persistent_workers"] = True if persistent == "auto" else persistent
    return DataLoader(
        dataset,
        batch_sampler=sampler,  # type: ignore[arg-type]  # key arrays, not lists
        num_workers=workers,
        collate_fn=collate_identity,
        pin_memory=pin_memory,
        **kwargs,
    )


class Batches:
    """A DataLoader behind a plain iterable (Lightning then leaves its sampler alone)."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)


class ResnetDataModule(WorkloadDataModule[ResnetParams]):
    shards: OpenedShards | None = None
    """The opened shards (set by :meth:`open`)."""

    @property
    def num_train(self) -> int:
        return int(self.params.train_samples or 0)

    @property
    def num_val(self) -> int:
        return int(self.params.val_samples or 0)

    def open(self) -> OpenedShards:
        """Build the shards if needed (one process builds, the others wait) and open them."""
        if self.shards is None:
            self.shards = open_shards(
                image_spec(self.params),
                self.params.resolved_cache_dir,
                verify_checksum=self.params.verify_checksum,
            )
        return self.shards

    def setup(self, stage: str) -> None:
        self.open()

    def _pin(self) -> bool:
        if self.params.pin_memory != "auto":
            return bool(self.params.pin_memory)
        return self.trainer is not None and self.trainer.strategy.root_device.type == "cuda"

    def loader(self, split: str, batch_size: int, **settings: Any) -> DataLoader:
        rank, world = self._rank_world()
        settings.setdefault("pin_memory", self._pin())
        return make_loader(
            self.params,
            self.open().folder,
            split,
            batch_size=batch_size,
            rank=rank,
            world_size=world,
            seed=self.seed,
            **settings,
        )

    def train_dataloader(self) -> StepGroups:
        loader = self.loader("train", self.batch_size)
        return StepGroups(Batches(loader), self.steps_per_call)  # type: ignore[arg-type]

    def val_dataloader(self) -> Batches:
        return Batches(self.loader("val", self.params.val_batch_size))


# --- the model --------------------------------------------------------------------------------


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    return nn.GroupNorm(math.gcd(channels, 8), channels)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, norm: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.n1 = _norm(norm, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.n2 = _norm(norm, cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), _norm(norm, cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.n1(self.conv1(x)))
        out = self.n2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(
        self, widths: list[int], depths: list[int], num_classes: int, norm: str = "group"
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, padding=1, bias=False), _norm(norm, widths[0]), nn.ReLU()
        )
        blocks: list[nn.Module] = []
        cin = widths[0]
        for stage, (cout, depth) in enumerate(zip(widths, depths, strict=True)):
            for block in range(depth):
                blocks.append(BasicBlock(cin, cout, 2 if stage > 0 and block == 0 else 1, norm))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.uint8:  # normalised on the device: uint8 travels, float does not
            x = x.float().mul_(1 / 127.5).sub_(1.0)
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ResnetModule(ClassifierModule):
    def __init__(self, params: ResnetParams) -> None:
        super().__init__()
        assert params.widths and params.depths and params.num_classes
        self.params = params
        self.automatic_optimization = False
        self.net = ResNet(params.widths, params.depths, params.num_classes, params.norm)
        self._val_sums = torch.zeros(3, dtype=torch.float64)
        self.val_history: list[tuple[int, float, float]] = []

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def fsdp_blocks(self) -> list[nn.Module]:
        """The residual blocks; the root keeps the stem and the classifier head."""
        return list(self.net.blocks)

    def flops_per_sample(self) -> float:
        return flops_per_sample(self.params)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.params.lr)


def build(
    params: ResnetParams, *, batch_size: int, seed: int, steps_per_call: int = 1
) -> tuple[ResnetModule, ResnetDataModule]:
    model = ResnetModule(params)
    dm = ResnetDataModule(params, batch_size=batch_size, seed=seed, steps_per_call=steps_per_call)
    return model, dm
