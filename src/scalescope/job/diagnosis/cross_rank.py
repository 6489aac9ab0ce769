"""What the diagnosis gathers across ranks, on every rank after training.

* the per-step communication waits: per step and collective, the least wait over the ranks
  (:func:`reduce_step_waits`), against which each rank's own waits are split into the exposed
  communication and its wait for slower ranks (:func:`step_wait_stats`);
* the calibration windows: every rank's part combined into one cross-check of the exposed
  all-reduce (under FSDP2: of the exposed reduce-scatter; :func:`gather_calibration`).

The rest of each rank's figures travels in the end-of-run gather of :func:`..clocks.timing.agree`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
import numpy as np
import torch

from ...errors import described
from .calibration import ANOTHER_RANK
from .step_clock import COLLECTIVES


def reduce_step_waits(
    trainer: L.Trainer, steps: Mapping[str, np.ndarray], n_local: int
) -> dict[str, Any] | None:
    """Per step and collective, the least wait over the ranks (one all-reduce MIN of the
    per-step series ``steps``, of which this rank holds ``n_local``): the rank that arrived
    last at a collective waited for nobody there, so the sum of those minima is the step's
    exposed communication. A collective: every rank calls it, before the gather. The
    collectives are the series' keys, in the strategy's order (:data:`COLLECTIVES`)."""
    import torch.distributed as dist

    device = trainer.strategy.root_device
    count = torch.tensor([float(n_local)], dtype=torch.float64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MIN)  # every rank's series hold these steps
    n = int(count.item())
    keys = tuple(steps)
    mine = np.stack([steps[key][:n] for key in keys])
    least = torch.from_numpy(np.where(np.isfinite(mine), mine, np.inf)).to(device)
    dist.all_reduce(least, op=dist.ReduceOp.MIN)
    return step_wait_stats(mine, least.cpu().numpy(), keys)


def step_wait_stats(
    mine: np.ndarray, least: np.ndarray, keys: Sequence[str] = COLLECTIVES["ddp"]
) -> dict[str, Any] | None:
    """This rank's per-step communication waits against each step's least wait over the
    ranks. ``mine`` and ``least`` are (collective, step) arrays in the order of ``keys`` (a
    strategy's :data:`COLLECTIVES`), NaN (``least``: inf) where a step had no such interval. A
    step counts where its first collective (DDP's gradient all-reduce, FSDP's all-gather) was
    timed on every rank; a collective that did not run in it adds nothing.

    Returns the means over those steps of the exposed communication (the sum over
    collectives of the least wait) and of this rank's wait for others (its total less the
    exposed), with standard errors over steps, and each collective's share; None where no
    step counts."""
    least = np.where(np.isfinite(least), least, np.nan)
    counted = np.isfinite(mine[0]) & np.isfinite(least[0])
    n = int(counted.sum())
    if n == 0:
        return None
    mine_c = np.nan_to_num(mine[:, counted])
    least_c = np.nan_to_num(least[:, counted])
    exposed = least_c.sum(axis=0)
    wait = mine_c.sum(axis=0) - exposed

    def se(values: np.ndarray) -> float | None:
        return float(values.std(ddof=1) / np.sqrt(n)) if n > 1 else None

    return {
        "steps": n,
        "exposed_s": float(exposed.mean()),
        "exposed_se_s": se(exposed),
        "wait_s": float(wait.mean()),
        "wait_se_s": se(wait),
        "by_collective": {
            key: {
                "exposed_s": float(least_c[i].mean()),
                "wait_s": float((mine_c[i] - least_c[i]).mean()),
            }
            for i, key in enumerate(keys)
        },
    }


def combine_calibration(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every rank's windows into one cross-check of the exposed all-reduce (under FSDP2 of
    the exposed reduce-scatter only: ``isolates`` says which), and the overlap slowdown.

    Per pair of windows p: the median over ranks of the synced window minus the slowest
    rank's no_sync window (the synced passes wait for it anyway), less the pair's overlap
    slowdown where measured (the median over ranks of synced minus no_sync time to the last
    gradient: backward slowed by the all-reduce beside it, which the difference holds too).
    Each estimate is the median over pairs, unclipped (a negative value is noise, and says
    how much), with the per-pair values kept for an interval.
    """
    measured = [p for p in parts if p.get("status") == "measured"]
    if not measured or len(measured) != len(parts):
        return _not_measured(parts)
    pairs = min(
        min(len(p["fwd_bwd_windows_s"]), len(p["fwd_bwd_sync_windows_s"])) for p in measured
    )
    nosync = [max(p["fwd_bwd_windows_s"][i] for p in measured) for i in range(pairs)]
    synced = [
        statistics.median(p["fwd_bwd_sync_windows_s"][i] for p in measured) for i in range(pairs)
    ]
    diffs = [b - a for a, b in zip(nosync, synced, strict=True)]
    # Backward slowed by the all-reduce beside it: per pair, the median over ranks of each
    # rank's synced minus no_sync time to the last gradient.
    overlap: list[float] | None = None
    if all(
        p.get("to_last_grad_windows_s") and p.get("to_last_grad_sync_windows_s") for p in measured
    ):
        overlap = [
            statistics.median(
                p["to_last_grad_sync_windows_s"][i] - p["to_last_grad_windows_s"][i]
                for p in measured
            )
            for i in range(pairs)
        ]
    if overlap:  # synced - no_sync holds the slowdown too: exposed is the rest
        diffs = [d - o for d, o in zip(diffs, overlap, strict=True)]
    return {
        "status": "measured",
        "reason": None,
        "steps": measured[0]["steps"],
        "windows": measured[0]["windows"],
        "isolates": measured[0]["isolates"],  # the collective synced - no_sync isolates
        "fwd_bwd_s": statistics.median(nosync),
        "fwd_bwd_sync_s": statistics.median(synced),
        "exposed_comm_s": statistics.median(diffs),
        "paired_diffs_s": diffs,
        "overlap_slowdown_s": statistics.median(overlap) if overlap else None,
        "overlap_diffs_s": overlap,
        "seconds": max((p.get("seconds") or 0.0) for p in measured) or None,
        # each rank's collective kernels per synced pass (rank order), for the compute split
        "comm_kernels": [p.get("comm_kernels") for p in measured],
    }


def _not_measured(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The combined section where some rank measured no windows: why, from the rank that
    failed (the others say only that some rank did)."""
    others = [p for p in parts if p.get("status") != "measured"]
    others.sort(key=lambda p: str(p.get("reason") or "").endswith(ANOTHER_RANK))
    first = others[0] if others else {}
    return {
        "status": first.get("status", "skipped"),
        "reason": first.get("reason") or "not measured on every rank",
        "steps": first.get("steps"),
        "windows": None,
        "fwd_bwd_s": None,
        "fwd_bwd_sync_s": None,
        "exposed_comm_s": None,
        "paired_diffs_s": None,
        "overlap_slowdown_s": None,
        "overlap_diffs_s": None,
        "comm_kernels": None,
        # what trying cost (a trial pass, say); None where no rank got that far
        "seconds": max((p.get("seconds") or 0.0) for p in parts) or None,
    }


def gather_calibration(trainer: L.Trainer, part: Mapping[str, Any]) -> dict[str, Any]:
    """Every rank's calibration part, combined (call on every rank). A peer that died or a
    failed collective gives a ``failed`` section with the reason: never an exception."""
    import torch.distributed as dist

    try:
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            everyone: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(everyone, dict(part))
        else:
            everyone = [dict(part)]
    except Exception as exc:  # this rank's own failure says more, where it had one
        failure = {
            "status": "failed",
            "reason": f"gathering the calibration failed: {described(exc)}",
            "steps": part.get("steps"),
        }
        everyone = [part if part.get("status") == "failed" else failure]
    return combine_calibration(everyone)
