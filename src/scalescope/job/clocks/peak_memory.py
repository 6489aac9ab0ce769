"""Training's and validation's peak device memory, apart.

Users size their batch from the training peak. Validation often runs a larger batch (the
``gpt`` workload validates 64 sequences at a time) and without the optimizer's state, so one
peak over the whole fit says what validation needed, not what training did. The allocator's
peak counter is read and reset at each validation's edges: what came before a validation was
training, what it held during one was validation. Only at those edges, never per step.
"""

from __future__ import annotations

from collections.abc import Callable

GIB = 2**30


class DevicePeaks:
    """The training and validation peaks of one device, from the allocator's peak counter
    (``read``: bytes allocated at most since the last ``reset``)."""

    def __init__(
        self,
        read: Callable[[], float],
        reset: Callable[[], None],
        read_reserved: Callable[[], float] | None = None,
    ) -> None:
        self._read, self._reset = read, reset
        self._read_reserved = read_reserved
        self._train = 0.0
        self._train_reserved = 0.0
        self._val: float | None = None

    @classmethod
    def of(cls, device: object) -> DevicePeaks | None:
        """The peaks of a CUDA ``device``; None elsewhere (the record says None on CPUs)."""
        import torch

        if getattr(device, "type", None) != "cuda":
            return None
        return cls(
            lambda: float(torch.cuda.max_memory_allocated(device)),
            lambda: torch.cuda.reset_peak_memory_stats(device),
            lambda: float(torch.cuda.memory_stats(device).get("reserved_bytes.all.peak", 0)),
        )

    def validation_starts(self) -> None:
        self._train = max(self._train, self._read())
        if self._read_reserved is not None:
            self._train_reserved = max(self._train_reserved, self._read_reserved())
        self._reset()

    def validation_ends(self) -> None:
        self._val = max(self._val or 0.0, self._read())
        self._reset()

    def training_gib(self) -> float:
        """The training peak so far: before each validation, and since the last one."""
        return max(self._train, self._read()) / GIB

    def training_reserved_gib(self) -> float | None:
        """Training's peak of memory the allocator reserved (its cache included: what the
        device had to have); None where it cannot be read."""
        if self._read_reserved is None:
            return None
        return max(self._train_reserved, self._read_reserved()) / GIB

    def validation_gib(self) -> float | None:
        """The validation peak; None when no validation ran."""
        return None if self._val is None else self._val / GIB
