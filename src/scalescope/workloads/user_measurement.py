"""Job-side measurement of a user's LightningModule, which knows nothing of scalescope.

* :func:`batch_size_of`: how many samples a batch holds (the rule in docs/your-module.md).
* :class:`SampleCounter`: counts the samples every rank's training loader yields; the record's
  throughput uses these counts, not steps x batch size (a loader may end on a short batch,
  and its batch size may not be the config's).
* :class:`ValHistory`: validation loss/accuracy per epoch from what the module logs.

The FLOPs per sample are measured by ``flops_probe``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch

from ..errors import ScalescopeError

VAL_LOSS_KEYS = ("val_loss",)
VAL_ACC_KEYS = ("val_acc", "val_accuracy")


def _first_tensor(batch: Any) -> torch.Tensor | None:
    """Depth first through tuples, lists, mapping values and a dataclass's fields (in order,
    as Lightning moves such batches to the device); 0-d tensors skipped."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.ndim > 0 else None
    if isinstance(batch, Mapping):
        items: Sequence[Any] = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        items = batch
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        items = [getattr(batch, f.name) for f in dataclasses.fields(batch)]
    else:
        return None
    for item in items:
        found = _first_tensor(item)
        if found is not None:
            return found
    return None


def batch_size_of(module: Any, batch: Any, *, combined: bool = False) -> int:
    """The module's ``batch_size_of(batch)`` if it has one, else the first dimension of the
    first tensor in the batch. A ``combined`` batch (several training loaders: a list or
    dict of loaders, or a CombinedLoader) holds one batch per loader: its samples are theirs
    summed, each counted by the same rule."""
    declared = getattr(module, "batch_size_of", None)
    if callable(declared):
        return int(declared(batch))
    if combined and isinstance(batch, (Mapping, list, tuple)):
        parts = list(batch.values()) if isinstance(batch, Mapping) else list(batch)
        return sum(batch_size_of(module, part) for part in parts if part is not None)
    tensor = _first_tensor(batch)
    if tensor is None:
        raise ScalescopeError(
            f"cannot tell how many samples a training batch of type {type(batch).__name__} "
            "holds (no tensor in it): define batch_size_of(self, batch) -> int on the module"
        )
    return int(tensor.shape[0])


@dataclass(frozen=True)
class Counted:
    """Samples summed over every rank."""

    train_samples: int
    """All training samples of the run."""
    first_epoch_samples: int
    warmup_samples: int | None
    """Training samples up to the end of the warm-up; None when training never left it."""
    val_samples: int
    """Samples of the first validation pass."""
    train_batches: int = 0
    """Training batches the loaders yielded, summed over ranks."""
    max_batch: int = 0
    """The largest training batch any rank saw."""
    same_first_batch: bool | None = None
    """Whether every rank's first training batch was identical (None: one rank, or a batch
    without a tensor to compare)."""
    optimizer_steps: int = 0
    """Optimizer steps the counted batches made (the same on every rank): the batches after
    which Lightning's step moved, each once, though a module stepping two optimizers by hand
    moves it by two (its record's ``steps`` counts both)."""
    max_step_samples: int = 0
    """The most samples one optimizer step took on any rank (its micro-batches summed)."""

    @property
    def micro_batch_mean(self) -> float | None:
        """Samples per batch the loaders yielded (a micro-batch under accumulation)."""
        return self.train_samples / self.train_batches if self.train_batches else None

    def per_device_mean(self, world_size: int, accumulate: int = 1) -> float | None:
        """Samples per optimizer step per device, the exact mean (short batches included).
        Without a count of steps, the micro-batch mean times the accumulation."""
        if self.optimizer_steps and self.train_batches:
            return self.train_samples / (world_size * self.optimizer_steps)
        mean = self.micro_batch_mean
        return mean * accumulate if mean is not None else None

    def per_device_full(self, accumulate: int = 1) -> int:
        """Samples of a full optimizer step per device: what the record calls the per-device
        batch. The largest step any rank took (its micro-batches summed); without a count of
        steps, the largest micro-batch times the accumulation. A loader's short last batch,
        or an epoch's last partial accumulation, does not change it, so the same data set
        split over more ranks keeps its global batch. 0 when nothing was yielded."""
        return self.max_step_samples or self.max_batch * accumulate


@dataclass
class SampleCounter(L.Callback):
    """Counts this rank's training (and first validation) samples, and where the warm-up ended.

    ``warmup_steps`` reads the TimingCallback's warm-up stamp: put this callback after it, so
    that the stamp of a step is known when that step's samples are added.
    """

    warmup_steps: Callable[[], int | None]
    total: int = 0
    batches: int = 0
    max_batch: int = 0
    first_fingerprint: float = float("nan")
    warmup_samples: int | None = None
    epoch_samples: list[int] = field(default_factory=list)
    val_samples: int = 0
    combined: bool = False
    """Several training loaders: each step's batch holds one batch of each."""
    steps: int = 0
    """Optimizer steps the counted batches made: each batch after which Lightning's step
    advanced ends one (accumulation: the last of its micro-batches), however far it moved (a
    module stepping two optimizers by hand moves it by two)."""
    max_step: int = 0
    """The most samples of one optimizer step (its micro-batches summed)."""
    _epoch_start: int = 0
    _validations: int = 0
    _step_samples: int = 0
    _last_step: int = 0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.combined = several_loaders(trainer.train_dataloader)
        self._last_step = trainer.global_step
        if self.warmup_steps() == 0:
            self.warmup_samples = 0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_start = self.total

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, i: int
    ) -> None:
        size = batch_size_of(pl_module, batch, combined=self.combined)  # shapes: no sync
        if self.batches == 0:
            self.first_fingerprint = _fingerprint(batch)  # once: one sync at most
        self.total += size
        self.batches += 1
        self.max_batch = max(self.max_batch, size)
        self._step_samples += size
        if trainer.global_step != self._last_step:  # this batch ended an optimizer step
            self._last_step = trainer.global_step
            self.steps += 1
            self.max_step = max(self.max_step, self._step_samples)
            self._step_samples = 0
        if self.warmup_samples is None and self.warmup_steps() is not None:
            self.warmup_samples = self.total

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.epoch_samples.append(self.epoch_so_far())

    def epoch_so_far(self) -> int:
        """This rank's samples of the epoch running (at its end, before this callback's end
        hook, the whole epoch's)."""
        return self.total - self._epoch_start

    def on_validation_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        i: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking and self._validations == 0:
            self.val_samples += batch_size_of(pl_module, batch)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validations += 1

    def agree(self, trainer: L.Trainer) -> Counted:
        """Sums over ranks, the largest batch, and whether the ranks' first batches were
        the same (call on every rank)."""
        mine = [
            self.total,
            self.epoch_samples[0] if self.epoch_samples else self.total,
            -1 if self.warmup_samples is None else self.warmup_samples,
            self.val_samples,
            self.batches,
        ]
        steps = self.steps
        device = trainer.strategy.root_device
        summed = trainer.strategy.reduce(
            torch.tensor(mine, dtype=torch.int64, device=device), reduce_op="sum"
        )
        total, first, warmup, val, batches = (int(v) for v in summed.tolist())
        same: bool | None = None
        largest, largest_step = self.max_batch, self.max_step
        if trainer.world_size > 1:
            theirs = trainer.strategy.all_gather(
                torch.tensor(
                    [float(self.max_batch), self.first_fingerprint, float(self.max_step)],
                    dtype=torch.float64,
                    device=device,
                )
            ).reshape(-1, 3)
            largest = int(theirs[:, 0].max().item())
            largest_step = int(theirs[:, 2].max().item())
            prints = theirs[:, 1].tolist()
            if all(p == p for p in prints):  # no NaN: every rank had a tensor to compare
                same = len(set(prints)) == 1
        # The warm-up ends at the same step on every rank: all -1 or none.
        return Counted(
            total,
            first,
            warmup if warmup >= 0 else None,
            val,
            batches,
            largest,
            same,
            optimizer_steps=steps,
            max_step_samples=largest_step,
        )


def training_loaders(loader: Any) -> list[Any]:
    """The training loaders behind ``trainer.train_dataloader``: one, or each of a list,
    tuple or dict of them (Lightning hands a CombinedLoader's iterables back as given)."""
    iterables = getattr(loader, "iterables", loader)  # a CombinedLoader
    if isinstance(iterables, Mapping):
        return list(iterables.values())
    if isinstance(iterables, (list, tuple)):
        return list(iterables)
    return [] if iterables is None else [iterables]


def several_loaders(loader: Any) -> bool:
    """Whether ``trainer.train_dataloader`` is several training loaders: each step's batch
    then holds one batch of each (:func:`training_loaders`)."""
    return len(training_loaders(loader)) > 1


def _fingerprint(batch: Any) -> float:
    """A number that identical batches share and different ones almost never do: the
    weighted sum of the first tensor's values (NaN without a tensor)."""
    tensor = _first_tensor(batch)
    if tensor is None:
        return float("nan")
    flat = tensor.detach().reshape(-1).to(torch.float64)
    weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device)
    return float((flat * weights).sum().item())


class ValHistory(L.Callback):
    """(epoch, val loss, val accuracy) after each validation, from ``trainer.callback_metrics``
    (``val_loss``; ``val_acc`` or ``val_accuracy``), None where the module logs no such key.

    Put it before the TimingCallback: its host read then falls inside the validation time.
    """

    def __init__(self) -> None:
        self.history: list[tuple[int, float | None, float | None]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        self.history.append(
            (trainer.current_epoch, _metric(metrics, VAL_LOSS_KEYS), _metric(metrics, VAL_ACC_KEYS))
        )


def _metric(metrics: Mapping[str, Any], keys: Sequence[str]) -> float | None:
    for key in keys:
        if key in metrics:
            return float(metrics[key])
    return None


def measured_batch(
    ident: Any, counted: Counted, passed_to: str | None, loader: Any
) -> tuple[Any, dict[str, Any]]:
    """The record's identity with the batch sizes the training ``loader`` really yielded (a
    full step's: :meth:`Counted.per_device_full`), and the record's ``batch`` section, which
    keeps the exact mean (docs/your-module.md)."""
    world = ident.world_size
    configured = ident.per_device_batch_size
    loaders = training_loaders(loader)
    iterable = any(
        isinstance(getattr(one, "dataset", None), torch.utils.data.IterableDataset)
        for one in loaders
    )
    if iterable:
        split = (
            "not split by Lightning (an iterable data set): each rank reads what the data set "
            "gives it, its own shard only if the data set shards by rank itself"
        )
    else:
        split = "split by Lightning's DistributedSampler: each rank its own shard"
    warnings_: list[str] = []
    if world > 1 and counted.same_first_batch:
        warnings_.append(
            f"the {world} ranks' first training batches were identical: every rank may be "
            "training on the same data (shard the data set by rank)"
        )
    k = ident.accumulate_grad_batches
    mean = counted.per_device_mean(world, k)
    full = counted.per_device_full(k)
    micro_passed = configured // k
    section: dict[str, Any] = {
        "loaders": len(loaders),
        "per_device_mean": mean,
        "per_device_max": full or None,
        "accumulate_grad_batches": k,
        "micro_batches": counted.train_batches,
        "micro_batch_mean": counted.micro_batch_mean,
        "micro_batch_max": counted.max_batch or None,
        "optimizer_steps": counted.optimizer_steps or None,
        "passed": micro_passed if passed_to else None,
        "passed_to": passed_to,
        "data": {
            "iterable": iterable,
            "split": split,
            "same_first_batch": counted.same_first_batch,
        },
        "warnings": warnings_,
    }
    if mean is None or not full:  # nothing was yielded: the configured figures stand
        return ident, section
    micro_mean = counted.micro_batch_mean or 0.0
    if passed_to and counted.max_batch != micro_passed:
        warnings_.append(
            f"scalescope passed batch_size={micro_passed} to {passed_to}, but its training "
            f"loader yielded batches of {counted.max_batch} at most (mean {micro_mean:.4g}) "
            "per device: the record uses the measured batch"
        )
    ident = dataclasses.replace(ident, per_device_batch_size=full, global_batch_size=full * world)
    return ident, section
