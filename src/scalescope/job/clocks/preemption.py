"""Stop cleanly at Slurm's SIGTERM, within seconds, on every rank at the same step.

Slurm announces the end of a job (time limit, preemption, ``scancel``) with SIGTERM to every
task and follows with SIGKILL after ``KillWait`` (30 s by default, 10 s on the local test
cluster). The job must notice, stop training and write its record inside that window.

Lightning 2.6 does this badly for benchmarks: its SIGTERM handler runs a ``broadcast`` from
inside the signal handler (a collective at an arbitrary point, which can pair with whatever
collective another rank is in), and its loop broadcasts a flag before *every* Lightning call,
a collective plus a host sync per call. Each rank also stops on its own flag after a call,
so ranks that got the signal at different moments can stop at different steps and leave the
others blocked in a collective. :class:`StopOnSignal` replaces all of that:

* the handler only sets a flag on this rank (and forwards the signal to the processes of
  Lightning's own launcher, as Lightning does); it never runs a collective;
* at agreed optimizer steps, every rank all-reduces ``[flag, seconds since the last check]``
  with MAX: one small collective that every rank runs at the same step, so either all stop
  or none does, and any rank's signal stops them all;
* the number of steps to the next check is computed from that reduced elapsed time, which is
  identical on every rank, so the ranks stay in lockstep without a per-step collective.
  A per-rank wall clock cannot decide when to check: two ranks would decide on different
  steps and one would wait for a collective the other never joins. The interval aims at
  :data:`CHECK_INTERVAL_S`; when steps take longer than that the check runs every step,
  where its cost (about a millisecond) is negligible next to the step. It grows at most
  twofold per check, so a run that slows down after fast steps is late by at most the
  steps it had agreed to when they were fast;
* the check runs before every other callback's ``on_before_optimizer_step`` (the job puts
  this callback first), so the ranks reach it together, straight from the gradient sync: a
  rank delayed by a hook after it is waited for in the next step's timed collective, not in
  this untimed one, which would hide the wait in compute.

Validation is not interrupted: a signal during validation is acted on at the first training
step after it.

Slurm signals every process of the step, a rank's DataLoader workers too, and torch's worker
dies of a SIGTERM its parent did not send; the rank's SIGCHLD handler then raises "DataLoader
worker ... is killed by signal: Terminated" wherever the rank is, before any check, and no
record is written. :func:`keep_workers_through_sigterm` lets the workers a rank forks live
through such a SIGTERM, so the rank stops as above and ends them itself.
"""

from __future__ import annotations

import multiprocessing.util
import os
import signal
import threading
import time
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.utilities.exceptions import SIGTERMException

CHECK_INTERVAL_S = 1.0
"""Aim for one SIGTERM check this often (or every step, when a step takes longer). Slurm's
grace period is 30 s by default and may be a few seconds: checking every second leaves
most of it for agreeing on the timings and writing the record."""

STOP_SIGTERM = "sigterm"
"""``stop_reason`` of a run stopped by SIGTERM (time limit, preemption, scancel)."""


class _Forks:
    """What :func:`multiprocessing.util.register_after_fork` keys its hook on (a weak
    reference: this module keeps the one instance alive)."""


_FORKS = _Forks()
_shielding = False


def keep_workers_through_sigterm() -> None:
    """From now on, a process this one forks with :mod:`multiprocessing` (a DataLoader's
    workers, under the default ``fork`` start method) lives through a SIGTERM from anyone but
    its parent: Slurm's at a time limit, a preemption or ``scancel``, which reaches every
    process of the step at once. Its parent ends it as before: torch's worker exits quietly at
    its parent's SIGTERM, and so does this one. Slurm's SIGKILL after ``KillWait`` ends it in
    any case. A worker started with ``spawn`` or ``forkserver`` keeps torch's handling. A
    program a worker runs (``subprocess``) inherits the blocked signal, as every child does a
    signal mask: it too lives until its parent ends it or Slurm's SIGKILL."""
    global _shielding
    if not _shielding:
        multiprocessing.util.register_after_fork(_FORKS, _shield_this_process)
        _shielding = True


def _shield_this_process(_: _Forks) -> None:
    """In the forked child, before its target runs: SIGTERM is blocked (torch's worker sets its
    own handler later, which a blocked signal never reaches; threads started later inherit
    the mask) and taken by a thread that reads who sent it."""
    parent = os.getppid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(
        target=_sigterm_from, args=(parent,), name="scalescope-sigterm", daemon=True
    ).start()


def _sigterm_from(parent: int) -> None:
    """Exit at the parent's SIGTERM (as torch's worker does: quietly, with status 0); let any
    other go by."""
    while True:
        if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
            os._exit(0)


class StopOnSignal(L.Callback):
    """Stops training on SIGTERM at a step all ranks agree on; ``reason`` says why."""

    def __init__(self, interval_s: float = CHECK_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.signalled = False
        """This rank received SIGTERM (set by the signal handler)."""
        self.reason: str | None = None
        """Set on every rank when training stopped early."""
        self.stopped_at_step: int | None = None
        self.every = 1
        """Optimizer steps between checks; the same on every rank."""
        self._next_check = 0
        self._last: tuple[int, float] = (0, 0.0)
        self._distributed = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Lightning registers its handlers after setup, reading this attribute then: the
        # instance attribute takes the place of its notifier (which broadcasts in the handler
        # and sets the per-rank flag its loops stop on).
        connector = trainer._signal_connector
        connector._sigterm_notifier_fn = self._on_sigterm  # type: ignore[method-assign,assignment]
        self._trainer = trainer
        keep_workers_through_sigterm()  # before Lightning builds the loaders and their workers

    def _on_sigterm(self, signum: Any, frame: Any) -> None:
        if not self.signalled:
            launcher = self._trainer.strategy.launcher
            if launcher is not None:  # Lightning's own launcher: pass it on to the other ranks
                launcher.kill(signum)
        self.signalled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._distributed = dist.is_available() and dist.is_initialized() and trainer.world_size > 1
        self.every = 1
        self._next_check = trainer.global_step
        self._last = (trainer.global_step, time.perf_counter())

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        step = trainer.global_step
        if not self._distributed:
            stop = self.signalled  # one process: reading a flag is free, check every step
        elif step < self._next_check:
            return
        else:
            stop = self._agree(trainer, step)
        if stop:
            self.reason = STOP_SIGTERM
            self.stopped_at_step = step
            raise SIGTERMException()

    def _agree(self, trainer: L.Trainer, step: int) -> bool:
        now = time.perf_counter()
        last_step, last_time = self._last
        mine = torch.tensor(
            [1.0 if self.signalled else 0.0, now - last_time],
            dtype=torch.float64,
            device=trainer.strategy.root_device,
        )
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        flag, elapsed_s = mine.tolist()
        self._last = (step, now)
        self.every = next_interval_steps(self.every, elapsed_s, step - last_step, self.interval_s)
        self._next_check = step + self.every
        return flag > 0


def next_interval_steps(every: int, elapsed_s: float, steps: int, interval_s: float) -> int:
    """Steps until the next check: about ``interval_s`` worth at the measured step time, at
    least 1, at most twice ``every``. Pure arithmetic on values every rank holds alike (the
    reduced elapsed time, the shared step count), so every rank gets the same answer."""
    step_s = elapsed_s / max(1, steps)
    most = 2 * every
    if step_s * most <= interval_s:  # also covers step_s == 0 (no overflow to inf)
        return most
    return max(1, int(interval_s / step_s))
