"""The waterfall in words: a paragraph per series for the report (:func:`findings`) and the
"Read this first" notes about the breakdown (:func:`diagnosis_notes`). Pure: no printing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from analysis.compute.profile_advice import PROFILE_OVERRIDE
from analysis.compute.run_parts import OVERLAP_BELOW_ZERO
from analysis.compute.stats import finite_number
from analysis.compute.waterfall import COMPONENTS, LABELS, NOT_RECORDED, Waterfall
from analysis.read.cpu_load import OTHER_SHARE
from analysis.read.strategy import is_sharded, strategy_of

MINOR_PTS = 1.0
"""Parts smaller than this (either sign) are named together, without advice."""
LAUNCH_BOUND_SHARE = 0.2
"""A GPU idle for more than this share of compute is called launch-bound in the advice."""
PROFILE_HINT = (
    f"to see which operations, rerun with {PROFILE_OVERRIDE} (a sweep: "
    f"`scalescope sweep --config SWEEP {PROFILE_OVERRIDE}` with profile_repeat: 0 in "
    "the sweep file, so one repeat per shape is profiled)"
)
"""What the compute advice ends with: the setting that shows the operations."""


def _whole(x: float) -> int:
    return round(x)  # an int: never "-0"


def _pts(mean: float, low: float, high: float) -> str:
    text = f"{_whole(mean)} point{'' if abs(_whole(mean)) == 1 else 's'}"
    if math.isfinite(low) and math.isfinite(high):
        text += f" [{_whole(low)}, {_whole(high)}]"
    return text


def _advice(part: str, r: Mapping[str, Any]) -> str:
    if part == "input":
        workers = r["num_workers"]
        if workers:
            return (
                f"{workers} loader worker(s) per device (workload.num_workers); "
                "see `scalescope bench-data`"
            )
        return "loader workers per device not in the config; see `scalescope bench-data`"
    if part == "comm":
        return fsdp_comm_advice(r) if is_sharded(strategy_of(r)) else _comm_advice(r)
    if part == "skew":
        return _skew_advice(r)
    if part == "overlap":
        if is_sharded(strategy_of(r)):
            return (
                "compute runs slower while FSDP's all-gathers and reduce-scatters run beside "
                "it: on GPUs, the NCCL kernels' SMs and memory bandwidth. Try fewer, larger "
                "wrapped blocks (fewer collectives beside each block's compute)"
            )
        return (
            "backward runs slower while the all-reduce runs beside it: on GPUs, the NCCL "
            "kernels' SMs and memory bandwidth; on CPUs, the cores the communication threads "
            "take. Try fewer, larger DDP buckets, or a dedicated communication stream/cores"
        )
    if part == "jitter":
        return (
            "a different rank is slowest from step to step (per-step jitter, not one slow "
            "node): look for noisy neighbours, OS noise, uneven batches or data loading "
            "stalls on all ranks"
        )
    if part == "compute":
        return f"{_compute_advice(r)}{_launch_bound(r)}; {_profile_hint(r)}"
    return "not attributed to any measured part"


def _profile_hint(r: Mapping[str, Any]) -> str:
    """The exact command that profiles this sweep again and captures (long enough for the
    capture to leave a steady state), where its manifest recorded how it was submitted; why
    these runs are too short to profile where no length fits; the setting alone otherwise."""
    command, note = r.get("profile_command"), r.get("profile_note")
    if isinstance(command, str) and command:
        return (
            f"to see which operations, run `{command}` with profile_repeat: 0 in the sweep "
            "file (one repeat per shape profiled)"
        )
    if isinstance(note, str) and note:
        return f"no profile suggested: {note}"
    return PROFILE_HINT


def _contention(r: Mapping[str, Any]) -> str:
    """Other programs that slowed the runs (their mean share of the cores, at least
    :data:`OTHER_SHARE`): at this scale the compute part holds it; at the baseline, a slower
    baseline makes the loss here look smaller than it is."""
    here = finite_number(r.get("other_cpu_share_mean"))
    base = finite_number(r.get("baseline_other_cpu_share_mean"))
    said = []
    if here is not None and here >= OTHER_SHARE:
        said.append(
            f"other programs took {here:.0%} of these runs' cores (see Read this first): the "
            "compute part holds that contention"
        )
    if base is not None and base >= OTHER_SHARE:
        said.append(
            f"other programs took {base:.0%} of the baseline's cores: its slower time makes "
            "the loss here look smaller than it is"
        )
    return "".join(f"{s}; " for s in said)


def _compute_advice(r: Mapping[str, Any]) -> str:
    return _contention(r) + _work_advice(r)


def _work_advice(r: Mapping[str, Any]) -> str:
    b, b0 = r["per_device_batch_size"], r["baseline_per_device_batch_size"]
    if not (b is None or b is pd.NA or b0 is None or b0 is pd.NA) and b != b0:
        verb = "fell" if b < b0 else "rose"
        return f"the per-device batch {verb} from {b0} to {b} ({r['scaling_mode']} scaling)"
    return (
        "the per-device batch is unchanged: look for slower devices (clocks, throttling) "
        "or processes contending for CPU cores"
    )


def _launch_bound(r: Mapping[str, Any]) -> str:
    """The GPU's idle share of compute, where the split says the host cannot keep it busy."""
    idle = r.get("gpu_idle_share_mean", math.nan)
    if not isinstance(idle, float) or not math.isfinite(idle) or idle < LAUNCH_BOUND_SHARE:
        return ""
    return (
        f"; the GPU idles {idle:.0%} of compute: the step is launch-bound; try CUDA graphs, "
        "trainer.compile=true or a larger batch"
    )


def _comm_advice(r: Mapping[str, Any]) -> str:
    bits = []
    if math.isfinite(r["busbw_gbps_mean"]):
        fit = ""
        if math.isfinite(r.get("allreduce_alpha_s_mean", math.nan)):
            fit = f" (fit: latency {1e6 * r['allreduce_alpha_s_mean']:.3g} µs)"
        bits.append(f"busbw {r['busbw_gbps_mean']:.3g} GB/s{fit}")
    if math.isfinite(r["hidden_share_mean"]):
        bits.append(
            f"{r['hidden_share_mean']:.0%} of the predicted all-reduce hidden behind backward"
        )
    bits.append("try a larger per-device batch, gradient accumulation or larger DDP buckets")
    return ", ".join(bits[:-1]) + ("; " if len(bits) > 1 else "") + bits[-1]


def fsdp_comm_advice(r: Mapping[str, Any]) -> str:
    """What to try where FSDP's all-gathers and reduce-scatters are exposed: every option
    trades memory or latency for fewer or smaller collectives, or hides more of them."""
    bits = []
    if math.isfinite(r.get("busbw_gbps_mean", math.nan)):
        bits.append(f"busbw {r['busbw_gbps_mean']:.3g} GB/s")
    if math.isfinite(r.get("hidden_share_mean", math.nan)):
        bits.append(f"{r['hidden_share_mean']:.0%} of the predicted communication hidden")
    tries = [
        "fsdp.reshard_after_forward: false keeps each block gathered from forward to "
        "backward (one all-gather per block fewer, for the memory of the gathered blocks)",
        "fewer, larger wrapped blocks (fewer collectives, less latency per byte)",
        "bf16 gathers (trainer.precision: bf16-mixed gathers bf16 parameters: half the bytes)",
        "a larger per-device batch (more compute to hide each gather behind)",
    ]
    if str(r.get("accelerator") or "").lower() == "cpu":
        tries.append(
            "on CPUs FSDP's collectives run on the training thread: nothing hides them, "
            "prefetching included"
        )
    else:
        tries.insert(
            1,
            "prefetch further ahead (FSDP2's set_modules_to_forward_prefetch and "
            "set_modules_to_backward_prefetch) so each block's gather runs behind the "
            "compute before it",
        )
    tries.insert(0, _full_or_hybrid(r))
    head = ", ".join(bits)
    return (
        (f"{head}; " if head else "")
        + "FSDP's all-gathers and reduce-scatters: try "
        + ("; ".join(t for t in tries if t))
    )


def _full_or_hybrid(r: Mapping[str, Any]) -> str:
    """Full against hybrid sharding, from where the exposed communication went: '' on one
    node (nothing crosses one)."""
    # a table row's numbers are numpy's (np.int64 is no int): read them as numbers
    nodes = pd.to_numeric(r.get("nodes"), errors="coerce")
    if not (pd.notna(nodes) and nodes > 1):
        return ""
    inter = finite_number(pd.to_numeric(r.get("comm_inter_pts_mean"), errors="coerce"))
    share = f" ({inter:.1f} pts of it between nodes)" if inter is not None else ""
    if strategy_of(r) == "hsdp":
        return (
            "under HSDP only each gradient shard's all-reduce crosses nodes" + share + ": if "
            "it dominates, a larger fsdp.shard_size (fewer replicas, more memory saved, its "
            "gathers then crossing nodes) or bf16 reductions; if the gathers dominate, "
            "reshard_after_forward: false or bf16 gathers"
        )
    return (
        "hybrid sharding (trainer.strategy: hsdp) keeps the gathers and reduce-scatters "
        "inside each node and sends only each gradient shard's all-reduce across nodes"
        + share
        + ", for a node's share of the model state per device instead of the world's"
    )


def _skew_advice(r: Mapping[str, Any]) -> str:
    rank, node = r["slowest_rank"], r["slowest_node"]
    if rank is None or rank is pd.NA:
        return "check the slowest rank's node"
    seen = (
        f" (in {r['slowest_seen']} of {r['n_recorded']} runs)"
        if r["slowest_seen"] < r["n_recorded"]
        else ""
    )
    over = r["rank_skew_mean"]
    pct = f" (+{over:.0%} over the typical rank)" if math.isfinite(over) else ""
    return f"rank {rank} on node {node} is slowest{pct}{seen}; check that node"


def finding(r: Mapping[str, Any]) -> str:
    """One scale point in words: the loss, then its parts biggest first, each with what to
    try; ``not recorded`` where there is no breakdown."""
    where = f"At {r['world_size']} devices ({r['nodes']} node{'s' if r['nodes'] > 1 else ''})"
    lost = r["lost_pts_mean"]
    if not math.isfinite(lost):
        return f"{where}: {r['status']}."
    head = (
        f"{where}, {r['n']} run(s): {100 - lost:.0f}% efficiency, "
        f"{_pts(lost, r['lost_pts_ci_low'], r['lost_pts_ci_high'])} lost"
    )
    if r["status"] != "recorded":
        return f"{head}; where they went: {r['status']}."
    parts = sorted(
        (c for c in COMPONENTS if math.isfinite(r[f"{c}_pts_mean"])),
        key=lambda c: -r[f"{c}_pts_mean"],
    )
    big = [c for c in parts if abs(r[f"{c}_pts_mean"]) >= MINOR_PTS]
    said = [
        f"{LABELS[c]}, "
        f"{_pts(r[f'{c}_pts_mean'], r[f'{c}_pts_ci_low'], r[f'{c}_pts_ci_high'])}"
        f"{' (a gain)' if r[f'{c}_pts_mean'] < 0 else ''}: {_advice(c, r)}"
        for c in big
    ]
    small = [LABELS[c] for c in parts if c not in big]
    if small:
        said.append(f"under {MINOR_PTS:g} point each: {', '.join(small)}")
    notes = {"comm": r["comm_note"], "jitter": r["jitter_note"]}
    folded = str(r.get("overlap_note") or "")
    said += [
        f"{LABELS[c]}: {folded}"
        if c == "overlap" and folded
        else f"{LABELS[c]}: {NOT_RECORDED}" + (f" ({notes[c]})" if notes.get(c) else "")
        for c in COMPONENTS
        if not math.isfinite(r[f"{c}_pts_mean"])
    ]
    rem = r["remainder_pts_mean"]
    if math.isfinite(rem):
        said.append(
            f"unexplained, {_pts(rem, r['remainder_pts_ci_low'], r['remainder_pts_ci_high'])}"
        )
    else:
        said.append(f"unexplained: {NOT_RECORDED} (a part is missing)")
    return f"{head}: " + "; ".join(said) + "."


def findings(wf: Waterfall) -> list[dict[str, str]]:
    """A paragraph per series: every scale point beyond the baseline in words."""
    out = []
    t = wf.table
    for series, part in t.groupby("series", sort=False):
        scaled = part[~part["is_baseline"]]
        base = part[part["is_baseline"]].iloc[0]
        intro = (
            f"Against the baseline at {base['world_size']} device(s); points of parallel "
            "efficiency, 95% interval over repeats in brackets, a negative part is a gain."
        )
        if scaled.empty:
            text = f"{intro} Only the baseline scale was measured: nothing was lost yet."
        else:
            text = " ".join([intro, *(finding(r) for _, r in scaled.iterrows())])
        out.append({"series": str(series), "text": text})
    return out


UNEXPLAINED_NOTE_PTS = 5.0
"""An unexplained remainder whose interval reaches beyond this many points (either sign) is
called out: the parts do not account for the loss that well."""


def diagnosis_notes(wf: Waterfall) -> list[str]:
    """Sentences for "Read this first" about the breakdown: scale points whose unexplained
    remainder reaches far, whose overlap slowdown lies below zero beyond its noise (a
    measurement that disagrees), or whose communication comes from the older method."""
    return [*_unexplained_notes(wf), *_disagreement_notes(wf), *_older_method_notes(wf)]


def _scaled_recorded(wf: Waterfall) -> list[Mapping[str, Any]]:
    t = wf.table
    return [r for _, r in t[(~t["is_baseline"]) & (t["status"] == "recorded")].iterrows()]


def _where(r: Mapping[str, Any]) -> str:
    return f"{r['series']} at {r['nodes']}x{r['devices_per_node']}"


def _disagreement_notes(wf: Waterfall) -> list[str]:
    return [
        f"{_where(r)}: the overlap slowdown is {r['overlap_note']}; trust the per-step parts, "
        "and rerun the calibration (diagnosis.calibration_windows) if it matters."
        for r in _scaled_recorded(wf)
        if str(r.get("overlap_note") or "").startswith(OVERLAP_BELOW_ZERO)
    ]


def _older_method_notes(wf: Waterfall) -> list[str]:
    return [
        f"{_where(r)}: exposed communication comes from the calibration windows (records made "
        "before per-step waits), which count a rank that is slower in every pass as "
        "communication too; a run with this version measures it from every step."
        for r in _scaled_recorded(wf)
        if "calibration" in str(r.get("comm_source") or "").split("/")
    ]


def _unexplained_notes(wf: Waterfall) -> list[str]:
    out = []
    for r in _scaled_recorded(wf):
        mean, low, high = (r[f"remainder_pts_{k}"] for k in ("mean", "ci_low", "ci_high"))
        if not math.isfinite(mean):
            continue
        reach = max(abs(v) for v in (mean, low, high) if math.isfinite(v))
        if reach <= UNEXPLAINED_NOTE_PTS:
            continue
        where = _where(r)
        interval = f" [{_whole(low)}, {_whole(high)}]" if math.isfinite(low) else ""
        one = abs(_whole(mean)) == 1
        how = (
            f"beyond {UNEXPLAINED_NOTE_PTS:g}"
            if abs(mean) > UNEXPLAINED_NOTE_PTS
            else f"its interval reaching beyond {UNEXPLAINED_NOTE_PTS:g}"
        )
        out.append(
            f"{where}: {_whole(mean)} point{'' if one else 's'}{interval} "
            f"of the lost efficiency {'is' if one else 'are'} unexplained "
            f"({how}); the parts cover the loss less well here: "
            "longer runs (more steady steps) or more repeats narrow it."
        )
    return out
