"""Compute split into GPU work and host overhead: how much of a rank's compute its GPU idled.

A step's compute (:mod:`.step_breakdown`: the step less its input and communication waits)
is host time. On a small network the host cannot launch kernels as fast as the GPU runs
them: the GPU then idles inside "compute", and the cure is fewer launches (CUDA graphs,
``torch.compile``, a larger batch), not a faster GPU.

The GPU's busy time comes from NVML's utilisation (:mod:`.sampling`: the share of each sample
period in which a kernel ran, averaged over the steady state only). Per optimizer step the
GPU ran kernels for ``util x step time``; during the communication wait it runs the
collective's kernels (NCCL's spin while they wait), so the GPU work inside compute is::

    gpu_work = util x step_time - comm_wait      (within [0, compute])
    host_overhead = compute - gpu_work           (the GPU idle inside compute)

It is an average over the steady state, not per step, and NVML's sample periods (1/6 s to
1 s) blur single steps: the split says how launch-bound a run is, which is what the advice
needs. Each rank is matched to its GPU by node and CUDA index (its local rank); a rank whose
GPU was not sampled (tasks that each see one GPU: only local rank 0 samples) has no split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SOURCE = "nvml_utilization"
CPU_REASON = "a CPU run: compute is the host's own work, there is no device to idle"


def not_recorded(reason: str) -> dict[str, Any]:
    return {"status": "not recorded", "reason": reason, "source": None, "ranks": None}


def compute_split(
    ranks: Sequence[Mapping[str, Any]], nvml: Mapping[str, Any], clock: str
) -> dict[str, Any]:
    """The ``compute_split`` of the diagnosis section, from its rank rows (with their
    ``compute_s``, ``comm_wait_s``, ``step_time_s``) and its ``nvml`` section."""
    if clock != "cuda_events":
        return not_recorded(CPU_REASON)
    if nvml.get("status") != "sampled":
        why = nvml.get("reason") or nvml.get("status") or "no sampler ran"
        return not_recorded(f"NVML did not sample the GPUs ({why})")
    gpus = {(g.get("node"), g.get("index")): g for g in nvml.get("gpus") or []}
    rows = []
    for r in ranks:
        gpu = gpus.get((r.get("node"), r.get("local_rank")))
        if gpu is None or "compute_s" not in r or gpu.get("util_mean_pct") is None:
            continue
        rows.append(_rank_split(r, float(gpu["util_mean_pct"])))
    if not rows:
        return not_recorded("no rank's GPU was sampled in the steady state")
    idle = [row["gpu_idle_share"] for row in rows if row["gpu_idle_share"] is not None]
    return {
        "status": "recorded",
        "reason": None if len(rows) == len(ranks) else f"{len(rows)} of {len(ranks)} ranks",
        "source": SOURCE,
        "ranks": rows,
        "gpu_idle_share": sum(idle) / len(idle) if idle else None,
    }


def _rank_split(r: Mapping[str, Any], util_pct: float) -> dict[str, Any]:
    compute = float(r["compute_s"])
    busy = util_pct / 100.0 * float(r["step_time_s"]) - float(r["comm_wait_s"])
    work = min(max(busy, 0.0), compute)
    return {
        "rank": r["rank"],
        "gpu_util_pct": util_pct,
        "gpu_work_s": work,
        "host_overhead_s": compute - work,
        "gpu_idle_share": (compute - work) / compute if compute > 0 else None,
    }
