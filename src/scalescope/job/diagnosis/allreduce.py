"""The all-reduce baseline: what the job's own interconnect delivers, measured at start-up.

An nccl-tests-style sweep (``all_reduce_perf``): float32 messages of 4 KiB, 8 KiB, ... doubling
up to the model's gradient size or 8 MiB, whichever is larger, the gradient size itself among
them. Per size: one warm-up op, then a barrier (a one-element all-reduce every rank waits for)
and an adaptive number of ops back to back, timed by each rank on its own clock. The time of
one op is the MEAN over ranks of each rank's time / ops, as nccl-tests reports by default (the
barrier is what keeps a rank's clock from counting the wait for a late peer), and

    algbw = bytes / time                      (GB/s = 1e9 B/s, as nccl-tests prints)
    busbw = algbw * 2 (n - 1) / n             (ring all-reduce: each byte crosses 2(n-1)/n links)

The section's ``busbw_gbps`` is the one at the largest size swept; ``busbw_at_gradient_gbps``
the one at the gradient size (its measured row, or the fitted model where the sweep stopped
before it).

A latency + bandwidth model is fitted to the measured sizes (:func:`fit_model`),

    t(n) = alpha + n * beta_bus * 2 (n - 1) / n     (beta_bus = 1 / busbw, n ranks)

by least squares on relative residuals, with its error: the relative RMS residual and the
standard errors of alpha and busbw. ``predicted_step_s`` is the all-reduce time of one
optimizer step's gradients sent the way DDP sends them: bucket by bucket, one after another,
each bucket's time from the fitted model (inside the sweep or beyond it). The buckets are
DDP's own where they can be read (:func:`read_ddp_buckets`, after training: DDP builds them
in its first iterations, whole parameters to a bucket, so they overshoot their 1 MiB / 25 MiB
caps), else estimated (:func:`estimate_bucket_bytes`), and the section says which. Compared
with the exposed communication measured in training, the prediction tells how much of the
communication backward hides.

Every rank of the default process group calls :func:`allreduce_baseline`; every decision that
changes how many collectives run (iterations, stopping for the budget or for memory) is taken
from reduced or gathered values, the same numbers on every rank, so all ranks take it together
and none waits for an op that never comes. Reading DDP's buckets runs no collective at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...allreduce_model import (
    FLOAT32_BYTES,
    MIB,
    bucket_caps,
    bus_factor,
    busbw_at_gbps,
    fit_model,
    fit_usable,
    float32_size,
    predicted_step_s,
    split_into_buckets,
)
from ...errors import described

if TYPE_CHECKING:
    import torch

MIN_BYTES = 4096
# The sweep goes at least this far, whatever the gradient size (see sweep_sizes).
SWEEP_FLOOR_BYTES = 8 * 1024 * 1024
# Per size: at least this many timed ops, at most this many, aiming at this share of the budget.
MIN_ITERS = 2
MAX_ITERS = 50
# Device memory a message may take (of what is free on the tightest rank): the sweep must never
# be the reason a job runs out of memory.
MEMORY_SHARE = 0.5

SKIPPED_ONE_DEVICE = "1 device: nothing to all-reduce"
# How the buckets of a section were estimated (its bucket_reason, after why they were).
ESTIMATED_FROM_PARAMETERS = (
    "estimated from whole parameters in reverse registration order, a bucket closed once it"
    " reaches DDP's cap, as DDP rebuilds them"
)
ESTIMATED_FROM_BYTES = (
    "no parameters known: the gradient bytes split at DDP's default caps (1 MiB first, then 25 MiB)"
)
NOT_READ_YET = "DDP's own buckets are read when training ends"


def gradient_bytes(module: torch.nn.Module) -> int:
    """Bytes of gradients one optimizer step all-reduces: every trainable parameter, once.

    DDP reduces each parameter that requires a gradient in that parameter's dtype; a parameter
    shared between modules is one parameter (``Module.parameters()`` yields it once).
    """
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


def sweep_sizes(gradient_bytes: int) -> list[int]:
    """Message sizes in bytes, ascending: 4 KiB, 8 KiB, ... doubling up to the gradient size or
    :data:`SWEEP_FLOOR_BYTES`, whichever is larger, with the gradient size itself among them.

    The gradient size is rounded down to whole float32 elements (at least one). The floor
    keeps a small model's sweep going until the bandwidth term shows: an 11 kB gradient
    all-reduce measures latency only, which the fit needs sizes beyond to tell apart.
    """
    gradient = float32_size(gradient_bytes)
    last = max(gradient, SWEEP_FLOOR_BYTES)
    sizes = {gradient, last}
    size = MIN_BYTES
    while size < last:
        sizes.add(size)
        size *= 2
    return sorted(sizes)


def parameter_bytes(module: torch.nn.Module) -> list[tuple[int, str]]:
    """``(bytes, dtype)`` of every trainable parameter, once, in registration order: what DDP
    puts in its buckets."""
    return [
        (p.numel() * p.element_size(), str(p.dtype)) for p in module.parameters() if p.requires_grad
    ]


def ddp_bucket_caps(model: Any) -> tuple[int, int]:
    """(first bucket's cap, the others' cap) in bytes of a DDP-wrapped model, by DDP's rule
    (:func:`scalescope.allreduce_model.bucket_caps`: a small first bucket only with the
    default cap), its defaults for anything else. Reads attributes only; never raises."""
    from torch.nn.parallel import DistributedDataParallel

    cap_mb: float | None = None
    if isinstance(model, DistributedDataParallel):
        try:  # torch >= 2.4 says whether the cap was DDP's default
            if not getattr(model, "bucket_bytes_cap_default", True):
                cap_mb = int(model.bucket_bytes_cap) / MIB
        except Exception:  # an attribute gone: an estimate at DDP's defaults is still useful
            cap_mb = None
    first, cap = bucket_caps("ddp", cap_mb)
    return int(first), int(cap)


FSDP_HAS_NO_BUCKETS = (
    "trained under FSDP2: no DDP gradient buckets (its collectives are each sharded "
    "block's all-gather and reduce-scatter)"
)


def read_ddp_buckets(model: Any) -> tuple[list[int] | None, str | None]:
    """DDP's own bucket sizes in bytes, or ``None`` and why not. Never raises.

    Read from DDP's logging data (``DistributedDataParallel._get_ddp_logging_data()``, local
    to this rank: no collective, well under a millisecond). DDP builds its buckets in the
    second iteration, in the order the first backward produced the gradients, and logs them
    as ``rebuilt_bucket_sizes`` (bytes, comma-separated) from the third iteration on, so read
    after training. With ``find_unused_parameters`` (and no static graph) DDP never rebuilds:
    its buckets are the ones built at construction, ``bucket_sizes``.
    """
    try:
        from torch.nn.parallel import DistributedDataParallel

        from ..faults.fsdp_comms import fsdp_modules

        if not isinstance(model, DistributedDataParallel):
            if fsdp_modules(model):
                return None, FSDP_HAS_NO_BUCKETS
            return None, f"not trained under DDP ({type(model).__name__})"
        data = model._get_ddp_logging_data()
        text = data.get("rebuilt_bucket_sizes")
        if not text:
            if data.get("find_unused_parameters") and not data.get("static_graph"):
                text = data.get("bucket_sizes")
            else:
                return None, (
                    "DDP had not logged its rebuilt buckets (logging data of iteration"
                    f" {data.get('iteration')}: it rebuilds them in the 2nd iteration and logs"
                    " them from the 3rd)"
                )
        sizes = [int(part) for part in str(text).split(",")]
        if not sizes or min(sizes) <= 0:
            return None, f"unexpected bucket sizes in DDP's logging data: {text!r}"
        return sizes, None
    except Exception as exc:  # a private API: whatever it does, training goes on
        return None, f"DDP's buckets not read: {described(exc)}"


def backend_name(backend: str, device_type: str) -> str:
    """The backend that carries ``device_type`` tensors: ``"cpu:gloo,cuda:nccl"`` -> per device."""
    if ":" not in backend:
        return backend
    by_device = dict(part.split(":", 1) for part in backend.split(","))
    return by_device.get(device_type, backend)


def size_row(nbytes: int, time_s: float, world_size: int) -> dict[str, Any]:
    """One row of the table: a size, its per-op time, its algorithm and bus bandwidths."""
    algbw = nbytes / time_s / 1e9
    return {
        "bytes": nbytes,
        "time_s": time_s,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * bus_factor(world_size),
    }


def section(
    status: str,
    reason: str | None,
    *,
    backend: str | None = None,
    world_size: int = 1,
    gradient_bytes: int | None = None,
    sizes: list[dict[str, Any]] | None = None,
    fit: dict[str, Any] | None = None,
    seconds: float | None = None,
    bucket_bytes: Sequence[int] | None = None,
    bucket_source: str | None = None,
    bucket_reason: str | None = None,
) -> dict[str, Any]:
    """The record's ``diagnosis.allreduce`` section (see the record contract).

    ``bucket_source`` is ``"ddp"`` for buckets read from DDP, ``"estimated"`` otherwise, with
    ``bucket_reason`` saying why and how; ``predicted_step_s`` is the fitted model summed over
    the buckets.
    """
    sizes = sizes or []
    predicted = None
    if fit_usable(fit) and bucket_bytes is not None:
        predicted = predicted_step_s(fit, bucket_bytes, world_size)  # type: ignore[arg-type]
    at_gradient = None
    if gradient_bytes:
        at_gradient = busbw_at_gbps(sizes, fit, gradient_bytes, world_size)
    return {
        "status": status,
        "reason": reason,
        "backend": backend,
        "world_size": world_size,
        "gradient_bytes": gradient_bytes,
        "sizes": sizes,
        "busbw_gbps": sizes[-1]["busbw_gbps"] if sizes else None,
        "busbw_at_gradient_gbps": at_gradient,
        "fit": fit,
        "bucket_bytes": list(bucket_bytes) if bucket_bytes is not None else None,
        "bucket_source": bucket_source,
        "bucket_reason": bucket_reason,
        "predicted_step_s": predicted,
        "seconds": seconds,
    }


def with_buckets(
    s: dict[str, Any], bucket_bytes: Sequence[int], source: str, reason: str | None
) -> dict[str, Any]:
    """``s`` with other buckets (e.g. DDP's own, read after training) and the prediction
    redone for them from the same fitted model."""
    return section(
        s["status"],
        s["reason"],
        backend=s["backend"],
        world_size=s["world_size"],
        gradient_bytes=s["gradient_bytes"],
        sizes=s["sizes"],
        fit=s["fit"],
        seconds=s["seconds"],
        bucket_bytes=bucket_bytes,
        bucket_source=source,
        bucket_reason=reason,
    )


def off_section(reason: str) -> dict[str, Any]:
    """The section when the baseline is switched off, e.g. ``"diagnosis.enabled=false"``."""
    return section("off", reason)


def allreduce_baseline(
    *,
    gradient_bytes: int,
    device: torch.device,
    budget_s: float = 3.0,
    bucket_bytes: Sequence[int] | None = None,
    bucket_reason: str | None = None,
    hold_s: Callable[[int, int], float] | None = None,
) -> dict[str, Any]:
    """Run the sweep on every rank of the default process group; return the record's section.

    ``hold_s(bytes, world_size)``: seconds every rank waits after each timed op (an emulated
    network, ``faults.network_alpha_s``); None for the real one.

    ``bucket_bytes``: the buckets to predict (DDP cannot have built its own before training:
    they are ``"estimated"``, for ``bucket_reason``); by default ``gradient_bytes`` split at
    DDP's default caps.

    A collective: every rank calls it with the same ``gradient_bytes`` and ``budget_s``. It
    allocates its own buffers on ``device`` and frees them; it touches no RNG, no model and no
    stream but the current one. A peer that dies mid-sweep makes the collective on the other
    ranks raise (after the process group's timeout at the latest); the error propagates.
    """
    import torch.distributed as dist

    start = time.perf_counter()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return section("skipped", SKIPPED_ONE_DEVICE, gradient_bytes=gradient_bytes)
    world = dist.get_world_size()
    backend = backend_name(str(dist.get_backend()), device.type)
    if gradient_bytes <= 0:
        return _skipped(
            "no trainable parameters: nothing to all-reduce", backend, world, gradient_bytes, start
        )
    if bucket_bytes is None:
        buckets, bucket_reason = split_into_buckets(gradient_bytes), ESTIMATED_FROM_BYTES
    else:
        buckets = list(bucket_bytes)

    sweep = _Sweep(device, start, hold_s)
    rows, reason = _sweep_rows(sweep, sweep_sizes(gradient_bytes), budget_s, world)
    if not rows:
        return _skipped(reason, backend, world, gradient_bytes, start)
    return section(
        "measured",
        reason,
        backend=backend,
        world_size=world,
        gradient_bytes=gradient_bytes,
        sizes=rows,
        fit=fit_model([(r["bytes"], r["time_s"]) for r in rows], world),
        seconds=time.perf_counter() - start,
        bucket_bytes=buckets,
        bucket_source="estimated",
        bucket_reason=bucket_reason or "given by the caller",
    )


def _skipped(
    reason: str | None, backend: str, world: int, gradient_bytes: int, start: float
) -> dict[str, Any]:
    """The section of a baseline that measured no size, with the seconds since ``start``."""
    return section(
        "skipped",
        reason,
        backend=backend,
        world_size=world,
        gradient_bytes=gradient_bytes,
        seconds=time.perf_counter() - start,
    )


def _sweep_rows(
    sweep: _Sweep, planned: list[int], budget_s: float, world: int
) -> tuple[list[dict[str, Any]], str | None]:
    """The rows of the sizes measured, ascending, and why the sweep stopped before the last
    planned size (None when it did not)."""
    import torch
    import torch.distributed as dist

    device = sweep.device
    # The largest message every rank can hold (one small MIN-reduce before any big buffer).
    room = sweep.reduce([_free_bytes(device) * MEMORY_SHARE], dist.ReduceOp.MIN)[0]
    target_s = min(0.25, budget_s / (2 * len(planned)))
    rows: list[dict[str, Any]] = []
    reason: str | None = None
    try:
        for nbytes in planned:
            reason = _stop_reason(rows, nbytes, room, budget_s)
            if reason is not None:
                break
            rows.append(_time_size(sweep, nbytes, target_s, budget_s, world))
    finally:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
    for row in rows:
        row.pop("_elapsed_s")
    return rows, reason


def _stop_reason(
    rows: list[dict[str, Any]], nbytes: int, room: float, budget_s: float
) -> str | None:
    """Why the sweep stops before ``nbytes``, or None to measure it. Decided from reduced
    values only, so every rank stops at the same size."""
    if nbytes > room:
        return (
            f"stopped before {nbytes} B: more than {MEMORY_SHARE:.0%} of the free device"
            " memory on the tightest rank"
        )
    if rows:
        # The cost of this size (warm-up + MIN_ITERS) estimated at the last size's
        # bandwidth, an upper bound where time is latency plus bandwidth.
        elapsed = rows[-1]["_elapsed_s"]
        estimate = rows[-1]["time_s"] * nbytes / rows[-1]["bytes"] * (1 + MIN_ITERS)
        if elapsed + estimate > budget_s:
            return (
                f"budget {budget_s:g} s: stopped before {nbytes} B after"
                f" {elapsed:.3g} s (the next size would take about {estimate:.3g} s)"
            )
    return None


def _time_size(
    sweep: _Sweep, nbytes: int, target_s: float, budget_s: float, world: int
) -> dict[str, Any]:
    """One size's row: a warm-up op, then as many timed ops as ``target_s`` and what is
    left of the budget allow (between MIN_ITERS and MAX_ITERS); ``_elapsed_s`` is the
    sweep's time so far, for the next size's budget check."""
    import torch

    buf = torch.zeros(nbytes // FLOAT32_BYTES, dtype=torch.float32, device=sweep.device)
    warm_s, elapsed = sweep.time_ops(buf, 1)
    left_s = max(0.0, budget_s - elapsed)
    iters = int(min(target_s, 0.8 * left_s) / max(warm_s, 1e-9))
    iters = max(MIN_ITERS, min(MAX_ITERS, iters))
    op_s, elapsed = sweep.time_ops(buf, iters)
    del buf
    row = size_row(nbytes, max(op_s, 1e-9), world)
    row["_elapsed_s"] = elapsed
    return row


class _Sweep:
    """Timed all-reduces on one device, timed as nccl-tests' ``all_reduce_perf`` does."""

    def __init__(
        self,
        device: torch.device,
        start: float,
        hold_s: Callable[[int, int], float] | None = None,
    ) -> None:
        self.device = device
        self.start = start
        self.hold_s = hold_s

    def reduce(self, values: list[float], op: Any) -> list[float]:
        """All-reduce a few floats (one small op; on the device, as NCCL needs)."""
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=op)
        return [float(v) for v in t.tolist()]

    def gather(self, values: list[float]) -> list[list[float]]:
        """Every rank's ``values``, in rank order, on every rank (one small all-gather)."""
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t)
        return [[float(v) for v in p.tolist()] for p in parts]

    def sync(self) -> None:
        """nccl-tests' barrier: a one-element all-reduce every rank waits for, device included
        (``tolist`` waits for it; the CUDA sync for anything else queued), so all ranks start
        the next op together and no rank's clock counts the wait for a late peer."""
        import torch
        import torch.distributed as dist

        self.reduce([0.0], dist.ReduceOp.SUM)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time_ops(self, buf: torch.Tensor, iters: int) -> tuple[float, float]:
        """``iters`` all-reduces of ``buf`` after a barrier. Returns (seconds per op: the MEAN
        over ranks of each rank's own clock / ``iters``; the MAX over ranks of the seconds
        since the sweep began).

        As nccl-tests (``-a 1``, its default): every rank times the same ops on its own clock
        and the times are averaged. Every rank computes both from the same gathered values,
        so decisions taken from them agree. On a GPU the clock is CUDA events around the ops
        on the current stream; on a CPU the wall clock (gloo returns when the op is done).
        """
        import torch
        import torch.distributed as dist

        self.sync()
        if self.device.type == "cuda":
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(iters):
                dist.all_reduce(buf)
            end.record()
            end.synchronize()
            seconds = begin.elapsed_time(end) / 1e3
        else:
            hold = (
                self.hold_s(buf.numel() * buf.element_size(), dist.get_world_size())
                if self.hold_s is not None
                else 0.0
            )
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
                if hold > 0:
                    time.sleep(hold)
            seconds = time.perf_counter() - t0
        elapsed = time.perf_counter() - self.start
        parts = self.gather([seconds / iters, elapsed])
        return sum(p[0] for p in parts) / len(parts), max(p[1] for p in parts)


def _free_bytes(device: torch.device) -> float:
    """Bytes a message buffer may come from: free device memory, or available host memory."""
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return float(free)
    import psutil

    return float(psutil.virtual_memory().available)
