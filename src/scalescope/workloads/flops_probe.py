"""Training FLOPs per sample of a user's LightningModule, measured once on rank 0
(:class:`FlopsProbe`): on a copy of the module before the clock starts, or on the first real
step of a module whose step needs its trainer. The counter is ``flop_formulas``'."""

from __future__ import annotations

import copy
import random
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch

from ..errors import ScalescopeError, described
from .flop_formulas import flop_counter
from .user_measurement import batch_size_of, several_loaders


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
            self.problem = self.copy_problem = described(exc)
            self._armed = True
        finally:
            del unsharded
            _forget_peak(getattr(getattr(trainer, "strategy", None), "root_device", None))

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
            self._also(f"on the first step: {described(exc)}")
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


def _forget_peak(device: torch.device | None) -> None:
    """On a GPU, the probe's copy released and the allocator's peak counters reset: the
    probe runs a whole model's forward and backward before training (under FSDP, the model
    unsharded), which the record's training peak is not."""
    if device is None or device.type != "cuda":
        return
    import gc

    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)


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
