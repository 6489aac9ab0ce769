"""Running a job's training and ending it: the fit (:func:`fit`), stopped at Slurm's SIGTERM
on every rank at the same step (:mod:`..clocks.preemption`) or by Ctrl-C, and the end every rank
meets (:func:`end_run`)."""

from __future__ import annotations

import time
from typing import Any

from ...errors import SameOnEveryRankError, ScalescopeError
from .topology import Topology

EXIT_STOPPED = 143
"""Exit status of a run stopped early by SIGTERM (128 + 15, what the signal itself gives):
it did not train what it was asked to, so it never exits 0, and its record says why."""


UNUSED_PARAMETERS = (
    "parameters that were not used in producing the loss",
    "Expected to have finished reduction in the prior iteration",
)
"""The stable cores of DDP's error when a step's backward left parameters without a gradient
(its own, "Expected to have finished reduction ...") and of Lightning's rewrite of it."""


class TrainingStopped(SameOnEveryRankError):
    """Training stopped before the end (Slurm's SIGTERM) at a step every rank agreed on; the
    record, if any, was written. Rank 0 says it for all."""

    exit_code = EXIT_STOPPED


def fit(trainer: Any, model: Any, datamodule: Any, stop: Any, timings: Any) -> None:
    """``trainer.fit``. Stopped at SIGTERM (``stop``, the StopOnSignal, says why), it
    returns: the epochs completed still count. Ctrl-C is a KeyboardInterrupt; a training
    loader that yielded nothing, one line."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    try:
        trainer.fit(model, datamodule=datamodule)
    except SIGTERMException:  # a SystemExit: caught first
        # Every rank stopped at the same step (StopOnSignal): they can still agree on
        # the timings of the epochs they completed and write a record that says why.
        if stop.reason is None:
            raise
        if timings.train_end_unix != timings.train_end_unix:  # NaN: never reached
            timings.train_end_unix = time.time()
    except SystemExit:
        # Lightning answers Ctrl-C with a graceful shutdown and sys.exit(1); report it as
        # what it is (the CLI prints one line and exits 130). No record is written.
        if trainer.interrupted:
            raise KeyboardInterrupt from None
        raise
    except RuntimeError as exc:
        if not any(core in str(exc) for core in UNUSED_PARAMETERS):
            raise
        raise ScalescopeError(_unused_parameters(trainer)) from exc
    if trainer.global_step == 0 and stop.reason is None:  # a stream that yielded nothing
        raise SameOnEveryRankError(
            f"the training loader of {_loader_owner(trainer)} yielded no "
            "batch: nothing was trained",
            rank=trainer.global_rank,
        )


def _unused_parameters(trainer: Any) -> str:
    """DDP's error about parameters a backward left without a gradient, in one line naming
    the setting: to set where it is off; where it is on already, what it cannot cover."""
    name = type(trainer.lightning_module).__name__
    if getattr(trainer.strategy, "_ddp_kwargs", {}).get("find_unused_parameters"):
        return (
            f"trainer.find_unused_parameters: DDP did not finish reducing the gradients of {name} "
            "in a step although it is true: by torch's reading of this error, it could not "
            "find the output tensors in what the wrapped module's forward (the training step) "
            "returned"
        )
    return (
        f"trainer.find_unused_parameters: DDP found parameters of {name} that a backward did "
        "not use (a GAN's alternating passes, a branch not taken): set "
        "trainer.find_unused_parameters=true"
    )


def _loader_owner(trainer: Any) -> str:
    """Whose training loader this is: the data module's, else the module's."""
    datamodule = getattr(trainer, "datamodule", None)
    owner = datamodule if datamodule is not None else trainer.lightning_module
    return type(owner).__name__


def end_run(topo: Topology, stop: Any, agreed: Any) -> None:
    """Every rank leaves the process group together; a run stopped early then raises
    :class:`TrainingStopped` (``agreed``: the timings its record covers)."""
    _leave_process_group()
    if stop.reason is not None:
        raise TrainingStopped(
            f"stopped early ({stop.reason}) at step {stop.stopped_at_step}; the record "
            f"covers the {len(agreed.epoch_times_s)} complete epoch(s) before it and says "
            f"stop_reason={stop.reason}",
            rank=topo.global_rank,
        )


def _leave_process_group() -> None:
    """All ranks meet, then tear the process group down before the interpreter exits.

    Left to interpreter shutdown, a non-zero rank could abort in the communicator's
    destructor ("terminate called without an active exception") while rank 0 was still
    finishing its Comet archive; srun --kill-on-bad-exit then killed rank 0 too. The
    barrier also keeps the other ranks alive until rank 0 has written its record.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
