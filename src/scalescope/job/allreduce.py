"""The all-reduce baseline: what the job's own interconnect delivers, measured at start-up.

An nccl-tests-style sweep (``all_reduce_perf``): float32 messages from 4 KiB up to the model's
gradient size by powers of two (the last size exactly the gradient size), each size one warm-up
op and then an adaptive number of timed ops. Per size the time of one op is the MAX over ranks
(a collective finishes when its slowest rank does), and

    algbw = bytes / time                      (GB/s = 1e9 B/s, as nccl-tests prints)
    busbw = algbw * 2 (n - 1) / n             (ring all-reduce: each byte crosses 2(n-1)/n links)

``predicted_step_s`` is the all-reduce time of one optimizer step's gradients sent the way DDP
sends them: bucket by bucket (1 MiB first, then 25 MiB), each bucket's time read off the measured
curve by log-log interpolation. Compared with the exposed communication measured in training, it
tells how much of the communication backward hides.

Every rank of the default process group calls :func:`allreduce_baseline`; every decision that
changes how many collectives run (iterations, stopping for the budget or for memory) is taken
from reduced values, so all ranks take it together and none waits for an op that never comes.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

MIN_BYTES = 4096
FLOAT32_BYTES = 4
# DDP's default bucket layout (torch.nn.parallel.distributed): the first bucket is capped at
# dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB) so that communication starts early in backward; the
# rest at bucket_cap_mb (25 MiB).
DDP_FIRST_BUCKET_BYTES = 1024 * 1024
DDP_BUCKET_CAP_BYTES = 25 * 1024 * 1024
# Per size: at least this many timed ops, at most this many, aiming at this share of the budget.
MIN_ITERS = 2
MAX_ITERS = 50
# Device memory a message may take (of what is free on the tightest rank): the sweep must never
# be the reason a job runs out of memory.
MEMORY_SHARE = 0.5

SKIPPED_ONE_DEVICE = "1 device: nothing to all-reduce"


def gradient_bytes(module: torch.nn.Module) -> int:
    """Bytes of gradients one optimizer step all-reduces: every trainable parameter, once.

    DDP reduces each parameter that requires a gradient in that parameter's dtype; a parameter
    shared between modules is one parameter (``Module.parameters()`` yields it once).
    """
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


def sweep_sizes(gradient_bytes: int) -> list[int]:
    """Message sizes in bytes: 4 KiB, 8 KiB, ... below the gradient size, then the gradient size.

    The gradient size is rounded down to whole float32 elements (at least one).
    """
    last = max(FLOAT32_BYTES, gradient_bytes // FLOAT32_BYTES * FLOAT32_BYTES)
    sizes = []
    size = MIN_BYTES
    while size < last:
        sizes.append(size)
        size *= 2
    sizes.append(last)
    return sizes


def ddp_bucket_bytes(gradient_bytes: int) -> list[int]:
    """DDP's default buckets for ``gradient_bytes``: 1 MiB first, then 25 MiB, then the rest.

    DDP never splits a parameter, so real buckets run a little over their caps; for the time
    estimate the split by bytes is what matters.
    """
    buckets: list[int] = []
    left = gradient_bytes
    cap = DDP_FIRST_BUCKET_BYTES
    while left > 0:
        take = min(cap, left)
        buckets.append(take)
        left -= take
        cap = DDP_BUCKET_CAP_BYTES
    return buckets


def backend_name(backend: str, device_type: str) -> str:
    """The backend that carries ``device_type`` tensors: ``"cpu:gloo,cuda:nccl"`` -> per device."""
    if ":" not in backend:
        return backend
    by_device = dict(part.split(":", 1) for part in backend.split(","))
    return by_device.get(device_type, backend)


def bus_factor(world_size: int) -> float:
    """busbw / algbw for a ring all-reduce over ``world_size`` ranks: 2 (n - 1) / n."""
    return 2 * (world_size - 1) / world_size


def size_row(nbytes: int, time_s: float, world_size: int) -> dict[str, Any]:
    """One row of the table: a size, its per-op time, its algorithm and bus bandwidths."""
    algbw = nbytes / time_s / 1e9
    return {
        "bytes": nbytes,
        "time_s": time_s,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * bus_factor(world_size),
    }


def interpolate_time_s(rows: Sequence[dict[str, Any]], nbytes: int) -> float:
    """The all-reduce time of ``nbytes`` read off the measured rows.

    Between two measured sizes: log-log interpolation (time follows a power law between them).
    Below the smallest: the smallest's time (small messages are latency-bound). Above the
    largest: at the largest size's bandwidth (time grows linearly with bytes).
    """
    if not rows:
        raise ValueError("no measured sizes to interpolate from")
    pts = sorted((r["bytes"], r["time_s"]) for r in rows)
    if nbytes <= pts[0][0]:
        return pts[0][1]
    if nbytes >= pts[-1][0]:
        size, t = pts[-1]
        return t * nbytes / size
    for (b0, t0), (b1, t1) in itertools.pairwise(pts):
        if b0 <= nbytes <= b1:
            frac = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return math.exp(math.log(t0) + frac * (math.log(t1) - math.log(t0)))
    raise AssertionError("unreachable: nbytes lies within the measured range")


def predicted_step_s(rows: Sequence[dict[str, Any]], bucket_bytes: Sequence[int]) -> float:
    """Expected all-reduce time of one step: the buckets go one after another on one stream."""
    return sum(interpolate_time_s(rows, b) for b in bucket_bytes)


def section(
    status: str,
    reason: str | None,
    *,
    backend: str | None = None,
    world_size: int = 1,
    gradient_bytes: int | None = None,
    sizes: list[dict[str, Any]] | None = None,
    predicted: float | None = None,
    seconds: float | None = None,
) -> dict[str, Any]:
    """The record's ``diagnosis.allreduce`` section (see the record contract)."""
    sizes = sizes or []
    return {
        "status": status,
        "reason": reason,
        "backend": backend,
        "world_size": world_size,
        "gradient_bytes": gradient_bytes,
        "sizes": sizes,
        "busbw_gbps": sizes[-1]["busbw_gbps"] if sizes else None,
        "predicted_step_s": predicted,
        "seconds": seconds,
    }


def off_section(reason: str) -> dict[str, Any]:
    """The section when the baseline is switched off, e.g. ``"diagnosis.enabled=false"``."""
    return section("off", reason)


def allreduce_baseline(
    *,
    gradient_bytes: int,
    device: torch.device,
    budget_s: float = 3.0,
    bucket_bytes: list[int] | None = None,
) -> dict[str, Any]:
    """Run the sweep on every rank of the default process group; return the record's section.

    A collective: every rank calls it with the same ``gradient_bytes`` and ``budget_s``. It
    allocates its own buffers on ``device`` and frees them; it touches no RNG, no model and no
    stream but the current one. A peer that dies mid-sweep makes the collective on the other
    ranks raise (after the process group's timeout at the latest); the error propagates.
    """
    import torch
    import torch.distributed as dist

    start = time.perf_counter()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return section("skipped", SKIPPED_ONE_DEVICE, gradient_bytes=gradient_bytes)
    world = dist.get_world_size()
    backend = backend_name(str(dist.get_backend()), device.type)
    if gradient_bytes <= 0:
        return section(
            "skipped",
            "no trainable parameters: nothing to all-reduce",
            backend=backend,
            world_size=world,
            gradient_bytes=gradient_bytes,
            seconds=time.perf_counter() - start,
        )
    buckets = list(bucket_bytes) if bucket_bytes is not None else ddp_bucket_bytes(gradient_bytes)

    sweep = _Sweep(device, start)
    planned = sweep_sizes(gradient_bytes)
    # The largest message every rank can hold (one small MIN-reduce before any big buffer).
    room = sweep.reduce([_free_bytes(device) * MEMORY_SHARE], dist.ReduceOp.MIN)[0]
    target_s = min(0.25, budget_s / (2 * len(planned)))
    rows: list[dict[str, Any]] = []
    reason: str | None = None
    try:
        for i, nbytes in enumerate(planned):
            if nbytes > room:
                reason = (
                    f"stopped before {nbytes} B: more than {MEMORY_SHARE:.0%} of the free device"
                    " memory on the tightest rank"
                )
                break
            if rows:
                # Decide from reduced values only, so every rank stops at the same size: the
                # cost of this size estimated at the last size's bandwidth, warm-up + MIN_ITERS.
                elapsed = rows[-1]["_elapsed_s"]
                estimate = rows[-1]["time_s"] * nbytes / rows[-1]["bytes"] * (1 + MIN_ITERS)
                if elapsed + estimate > budget_s:
                    reason = (
                        f"budget {budget_s:g} s: stopped before {nbytes} B after"
                        f" {elapsed:.3g} s (the next size would take about {estimate:.3g} s)"
                    )
                    break
            buf = torch.zeros(nbytes // FLOAT32_BYTES, dtype=torch.float32, device=device)
            warm_s, elapsed = sweep.time_ops(buf, 1)
            left_s = max(0.0, budget_s - elapsed)
            iters = int(min(target_s, 0.8 * left_s) / max(warm_s, 1e-9))
            iters = max(MIN_ITERS, min(MAX_ITERS, iters))
            total_s, elapsed = sweep.time_ops(buf, iters)
            del buf
            row = size_row(nbytes, max(total_s / iters, 1e-9), world)
            row["_elapsed_s"] = elapsed
            rows.append(row)
            if i == len(planned) - 1:
                break
    finally:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
    for row in rows:
        row.pop("_elapsed_s")
    if not rows:
        return section(
            "skipped",
            reason,
            backend=backend,
            world_size=world,
            gradient_bytes=gradient_bytes,
            seconds=time.perf_counter() - start,
        )
    return section(
        "measured",
        reason,
        backend=backend,
        world_size=world,
        gradient_bytes=gradient_bytes,
        sizes=rows,
        predicted=predicted_step_s(rows, buckets),
        seconds=time.perf_counter() - start,
    )


class _Sweep:
    """Timed all-reduces on one device, with every timing agreed over ranks."""

    def __init__(self, device: torch.device, start: float) -> None:
        self.device = device
        self.start = start

    def reduce(self, values: list[float], op: Any) -> list[float]:
        """All-reduce a few floats (one small op; on the device, as NCCL needs)."""
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=op)
        return [float(v) for v in t.tolist()]

    def time_ops(self, buf: torch.Tensor, iters: int) -> tuple[float, float]:
        """``iters`` all-reduces of ``buf``: (seconds on the slowest rank, max elapsed so far).

        The device is synchronised at both edges, so the clock covers exactly these ops: CUDA
        events on a GPU, the wall clock on a CPU (gloo returns when the op is done).
        """
        import torch
        import torch.distributed as dist

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(iters):
                dist.all_reduce(buf)
            end.record()
            end.synchronize()
            seconds = begin.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            seconds = time.perf_counter() - t0
        elapsed = time.perf_counter() - self.start
        slowest, elapsed_max = self.reduce([seconds, elapsed], dist.ReduceOp.MAX)
        return slowest, elapsed_max


def _free_bytes(device: torch.device) -> float:
    """Bytes a message buffer may come from: free device memory, or available host memory."""
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return float(free)
    import psutil

    return float(psutil.virtual_memory().available)
