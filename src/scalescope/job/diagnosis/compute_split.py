"""Compute split into GPU work and host overhead: how much of a rank's compute its GPU idled.

A step's compute (:mod:`.step_breakdown`: the step less its input and communication waits)
is host time. On a small network the host cannot launch kernels as fast as the GPU runs
them: the GPU then idles inside "compute", and the cure is fewer launches (CUDA graphs,
``torch.compile``, a larger batch), not a faster GPU.

The GPU's busy time comes from NVML's utilisation (:mod:`.sampling`: the share of each sample
period in which a kernel ran, averaged over the steady state only). Per optimizer step the
GPU ran kernels for ``util x step time``. On several GPUs that counts the collectives' kernels
too: DDP's all-reduce running beside backward, and the kernel that spins while it waits for a
slower rank. A moment counts once whatever runs in it, so what is not compute work is the
time a collective's kernel ran *alone*, no other kernel beside it::

    collective_alone = lone time per step (each operation's) + wait for others
    gpu_work = util x step_time - collective_alone      (within [0, compute])
    host_overhead = compute - gpu_work                   (the GPU idle inside compute)

The lone time is measured by :mod:`.comm_kernels` (a profiler window of synced passes after
training, beside the calibration's), per operation and launch: a step counts each operation
as often as it ran (FSDP gathers on every micro-batch and reduce-scatters on the synced one:
counting one synced pass per step missed the other micro-batches' gathers, and read an
accumulating FSDP run as less idle than it was). In the window the ranks start together, so
the steady state's own wait for slower ranks (``wait_s``), in which only the collective's kernel
runs, is added. Subtracting only the communication wait, as before, left the all-reduce
kernels that run beside backward inside the GPU's work: a 12 ms step with 10 ms of compute
(4 ms of compute kernels), a 2 ms wait and the first bucket's all-reduce running from 4 to
12 ms reads 91.7% busy; the GPU idles 60% of compute, the wait alone said 10%. One device
runs no collective: nothing is subtracted. Where the lone time was not measured (no
calibration, the profiler did not start) a multi-GPU rank has no split, and the section says
why.

It is an average over the steady state, not per step, and NVML's sample periods (1/6 s to
1 s) blur single steps: the split says how launch-bound a run is, which is what the advice
needs. Each rank is matched to its GPU by node and CUDA index (its local rank); a rank whose
GPU was not sampled (tasks that each see one GPU: only local rank 0 samples) has no split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SOURCE = "nvml_utilization"
COLLECTIVES_SOURCE = "comm_kernels"
"""Several ranks: the collectives' lone kernel time from the calibration's profiled window."""
ONE_DEVICE_SOURCE = "one device: no collectives"
ONE_DEVICE: Mapping[str, Any] = {"kernel_s": 0.0, "alone_s": 0.0}
"""A rank of a one-device run: no collective ran."""
CPU_REASON = "a CPU run: compute is the host's own work, there is no device to idle"


def not_recorded(reason: str) -> dict[str, Any]:
    return {"status": "not recorded", "reason": reason, "source": None, "ranks": None}


def compute_split(
    ranks: Sequence[Mapping[str, Any]],
    nvml: Mapping[str, Any],
    clock: str,
    calibration: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``compute_split`` of the diagnosis section, from its rank rows (with their
    ``compute_s``, ``step_time_s``, ``syncs_per_step`` and ``wait_s``), its ``nvml`` section
    and, on several ranks, its ``calibration`` section's ``comm_kernels`` (per rank)."""
    if clock != "cuda_events":
        return not_recorded(CPU_REASON)
    if nvml.get("status") != "sampled":
        why = nvml.get("reason") or nvml.get("status") or "no sampler ran"
        return not_recorded(f"NVML did not sample the GPUs ({why})")
    kernels, why_not = _collective_kernels(ranks, calibration or {})
    if why_not:
        return not_recorded(why_not)
    gpus = {(g.get("node"), g.get("index")): g for g in nvml.get("gpus") or []}
    rows = []
    for r in ranks:
        gpu = gpus.get((r.get("node"), r.get("local_rank")))
        if gpu is None or "compute_s" not in r or gpu.get("util_mean_pct") is None:
            continue
        mine = kernels.get(r.get("rank"))
        if mine is not None:
            rows.append(_rank_split(r, float(gpu["util_mean_pct"]), mine))
    if not rows:
        return not_recorded("no rank's GPU was sampled in the steady state")
    idle = [row["gpu_idle_share"] for row in rows if row["gpu_idle_share"] is not None]
    return {
        "status": "recorded",
        "reason": None if len(rows) == len(ranks) else f"{len(rows)} of {len(ranks)} ranks",
        "source": SOURCE,
        "collectives_source": COLLECTIVES_SOURCE if len(ranks) > 1 else ONE_DEVICE_SOURCE,
        "ranks": rows,
        "gpu_idle_share": sum(idle) / len(idle) if idle else None,
    }


def _collective_kernels(
    ranks: Sequence[Mapping[str, Any]], calibration: Mapping[str, Any]
) -> tuple[dict[Any, Mapping[str, Any] | None], str]:
    """Per rank, its measured ``comm_kernels`` part (None where not measured); '' -- or why
    no rank has one. One device runs no collective: nothing to measure."""
    if len(ranks) <= 1:
        return {r.get("rank"): ONE_DEVICE for r in ranks}, ""
    parts = calibration.get("comm_kernels")
    if not isinstance(parts, list):
        status, reason = calibration.get("status") or "missing", calibration.get("reason")
        why = f"calibration {status}" + (f": {reason}" if reason else "")
        return {}, f"the collectives' kernel time was not measured ({why})"
    by_rank: dict[Any, Mapping[str, Any] | None] = {}
    for r, part in zip(ranks, parts, strict=False):
        ok = isinstance(part, Mapping) and part.get("status") == "measured"
        by_rank[r.get("rank")] = part if ok else None
    if not any(by_rank.values()):
        found = [p for p in parts if isinstance(p, Mapping)]
        why = str(found[0].get("reason")) if found else "no rank's part"
        return {}, f"the collectives' kernel time was not measured ({why})"
    return by_rank, ""


def lone_per_step(r: Mapping[str, Any], kernels: Mapping[str, Any]) -> float:
    """The time per optimizer step a collective's kernel ran alone, before waits: each
    operation's lone time per launch (the window's synced passes) times its launches per
    step where the step counts them (FSDP's taps: all-gathers on every micro-batch,
    reduce-scatters on the synced ones), else its lone time per synced pass times the
    synced passes (DDP's all-reduce, and a record without the operations' counts)."""
    syncs = _number(r.get("syncs_per_step"), 1.0)
    ops = kernels.get("by_operation")
    counted = r.get("collectives_per_step") or {}
    if not isinstance(ops, Mapping) or not ops or not counted:
        return _number(kernels.get("alone_s"), 0.0) * syncs
    total = 0.0
    for op, part in ops.items():
        alone, calls = _number(part.get("alone_s"), 0.0), _number(part.get("calls"), 0.0)
        per_step = _number((counted.get(op) or {}).get("count"), -1.0)
        if per_step >= 0 and calls > 0:
            total += alone / calls * per_step
        else:
            total += alone * syncs
    return total


def _rank_split(
    r: Mapping[str, Any], util_pct: float, kernels: Mapping[str, Any]
) -> dict[str, Any]:
    compute = float(r["compute_s"])
    syncs = _number(r.get("syncs_per_step"), 1.0)
    waited = max(0.0, _number(r.get("wait_s"), 0.0))
    alone = lone_per_step(r, kernels) + waited
    ran = _number(kernels.get("kernel_s"), 0.0) * syncs + waited
    busy = util_pct / 100.0 * float(r["step_time_s"]) - alone
    work = min(max(busy, 0.0), compute)
    return {
        "rank": r["rank"],
        "gpu_util_pct": util_pct,
        "comm_kernel_s": ran,
        "comm_alone_s": alone,
        "gpu_work_s": work,
        "host_overhead_s": compute - work,
        "gpu_idle_share": (compute - work) / compute if compute > 0 else None,
    }


def _number(value: Any, default: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return default
