"""Where the efficiency went, as a table: every scale point beyond its series' baseline, the
points of efficiency lost and their parts (:mod:`analysis.compute.waterfall`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.analyze import Analysis
from analysis.compute.run_parts import ISOLATES_REDUCE_SCATTER
from analysis.present.display import MISSING, DisplayTable, devices_header, is_missing, pct, sig
from analysis.read.strategy import is_sharded, strategy_of


def _points(r: Any, part: str) -> str:
    """``6.1 [4.0, 8.2]``; ``not recorded`` where the part was not measured (never 0)."""
    from analysis.compute.waterfall import NOT_RECORDED

    mean = r[f"{part}_pts_mean"]
    if is_missing(mean):
        folded = str(r.get("overlap_note") or "") if part == "overlap" else ""
        return folded.split(" (", 1)[0] if folded else NOT_RECORDED
    low, high = r[f"{part}_pts_ci_low"], r[f"{part}_pts_ci_high"]
    ci = "" if is_missing(low) or is_missing(high) else f" [{_one(low)}, {_one(high)}]"
    return f"{_one(mean)}{ci}"


def _one(x: float) -> str:
    """One decimal, never ``-0.0``."""
    return f"{round(float(x), 1) + 0.0:.1f}"


def diagnosis_table(analysis: Analysis) -> DisplayTable | None:
    """Where the efficiency went: every scale point beyond its series' baseline, the points
    lost and their parts. None when no series has a scale beyond its baseline."""
    from analysis.compute.waterfall import PARTS

    w = analysis.waterfall
    if w is None:
        return None
    t = w.table[~w.table["is_baseline"]]
    if t.empty:
        return None
    dev = devices_header(t["accelerator"].tolist())
    names = {
        "comm": "Exposed comm",
        "overlap": "Comm overlap",
        "input": "Input wait",
        "skew": "Rank skew",
        "jitter": "Rotating stragglers",
        "compute": "Compute/sample",
        "remainder": "Unexplained",
    }
    columns = [
        "Configuration",
        dev,
        "Nodes",
        "n (breakdown)",
        "Lost (pts) [95% CI]",
        *(f"{names[p]} (pts)" for p in PARTS),
        "Comm hidden",
        "busbw (GB/s)",
    ]
    between = (
        bool(((t["nodes"] > 1) & t["comm_inter_pts_mean"].notna()).any())
        if "comm_inter_pts_mean" in t
        else False
    )
    if between:  # of the exposed communication, what crossed nodes (pts)
        columns.insert(columns.index("Exposed comm (pts)") + 1, "of which between nodes (pts)")
    split = bool(t["gpu_idle_share_mean"].notna().any()) if "gpu_idle_share_mean" in t else False
    if split:
        columns += ["GPU busy (NVML)", "Collectives alone (ms/step)", "GPU idle in compute"]
    rows = [_diagnosis_row(r, between, split) for _, r in t.iterrows()]
    caption = _diagnosis_caption(t, split)
    if between:
        caption.append(
            "of which between nodes: the part of exposed comm that crossed nodes (all of it "
            "where every collective spans them, DDP's and FSDP's; under HSDP its all-reduce "
            "across the shard groups, which are the nodes)."
        )
    return DisplayTable(
        "diagnosis",
        "Where the efficiency went",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=caption,
        right={c for c in columns if c not in ("Configuration",)},
    )


def _diagnosis_row(r: pd.Series, between: bool, split: bool) -> list[str]:
    """One scale point's cells of :func:`diagnosis_table` (with the part between nodes after
    exposed comm where ``between``, the GPU's split where ``split``)."""
    from analysis.compute.waterfall import NOT_RECORDED, PARTS

    recorded = r["status"] == "recorded"
    lost_text = MISSING if is_missing(r["lost_pts_mean"]) else _points(r, "lost")
    hidden = pct(r["hidden_share_mean"], 0) if recorded else NOT_RECORDED
    if recorded and is_missing(r["hidden_share_mean"]) and r["hidden_note"]:
        hidden = f"{MISSING} ({r['hidden_note']})"
    busbw = r["busbw_gbps_mean"]
    parts = [_points(r, p) if recorded else NOT_RECORDED for p in PARTS]
    if between:
        inter = r["comm_inter_pts_mean"]
        cell = _one(inter) if not is_missing(inter) else MISSING
        parts.insert(PARTS.index("comm") + 1, cell if recorded else NOT_RECORDED)
    return [
        r["series"],
        str(r["world_size"]),
        str(r["nodes"]),
        f"{r['n']} ({r['n_recorded']})",
        lost_text,
        *parts,
        hidden,
        (sig(busbw, 3) if not is_missing(busbw) else MISSING) if recorded else NOT_RECORDED,
        *(_split_cells(r) if split else []),
    ]


def _split_cells(r: pd.Series) -> list[str]:
    """The GPU's utilisation and its idle share of compute, or why they are not there."""
    from analysis.compute.waterfall import NOT_RECORDED

    util, idle = r["gpu_util_pct_mean"], r["gpu_idle_share_mean"]
    if is_missing(idle):
        return [MISSING, MISSING, f"{NOT_RECORDED} ({r['compute_split_note']})"]
    alone = r.get("gpu_comm_alone_s_mean")
    return [
        f"{util:.0f}%" if not is_missing(util) else MISSING,
        sig(1e3 * alone, 2) if not is_missing(alone) else MISSING,
        pct(idle, 0),
    ]


def _diagnosis_caption(t: pd.DataFrame, split: bool) -> list[str]:
    """What the diagnosis table's columns mean, and why rows are not recorded."""
    from analysis.compute.waterfall import NOT_RECORDED

    caption = [
        "Points of parallel efficiency lost against the series' baseline (the same baseline "
        "and efficiency as the speedup table), split by where the time per sample per device "
        "went, read from the typical rank: part = 100 x (run's seconds per sample - "
        "baseline's) / run's seconds per sample; unexplained = lost - the parts, so they add "
        "up. Negative: a gain. 95% CI: Student-t over the repeats (n >= 2).",
        "Exposed comm: per step and collective (the gradient all-reduce, and the buffer "
        "broadcast for modules with buffers), the least wait of any rank (the last rank to "
        "arrive waits for the collective alone); rank skew and rotating stragglers: "
        "the typical rank's wait beyond it, for one persistently slower rank and for a "
        "different slow rank each step. Comm overlap: backward slowed by the all-reduce "
        "running beside it (calibration windows), taken out of compute where its interval "
        "over the windows lies above 0 (else 'within noise', left in compute). Compute/sample "
        "includes DDP's framework overhead against a 1-device baseline.",
        "Comm hidden: share of the all-reduce predicted from busbw and the gradient bytes "
        "that was not exposed. 'not recorded': the run has no breakdown "
        "(older record, diagnosis off, no steady state), never 0.",
    ]
    if split:
        caption.append(
            "GPU busy: NVML's utilisation of the typical rank's GPU over the steady state, "
            "which counts the collectives' kernels too; collectives alone: the time per step "
            "their kernels ran with no other kernel beside them (a profiler window of synced "
            "passes after training, plus the wait for slower ranks; 0 on one device); GPU "
            "idle in compute: the share of compute the GPU ran no kernel (host overhead: "
            "launches), from that utilisation times the step less the collectives alone."
        )
    if any(strategy_of(r) == "hsdp" for _, r in t.iterrows()):
        caption.append(
            "HSDP series: exposed comm is the shard group's all-gathers and reduce-scatters, "
            "as under FSDP; the all-reduce of each shard's gradients across the shard groups "
            "is not timed apart (torch calls it directly, after the reduce-scatter), so on "
            "CPUs it counts in compute."
        )
    if any(is_sharded(strategy_of(r)) for _, r in t.iterrows()):
        caption.append(
            "FSDP series: exposed comm is FSDP's all-gathers of each wrapped block's parameters "
            "(before forward, and before backward unless reshard_after_forward is off) and "
            "reduce-scatters of its gradients, the least wait of any rank; compute/sample "
            "includes FSDP's framework overhead. "
            f"{ISOLATES_REDUCE_SCATTER}; no comm "
            "overlap is measured (FSDP2 marks no last gradient in backward)."
        )
    missing = sorted({s for s in t["status"] if s != "recorded"})
    caption += [f"Not recorded: {m.removeprefix(NOT_RECORDED).strip(' ()')}." for m in missing]
    return caption
