"""When each of DDP's gradient buckets became ready during backward, over a few steady steps.

The projection's step model starts each bucket's all-reduce when the bucket is ready
(analysis/compute/projection/step_time/bucket_overlap.py). Without a measurement it takes a bucket
as ready when backward has produced the bytes up to it, which is biased where a model's large
layers come last in forward: their gradients are the first backward produces. This records,
for the first :data:`READY_STEPS` steady steps that all-reduce, each bucket's offset from
backward's start and each step's backward (start to last gradient), on every rank; the
record keeps the typical rank's (``diagnosis.bucket_ready``).

How, and why this way:

* **No comm hook.** DDP's communication hook is called when a bucket is ready, but it
  replaces DDP's built-in all-reduce (the hook must reduce, and its arithmetic is then the
  hook's), which the breakdown leaves untouched. Instead a post-accumulate-grad hook on every
  trainable parameter marks when its gradient is computed: the moment DDP's own autograd hook,
  on the same AccumulateGrad, marks the parameter ready for its reducer. A bucket is ready
  when the last of its parameters is: the latest of their marks. Backward's start is
  Lightning's ``on_before_backward``.
* **Which parameters are in which bucket:** DDP's own logging data,
  ``rebuilt_per_bucket_param_indices`` (indices into its parameters: the trainable ones in
  the module's order), checked against the bucket sizes :func:`.allreduce.read_ddp_buckets`
  reads. Where a torch version does not log them, the first backward's gradient order split
  at those sizes (:func:`split_by_sizes`): DDP rebuilds its buckets in that order, whole
  parameters to a bucket. Where neither adds up, or DDP never rebuilt its buckets
  (``find_unused_parameters`` without a static graph), nothing is recorded, with the reason.
* **Clocks:** the breakdown's (:mod:`.step_clock`): the wall clock on CPUs; on GPUs a CUDA
  event recorded on the stream backward runs on, so a mark is when the gradient was computed
  on the device (when DDP's all-reduce of it can start), not when the host queued it. The
  events are read once, after training, when the device has been synchronised.
* **Cost, inside the steady state, and negligible:** one hook call and one mark per
  parameter in :data:`READY_STEPS` steps: 0.7-0.9 µs a parameter and step on the reference
  machine's CPU (``benchmarks/readiness_cost.py``: the fastest backward with and without the
  timer, 400 parameters), so some 0.1 ms over the 4 steps for VGG-16's 32 parameters and
  0.6 ms for ResNet-50's 161, against steady states of seconds. The hooks are registered at
  the first timed step and removed after the last; their own host time, registration
  included, is the section's ``overhead_s`` (the 2-process test checks it is under 1% of
  the steady time).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from ...errors import described
from .step_clock import Clock

READY_STEPS = 4
"""Steady steps (their backward that all-reduces) whose gradients are timed."""


def parse_bucket_indices(text: Any) -> list[list[int]] | None:
    """DDP's ``rebuilt_per_bucket_param_indices`` ("5 4, 3 2 0 1": buckets by commas,
    parameter indices by spaces), or None where it is not that."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        buckets = [[int(i) for i in part.split()] for part in text.split(",")]
    except ValueError:
        return None
    return buckets if all(buckets) else None


def split_by_sizes(
    order: Sequence[int], param_bytes: Sequence[int], sizes: Sequence[int]
) -> list[list[int]] | None:
    """The parameters of each bucket: ``order`` (parameter indices, as the first backward
    produced their gradients) cut into whole parameters whose bytes add up to each of
    ``sizes`` in turn; None where they do not add up exactly."""
    out: list[list[int]] = []
    at = 0
    for size in sizes:
        bucket: list[int] = []
        filled = 0
        while filled < size and at < len(order):
            bucket.append(order[at])
            filled += param_bytes[order[at]]
            at += 1
        if filled != size:
            return None
        out.append(bucket)
    return out if at == len(order) else None


def bucket_offsets(marks: Sequence[float | None], buckets: Sequence[Sequence[int]]) -> list[float]:
    """Each bucket's ready offset (seconds from backward's start): the latest of its
    parameters' marks. A parameter without a gradient in the step (unused, under
    ``find_unused_parameters``) is one DDP marks ready at the step's first gradient."""
    first = min(m for m in marks if m is not None)
    return [max(first if marks[i] is None else marks[i] for i in b) for b in buckets]  # type: ignore[misc]


def summary(
    steps: Sequence[tuple[float, list[float]]],
    bucket_bytes: Sequence[int],
    mapped_by: str,
    overhead_s: float,
) -> dict[str, Any]:
    """A rank's part of the record's ``bucket_ready`` section from its timed steps, each
    (backward to its last gradient, every bucket's ready offset), in seconds.
    ``ready_share``: per bucket, the median over the steps of its offset over that step's
    backward."""
    shares = [[min(1.0, o / b) if b > 0 else 1.0 for o in offsets] for b, offsets in steps]
    return {
        "status": "recorded",
        "reason": None,
        "steps": len(steps),
        "bucket_bytes": list(bucket_bytes),
        "backward_s": [b for b, _ in steps],
        "ready_s": [offsets for _, offsets in steps],
        "ready_share": [statistics.median(s[i] for s in shares) for i in range(len(bucket_bytes))],
        "mapped_by": mapped_by,
        "overhead_s": overhead_s,
    }


def not_recorded(reason: str) -> dict[str, Any]:
    return {"status": "not recorded", "reason": reason}


class ReadinessTimer:
    """Times every trainable parameter's gradient in the first :data:`READY_STEPS` backwards
    it is started for (see the module doc); :meth:`result` maps them to DDP's buckets."""

    def __init__(self, clock: Clock, params: Sequence[Any], steps: int = READY_STEPS) -> None:
        self.clock = clock
        self.params = list(params)
        self.steps_wanted = steps
        self.raw: list[tuple[Any, list[Any]]] = []
        """Each timed step's (backward's start mark, every parameter's mark or None)."""
        self.overhead_s = 0.0
        self._hooks: list[Any] = []
        self._start: Any = None
        self._marks: list[Any] = []

    @property
    def done(self) -> bool:
        return len(self.raw) >= self.steps_wanted

    def backward_starts(self) -> None:
        if self.done:
            return
        t0 = time.perf_counter()
        if not self._hooks:
            self._hooks = [
                p.register_post_accumulate_grad_hook(lambda _p, i=i: self._gradient(i))
                for i, p in enumerate(self.params)
            ]
        self._marks = [None] * len(self.params)
        self._start = self.clock.mark()
        self.overhead_s += time.perf_counter() - t0

    def _gradient(self, i: int) -> None:
        if self._start is not None:
            t0 = time.perf_counter()
            self._marks[i] = self.clock.mark()
            self.overhead_s += time.perf_counter() - t0

    def backward_ends(self) -> None:
        """After a backward started with :meth:`backward_starts`: keep its marks, and remove
        the hooks once enough steps are timed."""
        if self._start is None:
            return
        if any(m is not None for m in self._marks):
            self.raw.append((self._start, self._marks))
        self._start, self._marks = None, []
        if self.done:
            self.close()

    def close(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._start = None

    def result(self, model: Any, first_order: Sequence[int] | None) -> dict[str, Any]:
        """This rank's part: the timed steps mapped to DDP's buckets (call after the device
        was synchronised). Never raises: where it cannot be done, why."""
        self.close()
        try:
            return self._result(model, first_order)
        except Exception as exc:  # private DDP data, device events: the record goes on
            return not_recorded(described(exc))

    def _result(self, model: Any, first_order: Sequence[int] | None) -> dict[str, Any]:
        from .allreduce import read_ddp_buckets

        if not self.raw:
            return not_recorded("no steady step that all-reduced gradients was timed")
        sizes, why = read_ddp_buckets(model)
        if sizes is None:
            return not_recorded(why or "DDP's buckets not read")
        nbytes = [p.numel() * p.element_size() for p in self.params]
        buckets, mapped_by = bucket_params(model, first_order, nbytes, sizes)
        if buckets is None:
            return not_recorded(mapped_by)
        steps = []
        for start, marks in self.raw:
            offsets = [None if m is None else self.clock.seconds(start, m) for m in marks]
            backward = max(o for o in offsets if o is not None)
            steps.append((backward, bucket_offsets(offsets, buckets)))
        return summary(steps, sizes, mapped_by, self.overhead_s)


def bucket_params(
    model: Any, first_order: Sequence[int] | None, nbytes: Sequence[int], sizes: Sequence[int]
) -> tuple[list[list[int]] | None, str]:
    """(the parameter indices of each of DDP's buckets, how they were found), or (None,
    why not): DDP's logged indices where their bytes make its buckets, else the first
    backward's order split at the sizes."""
    data = model._get_ddp_logging_data()
    if not data.get("has_rebuilt_buckets"):
        return None, (
            "DDP kept the buckets it built at construction (find_unused_parameters without "
            "static_graph), in no order the gradients give"
        )
    logged = parse_bucket_indices(data.get("rebuilt_per_bucket_param_indices"))
    if logged is not None and _adds_up(logged, nbytes, sizes):
        return logged, "ddp"
    if first_order and len(set(first_order)) == len(nbytes):
        split = split_by_sizes(first_order, nbytes, sizes)
        if split is not None:
            return split, "gradient order"
    return None, (
        "the parameters do not add up to DDP's buckets (neither its logged parameter indices "
        "nor the first backward's gradient order cut at its bucket sizes)"
    )


def _adds_up(buckets: Sequence[Sequence[int]], nbytes: Sequence[int], sizes: Sequence[int]) -> bool:
    if len(buckets) != len(sizes):
        return False
    flat = [i for b in buckets for i in b]
    if sorted(flat) != list(range(len(nbytes))):
        return False
    return all(sum(nbytes[i] for i in b) == s for b, s in zip(buckets, sizes, strict=True))
