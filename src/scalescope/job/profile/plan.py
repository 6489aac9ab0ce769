"""What the profiler capture (``trainer.profile``, :mod:`.capture`) decides, as pure
functions: whether a capture fits the run at all, which ranks are profiled, the record's
``profile`` section and the words of the summary line.

Where a capture falls in a run, and whether it fits, is :mod:`scalescope.run_length`'s
arithmetic, which the analysis shares (re-exported here for the job).

No torch here: the unit tests call these directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...run_length import (
    MEASURE_STEPS,
    Capture,
    RunLength,
    call_boundaries,
    capture_misfit,
    plan_capture,
    why_not,
)

__all__ = [
    "MEASURE_STEPS",
    "TRACE_DIR",
    "Capture",
    "Choice",
    "RunLength",
    "call_boundaries",
    "capture_misfit",
    "choose_ranks",
    "not_captured",
    "plan_capture",
    "section",
    "summary_phrase",
    "trace_name",
    "why_not",
]

TRACE_DIR = "traces"
"""The traces' folder in the run directory: ``traces/rank<r>.json``."""


def trace_name(rank: int) -> str:
    return f"{TRACE_DIR}/rank{rank}.json"


# -- which ranks ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    ranks: tuple[int, ...]
    chosen_by: str
    slowest: int | None = None
    """The rank measured slowest (``auto``); None otherwise."""
    measured: dict[str, float] | None = None
    """Each rank's busy time per step, in ms, by rank (``auto``)."""


def choose_ranks(
    mode: str,
    busy_s: Sequence[float | None],
    node_ranks: Sequence[int],
    *,
    steps: int = 0,
    unmeasured: str | None = None,
) -> Choice:
    """The ranks to profile. ``busy_s``: each rank's busy seconds per step over the measured
    ``steps`` (None where not measured), in rank order; ``node_ranks``: every node's rank
    (the first node's ranks are those of node 0); ``unmeasured``: why nothing was measured.

    * one rank: rank 0;
    * ``node``: every rank of the first node;
    * ``auto``: rank 0 and the rank busiest per step (the one that waited least in the
      collectives: the rank the diagnosis would name slowest), ties to the lower rank; where
      some rank's time is unknown, every rank of the first node, and the reason."""
    world = len(node_ranks)
    first_node = tuple(r for r, node in enumerate(node_ranks) if node == 0) or (0,)
    if world <= 1:
        return Choice((0,), "one rank: rank 0")
    if mode == "node":
        return Choice(first_node, "node: every rank of the first node (trainer.profile.ranks)")
    if unmeasured is not None or any(b is None or not math.isfinite(b) for b in busy_s):
        why = unmeasured or "some rank's time was not measured"
        return Choice(
            first_node,
            f"node: the slowest rank cannot be known in advance ({why}): every rank of the "
            "first node",
        )
    values = [float(b) for b in busy_s if b is not None]
    slowest = max(range(len(values)), key=lambda r: (values[r], -r))
    measured = {str(r): round(v * 1e3, 4) for r, v in enumerate(values)}
    which = "rank 0, itself" if slowest == 0 else f"rank 0 and rank {slowest},"
    return Choice(
        tuple(sorted({0, slowest})),
        f"auto: {which} the busiest per step (the least time waiting in collectives) over "
        f"{steps} measured steps",
        slowest=slowest,
        measured=measured,
    )


# -- the record -------------------------------------------------------------------------------
def not_captured(reason: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The section of a run that took no capture, and why."""
    return {
        "status": "not captured",
        "reason": reason,
        **settings,
        "steps": None,
        "ranks": [],
        "chosen_by": None,
        "slowest_rank": None,
        "measured": None,
        "traces": {},
        "window_s": None,
        "cost_s": None,
        "overhead_s": None,
        "top_ops": {},
    }


def section(
    shared: Mapping[str, Any],
    parts: Sequence[Mapping[str, Any] | None],
    *,
    steady_step_s: float | None,
) -> dict[str, Any]:
    """The record's ``profile`` section from what every rank agreed (``shared``: the status
    before any part, the settings, the choice) and each rank's part (rank order; None for a
    rank not profiled). ``cost_s``: what the profiled steps took beyond as many steady steps
    (the slowest profiled rank's window, as the others wait for it); None without a steady
    state."""
    if shared.get("status") != "chosen":
        return not_captured(str(shared.get("reason") or "no capture"), shared["settings"])
    profiled = {r: p for r, p in enumerate(parts) if p}
    captured = {r: p for r, p in profiled.items() if p.get("status") == "captured"}
    failed = {r: p for r, p in profiled.items() if p.get("status") != "captured"}
    if not captured:
        reason = next((p.get("reason") for p in failed.values()), None)
        out = not_captured(str(reason or "no profiled rank captured a trace"), shared["settings"])
        out.update(ranks=sorted(profiled), chosen_by=shared.get("chosen_by"))
        return out
    first = min(p["steps"][0] for p in captured.values())
    last = max(p["steps"][1] for p in captured.values())
    n = last - first + 1
    window = max(p["window_s"] for p in captured.values())
    return {
        "status": "captured",
        "reason": _failures(failed) or shared.get("truncated"),
        **shared["settings"],
        "steps": [first, last],
        "ranks": sorted(profiled),
        "chosen_by": shared.get("chosen_by"),
        "slowest_rank": shared.get("slowest_rank"),
        "measured": shared.get("measured"),
        "traces": {str(r): p["trace"] for r, p in sorted(captured.items())},
        "window_s": window,
        "cost_s": window - n * steady_step_s if steady_step_s is not None else None,
        "overhead_s": max(p.get("overhead_s") or 0.0 for p in captured.values()),
        "top_ops": {str(r): p["top_ops"] for r, p in sorted(captured.items()) if p.get("top_ops")},
    }


def _failures(failed: Mapping[int, Mapping[str, Any]]) -> str | None:
    if not failed:
        return None
    return "; ".join(f"rank {r}: {p.get('reason')}" for r, p in sorted(failed.items()))


# -- the summary line -------------------------------------------------------------------------
def summary_phrase(profile: Mapping[str, Any], width: int = 40) -> str:
    """``profile rank 1: aten::mm 41%, aten::addmm 11%, gloo:all_reduce 4% (comm)``: the top
    three operations of the slowest profiled rank (else rank 0, else the first profiled), or
    why nothing was captured."""
    from ...traces import short_name

    if profile.get("status") != "captured":
        return f"profile not captured ({profile.get('reason')})"
    tables = profile.get("top_ops") or {}
    order = [profile.get("slowest_rank"), 0, *sorted(int(r) for r in tables)]
    rank = next((r for r in order if r is not None and str(r) in tables), None)
    if rank is None:
        return f"profile of steps {profile['steps'][0]}-{profile['steps'][1]}: no operations"
    ops = tables[str(rank)].get("ops", [])[:3]
    words = [
        f"{short_name(op['name'], width)} {op['share'] * 100:.0f}%"
        + (" (comm)" if op.get("communication") else "")
        for op in ops
    ]
    return f"profile rank {rank}: " + ", ".join(words)
