"""``torch.compile`` in a timed run: where it happens, and what it cost.

``trainer.compile: true`` compiles the module's ``forward`` (what its training step calls, the
built-ins' and a user's alike) when training starts: after the FLOPs probe, which measures the
eager module, and before the clock starts. Compilation itself happens in the first steps that
call it, which fall inside the warm-up (``trainer.warmup_steps``), so the steady-state figures
never include it.

Whether scalescope compiled or the module compiled itself (``torch.compile`` in its
``configure_model``), :class:`CompileClock` reads dynamo's cumulative compile time at the
warm-up's end and at training's end, leaving out what validation compiled (the eval-mode
graph): the record's ``compile`` section then says how much compiling the warm-up held and
how much fell in the steady state (a recompilation: a new input shape, a guard that failed),
which a warning names. What compiled before training (the FLOPs probe's copy of a module
that compiles itself: its compiled code is then reused) is ``before_s``, outside every timed
interval.
"""

from __future__ import annotations

from typing import Any

import lightning as L

from .timing import Timings

STEADY_COMPILE_S = 0.01
"""Compiling in the steady state above this is a warning (dynamo's bookkeeping alone stays
far below it)."""


def compile_seconds() -> float | None:
    """Wall seconds this process has spent compiling with dynamo (frames and backward graphs
    together); None where this torch does not keep the count."""
    try:
        from torch._dynamo.utils import calculate_time_spent
    except ImportError:  # pragma: no cover - every torch scalescope supports has it
        return None
    try:
        return float(calculate_time_spent().get("total_wall_time", 0.0))
    except Exception:  # pragma: no cover - an internal API that may change shape
        return None


class CompileForward(L.Callback):
    """Compiles the module's ``forward`` when training starts (put it after the FLOPs probe and
    before the TimingCallback): an instance attribute over the class's method, so DDP's
    wrapper, the hooks on the module and its training step all reach the compiled one."""

    def __init__(self, backend: str) -> None:
        self.backend = backend

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        import torch

        pl_module.forward = torch.compile(pl_module.forward, backend=self.backend)  # type: ignore[method-assign]


class CompileClock(L.Callback):
    """Compile seconds split at the warm-up's end, validation's compiling left out. Put it after
    the TimingCallback, which stamps the warm-up at the same hook."""

    def __init__(self, timings: Timings, *, backend: str | None) -> None:
        self.t = timings
        self.backend = backend
        self.start: float | None = None
        self.at_warmup: float | None = None
        self.end: float | None = None
        self.validation = 0.0
        self.validation_after_warmup = 0.0
        self._val_start: float | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start = compile_seconds()
        if self.t.warmup_steps is not None:  # no warm-up at all: the steady state starts here
            self.at_warmup = self.start

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        if self.at_warmup is None and self.t.warmup_steps is not None:
            self.at_warmup = compile_seconds()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._val_start = compile_seconds()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        now = compile_seconds()
        if self._val_start is not None and now is not None:
            spent = now - self._val_start
            self.validation += spent
            if self.at_warmup is not None:
                self.validation_after_warmup += spent
        self._val_start = None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.end = compile_seconds()

    def section(self, enabled: bool) -> dict[str, Any] | None:
        """The record's ``compile`` section; None where nothing was compiled and nothing asked."""
        if self.start is None or self.end is None:
            return None if not enabled else {"enabled": True, "backend": self.backend}
        training = self.end - self.start - self.validation
        if training <= 0 and self.start <= 0 and not enabled:
            return None  # nothing compiled: an eager run
        warm = None
        steady = None
        if self.at_warmup is not None:
            warm = self.at_warmup - self.start
            steady = max(0.0, self.end - self.at_warmup - self.validation_after_warmup)
        warnings = []
        if steady is not None and steady > STEADY_COMPILE_S:
            warnings.append(
                f"{steady:.2f} s of compiling fell in the steady state (a recompilation: a new "
                "input shape or a guard that failed), and the steady-state figures include it; "
                "drop_last=True on the loader, or a longer trainer.warmup_steps"
            )
        return {
            "enabled": enabled,
            "by": "scalescope" if enabled else "module",
            "backend": self.backend if enabled else None,
            "before_s": self.start,
            "training_s": max(0.0, training),
            "warmup_s": warm,
            "steady_s": steady,
            "validation_s": self.validation,
            "warnings": warnings,
        }
