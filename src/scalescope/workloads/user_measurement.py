"""Job-side measurement of a user's LightningModule, which knows nothing of scalescope.

* :func:`batch_size_of`: how many samples a batch holds (the rule in docs/your-module.md).
* :class:`SampleCounter`: counts the samples every rank's training loader yields; the record's
  throughput uses these counts, not steps x batch size (a loader may end on a short batch,
  and its batch size may not be the config's).
* :class:`FlopsProbe`: training FLOPs per sample measured once, before the clock starts.
* :class:`ValHistory`: validation loss/accuracy per epoch from what the module logs.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch

from ..errors import ScalescopeError, first_line
from .flop_formulas import flop_counter

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
        """Samples per optimizer step per device: what the record calls the per-device
        batch. Without a count of steps, the micro-batch mean times the accumulation."""
        if self.optimizer_steps and self.train_batches:
            return self.train_samples / (world_size * self.optimizer_steps)
        mean = self.micro_batch_mean
        return mean * accumulate if mean is not None else None


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


class FlopsProbe(L.Callback):
    """Training FLOPs per sample of one real batch, measured on rank 0 before the clock starts.

    On ``on_train_start`` (put this callback before the TimingCallback, whose clock starts in
    the same hook after a barrier) rank 0 takes one batch from a fresh iterator of the training
    loader, moves it to the device, and runs the module's ``training_step`` and a backward pass
    under ``torch.utils.flop_counter.FlopCounterMode`` (with ``flop_formulas``' recurrent
    kernels) on a *deep copy* of the module (the trainer reference left out of the copy).
    Training is unchanged: the real module's parameters, gradients and buffers (batch-norm
    statistics) are never touched, and the Python, NumPy and torch random states are restored
    afterwards, so the shuffling and dropout of training are those of a run without the probe.
    FLOPs per sample = the counted total / that batch's size.

    A module whose ``training_step`` needs its trainer (manual optimization calls
    ``self.optimizers()``; ``self.trainer...``) cannot run on a copy. Rank 0 then counts its
    first real training step instead: forward, backward and whatever else the step runs (a
    GAN's two passes, an optimizer's own matrix products), through the same counter, which
    only slows that one step. ``first_step`` says, when that step starts, why it may not be
    counted (None: it may): it is timed (no warm-up), or compiled. Where it is not counted, or
    the count fails too, the record has no FLOPs and ``problem`` says why; such a module can
    define ``flops_per_sample()``. ``copy_problem`` keeps why the copy failed.

    Under FSDP the module is sharded by then (and FSDP refuses ``deepcopy``), and a sharded
    module's FLOPs would not be the model's: the copy is taken in ``setup``, which Lightning
    calls before ``configure_model`` shards the module, and probed whole at training's start.
    """

    def __init__(self, first_step: Callable[[], str | None] = lambda: None) -> None:
        self.flops_per_sample: float | None = None
        self.problem: str | None = None
        self.copy_problem: str | None = None
        self._unsharded: L.LightningModule | None = None
        self._first_step = first_step
        self._armed = False
        self._counter: Any = None
        self._samples = 0

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        from lightning.pytorch.strategies import ModelParallelStrategy

        if trainer.global_rank == 0 and isinstance(trainer.strategy, ModelParallelStrategy):
            self._unsharded = copy.deepcopy(pl_module, memo={id(trainer): None})

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_rank != 0:
            return
        unsharded, self._unsharded = self._unsharded, None
        try:
            self.flops_per_sample = measure_flops_per_sample(trainer, pl_module, unsharded)
        except Exception as exc:
            self.problem = self.copy_problem = _one_line(exc)
            self._armed = True

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if not self._armed:
            return
        self._armed = False
        why_not = self._first_step()
        if why_not is not None:
            self._also(f"the first step is not counted: {why_not}")
            return
        try:
            combined = several_loaders(trainer.train_dataloader)
            self._samples = batch_size_of(pl_module, batch, combined=combined)
        except Exception as exc:
            self._also(f"on the first step: {_one_line(exc)}")
            return
        self._counter = flop_counter()
        self._counter.__enter__()

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        counter = self._stop()
        if counter is None:
            return
        if pl_module.automatic_optimization and outputs is None:
            # Lightning skipped the backward and the optimizer step: a forward alone
            self._also("the first step returned no loss")
            return
        flops = float(counter.get_total_flops())
        if self._samples > 0 and flops > 0:
            self.flops_per_sample, self.problem = flops / self._samples, None
        else:
            self._also("the first step counted no FLOPs")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A module whose on_train_batch_start returned -1 skips the rest of the epoch, its
        # first batch included, which never reaches on_train_batch_end: the counter stops
        # here, its count unused.
        if self._stop() is not None:
            self._also("the module skipped its first step")

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._stop()

    @property
    def counted_live(self) -> bool:
        """Whether the FLOPs were counted on the first real training step: the copy failed,
        and there are FLOPs."""
        return self.copy_problem is not None and self.flops_per_sample is not None

    def _also(self, why: str) -> None:
        """Why the first step gave no FLOPs either, after why the copy gave none."""
        self.problem = f"{self.problem}; {why}"

    def _stop(self) -> Any:
        """Leave the live counter, if one is counting; it, or None."""
        counter, self._counter = self._counter, None
        if counter is not None:
            counter.__exit__(None, None, None)
        return counter


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(exc) or '(no message)'}"


def _rng_states() -> tuple[Any, ...]:
    import numpy as np

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda


def _restore_rng(states: tuple[Any, ...]) -> None:
    import numpy as np

    py, npy, cpu, cuda = states
    random.setstate(py)
    np.random.set_state(npy)
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


def _untouched(loader: Any) -> Any:
    """A loader whose fresh iterator gives what ``loader``'s would, without touching ``loader``.

    A DataLoader with ``persistent_workers`` keeps one iterator, which Lightning has started
    by training's start: another ``iter()`` restarts it, and that rank's first epoch runs a
    batch short while the other ranks wait for it in a collective until the timeout. Such a
    loader is read through a twin on the same data set, sampler and collate function, in this
    process (no workers started); any other loader is itself."""
    from torch.utils.data import DataLoader, IterableDataset

    if not (isinstance(loader, DataLoader) and loader.persistent_workers):
        return loader
    same = {"collate_fn": loader.collate_fn, "num_workers": 0}
    if isinstance(loader.dataset, IterableDataset):
        return DataLoader(
            loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, **same
        )
    if loader.batch_sampler is not None:
        return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, **same)
    return DataLoader(loader.dataset, batch_size=None, sampler=loader.sampler, **same)


def _first_training_batch(loader: Any) -> tuple[Any, bool]:
    """The first batch a fresh iterator of the training loader(s) gives, as ``training_step``
    receives it (several loaders: one batch of each, combined as Lightning does by default),
    and whether it is such a combined batch. The training loaders are left as they were."""
    if several_loaders(loader):
        from lightning.pytorch.utilities import CombinedLoader

        iterables = getattr(loader, "iterables", loader)
        if isinstance(iterables, Mapping):
            twins: Any = {key: _untouched(part) for key, part in iterables.items()}
        else:
            twins = type(iterables)(_untouched(part) for part in iterables)
        batch, _, _ = next(iter(CombinedLoader(twins)))
        return batch, True
    return next(iter(_untouched(loader))), False


def measure_flops_per_sample(
    trainer: L.Trainer, module: L.LightningModule, unsharded: L.LightningModule | None = None
) -> float:
    """FLOPs per sample of one training batch, on a copy of ``module`` (or on ``unsharded``,
    the copy taken before FSDP sharded it, moved to the training device)."""
    states = _rng_states()
    try:
        batch, combined = _first_training_batch(trainer.train_dataloader)
        batch = trainer.strategy.batch_to_device(batch)
        samples = batch_size_of(module, batch, combined=combined)
        if unsharded is not None:
            probe = unsharded.to(trainer.strategy.root_device)
        else:
            probe = copy.deepcopy(module, memo={id(trainer): None})
        probe.train()
        counter = flop_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # self.log() without a trainer warns
            with counter, trainer.precision_plugin.train_step_context():
                out = probe.training_step(batch, 0)
                loss = out["loss"] if isinstance(out, Mapping) else out
                if not isinstance(loss, torch.Tensor):
                    raise ScalescopeError("training_step returned no loss tensor")
                loss.backward()
        del probe
    finally:
        _restore_rng(states)
    if samples <= 0:
        raise ScalescopeError("the probed batch holds no samples")
    return float(counter.get_total_flops()) / samples


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
    """The record's identity with the batch sizes the training ``loader`` really yielded, and
    the record's ``batch`` section (docs/your-module.md)."""
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
    micro_passed = configured // k
    section: dict[str, Any] = {
        "loaders": len(loaders),
        "per_device_mean": mean,
        "per_device_max": (counted.max_step_samples or counted.max_batch * k) or None,
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
    if mean is None:  # nothing was yielded: the configured figures stand
        return ident, section
    measured = max(1, round(mean))
    micro_mean = counted.micro_batch_mean or 0.0
    if passed_to and counted.max_batch != micro_passed:
        warnings_.append(
            f"scalescope passed batch_size={micro_passed} to {passed_to}, but its training "
            f"loader yielded batches of {counted.max_batch} at most (mean {micro_mean:.4g}) "
            "per device: the record uses the measured batch"
        )
    ident = dataclasses.replace(
        ident, per_device_batch_size=measured, global_batch_size=measured * world
    )
    return ident, section
