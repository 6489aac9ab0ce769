"""The projection in words: a paragraph per series for the report, and the "Read this first"
lines of self-checks that missed."""

from __future__ import annotations

import math
from typing import Any

from analysis.compute.projection.project import SCAN_NODES, ProjectionResult, SeriesProjection
from analysis.compute.projection.project import percent_text as _pc
from analysis.compute.projection.step_time.fsdp_comm import FsdpStepModel
from analysis.compute.projection.step_time.step_model import CARRY_WORDS, StepModel
from analysis.compute.projection.what_ifs import FULL, HYBRID


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.3g} ms"


def _nodes_word(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


def _explanation(model: StepModel, row: Any) -> str:
    """Which explanation of the anchor's unexplained loss the centre assumes, and how far
    apart the explanations put the projection (the interval spans them)."""
    if model.other_s <= 0:
        return (
            "The measured parts account for the largest measured scale's whole step, so no "
            "explanation of an unexplained loss enters the projection."
        )
    # each explanation's efficiency with the error model's mean, as the centre has it
    low, high = float(row["explanations_low"]), float(row["explanations_high"])
    share = model.other_s / model.anchor_step_s()
    lo, hi = (round(100 * low), round(100 * high)) if math.isfinite(low) else (0, 0)
    span = (
        f"; the explanations alone give {lo}-{hi}% there, and the interval spans them"
        if lo != hi
        else f"; the other explanations give about {lo}% there too"
        if math.isfinite(low)
        else ""
    )
    return (
        f"Of the largest measured scale's step, {_ms(model.other_s)} ({100 * share:.0f}%) is "
        f"not explained by its parts; the centre takes it as "
        f"{CARRY_WORDS[str(row['centre_assumes'])]}{span}."
    )


def findings(result: ProjectionResult) -> list[dict[str, str]]:
    """A paragraph per projected series: where efficiency goes at the largest N, where it
    falls below 75%, and which what-if moves it most."""
    out = []
    for sp in result.series:
        rows = result.table[result.table["series"] == sp.series]
        if rows.empty:
            continue
        out.append({"series": sp.series, "text": " ".join(_paragraph(sp, rows))})
    _add_self_checks(out, result.checks)
    return out


def _paragraph(sp: SeriesProjection, rows: Any) -> list[str]:
    """The sentences of one series' paragraph (``rows``: its projected rows)."""
    top = rows[rows["nodes"] == rows["nodes"].max()]
    plain = top[top["what_if"] == "as measured"].iloc[0]
    e = plain["efficiency"]
    model = sp.fit.model
    assert model is not None
    text = [_at_largest(plain, communication_words(model))]
    if math.isfinite(e):
        text.append(_explanation(model, plain))
    text.append(_crossing(sp, model))
    what_if = _best_what_if(top, e)
    if what_if is not None:
        text.append(what_if)
    sharding = sharding_sentence(rows)
    if sharding is not None:
        text.append(sharding)
    if sp.fit.scaled_points <= 1:
        text.append(
            "One scaled point only: the model cannot be checked against another scale; "
            "measure a second scale, and the self-check tests it there."
        )
    if sp.network_note:
        text.append(f"Network: {sp.network_note}.")
    if isinstance(model, FsdpStepModel):
        text.append(fsdp_sentence(model))
    else:
        text.append(readiness_sentence(model))
    return text


def fsdp_sentence(model: FsdpStepModel) -> str:
    """How an FSDP series' communication is modelled: its units' collectives, not DDP's
    all-reduce, and how much of them prefetching hides."""
    units = model.bucket_bytes
    sizes = (
        f"{min(units) / 1e6:.3g} to {max(units) / 1e6:.3g} MB"
        if min(units) != max(units)
        else f"{units[0] / 1e6:.3g} MB each"
    )
    again = "another before its backward, " if model.reshard_after_forward else ""
    hidden = (
        "on GPUs the next unit's gather prefetched behind this one's compute, the interval "
        "spanning from none to all of what prefetching can hide"
        if model.overlap
        else "on CPUs none of them hidden (gloo runs them on the training thread)"
    )
    if model.shard_size is not None:
        return (
            f"Communication: HSDP's model, per wrapped unit ({len(units)} units, {sizes} "
            f"gathered, as recorded) in shard groups of {model.shard_size} ranks: an "
            f"all-gather within the group before its forward, {again}a reduce-scatter of its "
            "gradients within the group after its backward, then an all-reduce of the "
            f"group's shard across the replicas (between nodes); {hidden}."
        )
    return (
        f"Communication: FSDP's model, per wrapped unit ({len(units)} units, {sizes} "
        f"gathered, as recorded): an all-gather before its forward, {again}a reduce-scatter "
        f"of its gradients after its backward; {hidden}."
    )


AHEAD = 1.02
"""Hybrid is ahead of full sharding where its efficiency is at least this many times full's."""


def sharding_sentence(rows: Any) -> str | None:
    """Full against hybrid sharding, for a sharded series whose rows hold the what-if of the
    other way (:data:`~analysis.compute.projection.what_ifs.HYBRID` or ``FULL``): the
    smallest projected node count where hybrid's centre is ahead of full's (:data:`AHEAD`),
    and where their intervals part; None for a series without that what-if."""
    names = set(rows["what_if"])
    other = HYBRID if HYBRID in names else FULL if FULL in names else None
    if other is None:
        return None
    mine = rows[rows["what_if"] == "as measured"].drop_duplicates("nodes").set_index("nodes")
    theirs = rows[rows["what_if"] == other].drop_duplicates("nodes").set_index("nodes")
    hybrid, full = (theirs, mine) if other == HYBRID else (mine, theirs)
    ahead = [
        int(n)
        for n in sorted(set(hybrid.index) & set(full.index))
        if hybrid.loc[n, "efficiency"] >= AHEAD * full.loc[n, "efficiency"]
    ]
    if not ahead:
        return (
            "Full against hybrid sharding: hybrid (a shard group per node) is not ahead at "
            "any projected node count."
        )
    n = ahead[0]
    parted = [
        int(m) for m in ahead if hybrid.loc[m, "efficiency_low"] > full.loc[m, "efficiency_high"]
    ]
    apart = (
        f"; their intervals part from {_nodes_word(parted[0])}"
        if parted
        else "; their intervals overlap at every projected node count"
    )
    return (
        f"Full against hybrid sharding: hybrid (a shard group per node) is ahead from "
        f"{_nodes_word(n)}: {_pc(hybrid.loc[n, 'efficiency'])}% against "
        f"{_pc(full.loc[n, 'efficiency'])}% there{apart}; hybrid holds the model state "
        "sharded over a node's devices, not all of them, so more of it per device."
    )


def readiness_sentence(model: StepModel) -> str:
    """When the model takes DDP's buckets as ready in backward: as recorded, or in
    proportion to their bytes."""
    sizes = model.bucket_bytes
    if not model.bucket_ready or not sizes:
        return (
            "Buckets: each taken as ready in backward in proportion to the bytes up to it "
            "(the records hold no readiness)."
        )
    i = max(range(len(sizes)), key=lambda j: sizes[j])
    by_bytes = sum(sizes[: i + 1]) / sum(sizes)
    return (
        f"Buckets: ready in backward as recorded at the largest measured scale; the largest "
        f"of DDP's {len(sizes)} ({sizes[i] / 1e6:.3g} MB) at {100 * model.bucket_ready[i]:.0f}% "
        f"of backward ({100 * by_bytes:.0f}% in proportion to bytes)."
    )


def communication_words(model: StepModel) -> str:
    """What a series' communication is, in words: DDP's all-reduce, FSDP's gathers and
    reduce-scatters, or HSDP's with the shards' all-reduce across groups."""
    if not isinstance(model, FsdpStepModel):
        return "the all-reduce"
    if model.shard_size is not None:
        return "HSDP's gathers, reduce-scatters and shard all-reduces"
    return "FSDP's gathers and reduce-scatters"


def _at_largest(plain: Any, comm: str = "the all-reduce") -> str:
    """The efficiency at the largest projected N, with its step's three biggest parts
    (``comm``: what its communication is, :func:`communication_words`)."""
    e, lo, hi = plain["efficiency"], plain["efficiency_low"], plain["efficiency_high"]
    if not math.isfinite(e):
        return (
            f"At {_nodes_word(int(plain['nodes']))} no efficiency can be projected "
            "(less than one sample per device and micro-batch)."
        )
    parts = {
        f"exposed {comm.removeprefix('the ')}": plain["exposed_comm_step_s"],
        "waiting for the slowest rank": plain["straggler_step_s"],
        "compute": plain["compute_step_s"],
        "input wait": plain["input_step_s"],
        f"backward slowed by {comm}": plain["overlap_step_s"],
    }
    big = sorted(((v, k) for k, v in parts.items() if v > 0), reverse=True)[:3]
    return (
        f"At {_nodes_word(int(plain['nodes']))} ({int(plain['world_size'])} devices) the "
        f"projected efficiency is {_pc(e)}% [{_pc(lo)}, {_pc(hi)}]"
        f": a step of {_ms(plain['step_s'])} as the step model puts it, of which "
        + ", ".join(f"{k} {_ms(v)}" for v, k in big)
        + _corrected_step(plain)
        + "."
    )


def _corrected_step(plain: Any) -> str:
    """Where the centre's efficiency (the step model's, with the error model's mean, never
    above the anchor's own beyond it) makes its step differ from the step model's by 1% or
    more, that step: the centre's throughput carries the mean, the parts are the model's."""
    x, batch, step = (
        float(plain[k]) for k in ("throughput_per_device", "per_device_batch_size", "step_s")
    )
    if not (x > 0 and step > 0) or abs(batch / x / step - 1) < 0.01:
        return ""
    return (
        f"; the centre's efficiency, with the error model's mean and never above the "
        f"anchor's own, makes it {_ms(batch / x)}"
    )


def _crossing(sp: SeriesProjection, model: StepModel) -> str:
    """Where the projection (and its interval) falls below 75% efficiency."""
    central, earliest, latest = sp.crossing.get("as measured", (None, None, None))
    if central is not None and central * sp.devices_per_node <= model.anchor_world:
        return (
            f"Efficiency is below 75% already at the largest measured scale "
            f"({model.anchor_world} devices)."
        )
    if central is not None:
        span = ""
        if earliest is not None and (earliest, latest) != (central, central):
            end = _nodes_word(latest) if latest else f"beyond {_nodes_word(SCAN_NODES[-1])}"
            span = f" (between {_nodes_word(earliest)} and {end})"
        return f"Efficiency falls below 75% at about {_nodes_word(central)}{span}."
    if earliest is not None:
        return (
            f"The central projection stays above 75% to {_nodes_word(SCAN_NODES[-1])}; "
            f"its interval reaches below it from {_nodes_word(earliest)}."
        )
    return f"It stays above 75% to {_nodes_word(SCAN_NODES[-1])}."


def _best_what_if(top: Any, e: float) -> str | None:
    """Which what-if at the largest N moves the efficiency most; None without any."""
    others = top[top["what_if"] != "as measured"].dropna(subset=["efficiency"])
    if not (len(others) and math.isfinite(e)):
        return None
    best = others.loc[others["efficiency"].idxmax()]
    gain = 100 * (best["efficiency"] - e)
    if gain >= 1:
        return (
            f"Of the settings tried, {best['what_if']} moves it most: to "
            f"{_pc(best['efficiency'])}% [{_pc(best['efficiency_low'])}, "
            f"{_pc(best['efficiency_high'])}]."
        )
    return "None of the settings tried moves it by a point or more."


def _add_self_checks(out: list[dict[str, str]], checks: Any) -> None:
    """Each self-check's sentence at the end of its series' paragraph."""
    for _, c in checks.iterrows():
        verdict = "inside" if c["covered"] else "OUTSIDE"
        for item in out:
            if item["series"] == c["series"]:
                item["text"] += (
                    f" Self-check: {int(c['world_size'])} devices projected from "
                    f"{c['from_world_sizes']} alone gave {_pc(c['predicted'])}% "
                    f"[{_pc(c['predicted_low'])}, {_pc(c['predicted_high'])}], "
                    f"measured {_pc(c['measured'])}% ({c['error_pts']:+.0f} points, "
                    f"{verdict} the interval)."
                )
