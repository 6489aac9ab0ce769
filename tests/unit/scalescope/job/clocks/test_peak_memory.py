"""Training's and validation's peak device memory apart (scalescope.job.clocks.peak_memory), on an
allocator model: what is allocated, and the peak counter since its last reset, as CUDA's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.job.clocks.peak_memory import GIB, DevicePeaks


class Allocator:
    """Bytes in use and the most in use since the last reset (torch.cuda's peak counter)."""

    def __init__(self) -> None:
        self.used = 0.0
        self.peak = 0.0

    def set(self, used: float) -> None:
        self.used = used
        self.peak = max(self.peak, used)

    def reset(self) -> None:
        self.peak = self.used


def _peaks(a: Allocator) -> DevicePeaks:
    return DevicePeaks(lambda: a.peak, a.reset)


def test_a_larger_validation_batch_does_not_inflate_the_training_peak() -> None:
    """The gpt case: training at 16 GiB, validation's batch needs 32 GiB."""
    a = Allocator()
    peaks = _peaks(a)
    for _ in range(3):  # epochs: training, then validation
        a.set(4 * GIB)  # weights and optimizer state
        a.set(16 * GIB)  # a training step's activations
        a.set(4 * GIB)
        peaks.validation_starts()
        a.set(32 * GIB)  # a validation batch's logits
        a.set(4 * GIB)
        peaks.validation_ends()
    assert peaks.training_gib() == 16
    assert peaks.validation_gib() == 32


def test_training_after_the_last_validation_counts_and_no_validation_is_none() -> None:
    a = Allocator()
    peaks = _peaks(a)
    a.set(2 * GIB)
    assert peaks.validation_gib() is None
    peaks.validation_starts()
    a.set(3 * GIB)
    peaks.validation_ends()
    a.set(7 * GIB)  # a later epoch's training peaks higher
    assert peaks.training_gib() == 7
    assert peaks.validation_gib() == 3


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 10**12)), max_size=60))
def test_the_two_peaks_are_the_highest_use_in_their_own_phase(events: list) -> None:
    """Whatever the allocations: the training peak is the most used outside validation (the
    level held when it resumes included), the validation peak the most used inside it."""
    a = Allocator()
    peaks = _peaks(a)
    in_val = False
    seen = {False: 0.0, True: None}
    for toggle, used in events:
        if toggle:
            if in_val:
                peaks.validation_ends()
                seen[False] = max(seen[False], a.used)  # what is held when training resumes
            else:
                peaks.validation_starts()
                seen[True] = max(seen[True] or 0.0, a.used)
            in_val = not in_val
            continue
        a.set(float(used))
        seen[in_val] = max(seen[in_val] or 0.0, float(used))
    if in_val:
        peaks.validation_ends()
    assert peaks.training_gib() * GIB == pytest.approx(max(seen[False], a.used))
    if seen[True] is None:
        assert peaks.validation_gib() is None
    else:
        assert peaks.validation_gib() * GIB == pytest.approx(seen[True])
