"""What scalescope's built-in workloads share: the Lightning module's step loop and summed
validation (:class:`WorkloadModule`, :class:`ClassifierModule`), the data module's set-up
(:class:`WorkloadDataModule`; :class:`InMemoryDataModule` for data held in device memory),
and the batching behind them (:class:`ShardedBatches`, :class:`StepGroups`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from .sharding import FsdpSetting, describe, is_sharded, shard, sharding_mesh


class WorkloadModule(L.LightningModule):
    """A LightningModule with the per-step bookkeeping cost of Lightning 2.x removed.

    Lightning records which hook is running by setting ``_current_fx_name`` on the module
    before and after every hook call, about 45 times per training step.
    ``nn.Module.__setattr__`` checks parameters, buffers and submodules on each of those
    (a few microseconds each): about 0.25 ms per step on a 2-core CPU, more than the spiral
    MLP's forward pass. That attribute is a plain string, never a parameter, buffer or
    submodule, so setting it directly is equivalent.

    Workloads also expose ``val_history`` (epoch, val loss, val accuracy) and may expose
    ``flops_per_sample()`` for MFU.

    Built-in workloads train with manual optimization on groups of micro-batches (see
    :class:`StepGroups`): one ``training_step`` call takes one
    optimizer step per ``(x, y)`` of the group. A subclass says how one micro-batch's loss is
    computed (:meth:`micro_batch_loss`); the step loop and the diagnosis' calibration pass
    (:meth:`calibration_loss`: forward only, no optimizer step) share it.
    """

    val_history: list[tuple[int, float, float]]
    _val_sums: Tensor
    """Validation's (summed loss, correct predictions, samples) of this rank's epoch: each
    workload's ``validation_step`` adds to it, and the epoch's end sums it over the ranks
    before dividing (so ranks with unequal shards weigh by their samples)."""

    accumulate_grad_batches: int = 1
    """Micro-batches per optimizer step (``trainer.accumulate_grad_batches``): each batch of
    the group is split into this many, their gradients summed (each loss divided by it, as
    Lightning does), DDP's all-reduce running on the last one's backward only."""

    gradient_clip: tuple[float, str] | None = None
    """(value, ``norm`` or ``value``) from ``trainer.gradient_clip_val`` and
    ``gradient_clip_algorithm``: the gradients are clipped before each optimizer step, after
    the mixed-precision scaler unscaled them (:meth:`on_before_optimizer_step`)."""

    fsdp: FsdpSetting | None = None
    """Set by the job under ``trainer.strategy: fsdp``: :meth:`configure_model` then shards
    :meth:`fsdp_blocks` one by one, then the module."""
    sharding: dict[str, Any] | None = None
    """What :meth:`configure_model` applied (the record's ``sharding``); None unsharded."""

    def micro_batch_loss(self, x: Tensor, y: Tensor) -> Tensor:
        """The training loss of one micro-batch (forward pass only)."""
        raise NotImplementedError

    def fsdp_blocks(self) -> list[nn.Module]:
        """The submodules FSDP shards one by one (each its own all-gather), in forward order;
        what they do not hold stays with the root."""
        raise NotImplementedError

    def configure_model(self) -> None:
        # Lightning calls this hook under every strategy, once the process group and its
        # device mesh exist; only FSDP has anything to do (and only once: Lightning calls
        # it again for a later validate or test).
        if self.fsdp is None or is_sharded(self):
            return
        shard(self, self.fsdp_blocks(), sharding_mesh(self, self.fsdp), self.fsdp)
        self.sharding = describe(self, self.fsdp, applied_by="scalescope")

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # With accumulation, DDP must not expect a gradient all-reduce from the call's forward
        # (it would run on the first micro-batch's backward): each step's last micro-batch
        # asks for it itself (training_step). Lightning calls this before that forward.
        if self.accumulate_grad_batches > 1:
            self._grad_sync(False)

    def training_step(self, batch: Sequence[tuple[Tensor, Tensor]], batch_idx: int) -> Tensor:
        # Manual optimization: the same zero_grad/backward/step as Lightning's automatic loop
        # (DDP all-reduces gradients in the step's last backward), one optimizer step per
        # batch of the group.
        opt = self.optimizers()
        assert not isinstance(opt, list)  # one optimizer (configure_optimizers)
        limit = self.trainer.max_steps
        k = self.accumulate_grad_batches
        loss = torch.zeros(())
        try:
            for x, y in batch:
                if 0 <= limit <= self.trainer.global_step:
                    break
                opt.zero_grad(set_to_none=True)
                if k == 1:
                    loss = self.micro_batch_loss(x, y)
                    self.manual_backward(loss)
                else:
                    loss = self._accumulate(x, y, k)
                opt.step()
        finally:
            if k > 1:
                self._grad_sync(True)
        return loss.detach()

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        # Lightning clips for automatic optimization only; this step loop is manual, and
        # Lightning calls this hook inside its optimizer step either way.
        if self.gradient_clip is not None:
            value, algorithm = self.gradient_clip
            self.clip_gradients(
                optimizer, gradient_clip_val=value, gradient_clip_algorithm=algorithm
            )

    def _accumulate(self, x: Tensor, y: Tensor, k: int) -> Tensor:
        """Forward and backward on ``k`` micro-batches of (x, y); the gradient all-reduce on
        the last backward only. Returns the loss of the whole batch."""
        total = torch.zeros((), device=x.device)
        for i, (xs, ys) in enumerate(zip(x.tensor_split(k), y.tensor_split(k), strict=True)):
            last = i == k - 1
            self._grad_sync(last)  # Lightning prepares DDP's reducer when this is on
            part = self.micro_batch_loss(xs, ys) / k
            self.manual_backward(part)
            total = total + part.detach()
        return total

    def _grad_sync(self, on: bool) -> None:
        """Whether the coming backward synchronises gradients: DDP's all-reduce (what
        ``no_sync()`` switches), FSDP's reduce-scatter (``set_requires_gradient_sync``, on
        every unit; its all-gathers run either way); nothing on one device."""
        model = self.trainer.strategy.model
        if isinstance(model, DistributedDataParallel):
            model.require_backward_grad_sync = on
        elif is_sharded(model):
            model.set_requires_gradient_sync(on)  # type: ignore[operator]

    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(3, dtype=torch.float64, device=self.device)

    def on_validation_epoch_end(self) -> None:
        if self.trainer.sanity_checking:
            return
        sums = self.trainer.strategy.reduce(self._val_sums, reduce_op="sum")
        loss, correct, count = sums.tolist()
        self.val_history.append((self.current_epoch, loss / count, correct / count))

    def calibration_loss(self, batch: Sequence[tuple[Tensor, Tensor]]) -> Tensor:
        """The loss of the group's first micro-batch: what one backward with the gradient
        all-reduce computes (with accumulation, a part of the first batch)."""
        x, y = batch[0]
        k = self.accumulate_grad_batches
        if k > 1:
            x, y = x.tensor_split(k)[0], y.tensor_split(k)[0]
        return self.micro_batch_loss(x, y)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)


class ClassifierModule(WorkloadModule):
    """A workload whose forward gives class logits (the spiral MLP, the ResNet): cross-entropy
    training, and validation loss and accuracy summed over every rank's samples before they
    are divided (so ranks with unequal shards weigh by their samples)."""

    def micro_batch_loss(self, x: Tensor, y: Tensor) -> Tensor:
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        if x.shape[0] == 0:
            return
        logits = self(x)
        loss = F.cross_entropy(logits.float(), y, reduction="sum")
        correct = (logits.argmax(dim=1) == y).sum()
        self._val_sums += torch.stack(
            [loss.double(), correct.double(), self._val_sums.new_tensor(len(y))]
        )


# --- batching ------------------------------------------------------------------------------


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


# --- data modules --------------------------------------------------------------------------

P = TypeVar("P")


class WorkloadDataModule(L.LightningDataModule, Generic[P]):
    """A built-in workload's data module: its params, ``batch_size`` (the per-device batch of
    one optimizer step), the ``seed`` of its shuffles and the batches of one
    ``training_step`` call (``steps_per_call``, see :class:`StepGroups`)."""

    def __init__(self, params: P, *, batch_size: int, seed: int, steps_per_call: int = 1) -> None:
        super().__init__()
        self.params, self.batch_size, self.seed = params, batch_size, seed
        self.steps_per_call = steps_per_call

    def _rank_world(self) -> tuple[int, int]:
        if self.trainer is None:
            return 0, 1
        return self.trainer.global_rank, self.trainer.world_size


class InMemoryDataModule(WorkloadDataModule[P]):
    """Data generated identically on every rank and held in device memory (``setup`` puts it
    on :meth:`_data_device`): each rank iterates its shard of it (:class:`ShardedBatches`),
    and batches need no transfer."""

    def _data_device(self) -> torch.device:
        return self.trainer.strategy.root_device if self.trainer else torch.device("cpu")

    def _sharded(self, x: Tensor, y: Tensor, batch_size: int, *, shuffle: bool) -> ShardedBatches:
        """This rank's batches of ``(x, y)``: shuffled for training, in order for evaluation."""
        rank, world = self._rank_world()
        return ShardedBatches(
            x,
            y,
            batch_size=batch_size,
            rank=rank,
            world_size=world,
            seed=self.seed,
            shuffle=shuffle,
        )

    def transfer_batch_to_device(self, batch, device, dataloader_idx):  # type: ignore[no-untyped-def]
        return batch  # the data set already lives on the device
