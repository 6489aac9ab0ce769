"""What the profiler capture (``trainer.profile``, :mod:`.capture`) decides, as pure
functions: whether a capture fits the run at all, which ranks are profiled, the record's
``profile`` section and the words of the summary line.

The capture sits in the warm-up, so no timed figure holds it: the warm-up as resolved, then
:data:`MEASURE_STEPS` steps in which every rank measures how long it was busy (not waiting in
a collective), then ``trainer.profile.steps`` profiled steps; the steady state starts at the
first step boundary after them. A Lightning call can hold several optimizer steps
(``trainer.steps_per_call``): each phase starts at a call boundary, so it can run longer
than its count (the capture takes whole calls), never shorter. A capture that its epoch's
end would cut short waits for the
next epoch (validation stays out of it); only an epoch shorter than the capture ends it early.

No torch here: the unit tests call these directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MEASURE_STEPS = 3
"""Optimizer steps (at least; up to the next call boundary) every rank's busy time is
measured over before the ranks to profile are chosen."""

TRACE_DIR = "traces"
"""The traces' folder in the run directory: ``traces/rank<r>.json``."""


def trace_name(rank: int) -> str:
    return f"{TRACE_DIR}/rank{rank}.json"


# -- does a capture fit ----------------------------------------------------------------------
def call_boundaries(
    steps_per_epoch: int, epochs: int, max_steps: int | None, steps_per_call: int
) -> list[int]:
    """The optimizer step counts at which a training call ends (where the warm-up, the
    measurement and the capture can start or end), over the whole run."""
    total = steps_per_epoch * epochs
    if max_steps is not None:
        total = min(total, max_steps)
    out: list[int] = []
    for epoch in range(epochs):
        start, done = epoch * steps_per_epoch, 0
        while done < steps_per_epoch:
            done = min(done + steps_per_call, steps_per_epoch)
            b = min(start + done, total)
            if not out or b > out[-1]:
                out.append(b)
            if b >= total:
                return out
    return out


@dataclass(frozen=True)
class Capture:
    """Where a capture falls in a run of known length (optimizer steps)."""

    measure_from: int
    """Call boundary the measurement starts at (the capture's own start without one)."""
    first: int
    """First profiled step (0-based: the step that runs when ``first`` steps are done)."""
    end: int
    """Steps done when the capture ends: the first call boundary at least ``steps`` after
    ``first``, or its epoch's end."""
    steady_from: int | None
    """Call boundary the steady state starts at (never the boundary the capture ends at when
    that is an epoch's end); None where the run ends first."""


def plan_capture(
    boundaries: Sequence[int],
    steps_per_epoch: int,
    *,
    base: int,
    measure: int,
    steps: int,
) -> Capture | None:
    """The capture a run whose calls end at ``boundaries`` would take: the measurement from the
    first boundary at or after the warm-up (``base``), the capture from the first boundary at
    least ``measure`` steps later (from the next epoch's start where its epoch has fewer than
    ``steps`` left and an epoch has as many), to the first boundary at least ``steps`` later
    or its epoch's end, the steady state from there (from the next boundary where the epoch's
    end cut it short). None where the run ends before the capture
    starts."""

    def first_at_or_after(step: int) -> int | None:
        return next((b for b in boundaries if b >= step), None)

    total = boundaries[-1] if boundaries else 0
    measure_from = first_at_or_after(base)
    first = first_at_or_after(measure_from + measure) if measure_from is not None else None
    if first is None or first >= total:
        return None
    epoch_end = (first // steps_per_epoch + 1) * steps_per_epoch if steps_per_epoch else math.inf
    if epoch_end - first < steps <= steps_per_epoch:
        first, epoch_end = int(epoch_end), epoch_end + steps_per_epoch
        if first >= total:
            return None
    # whole calls: to the first boundary at least `steps` later, or the epoch's end
    after = first_at_or_after(first + steps)
    end = int(min(after if after is not None else total, epoch_end, total))
    # Cut short by its epoch's end, the capture is over once the epoch has ended: the steady
    # state starts at the next epoch's first boundary.
    steady = first_at_or_after(end if end >= first + steps else end + 1)
    return Capture(
        measure_from=measure_from or 0,
        first=first,
        end=end,
        steady_from=steady if steady is not None and steady < total else None,
    )


def why_not(capture: Capture | None, *, total: int, base: int, measure: int, steps: int) -> str:
    """The one line that says why a run of ``total`` steps takes no capture."""
    need = f"the warm-up ({base} steps), the rank measurement ({measure}) and the capture ({steps})"
    if capture is None:
        return (
            f"the run ends in its warm-up: its {total} steps end before {need} are done; "
            "train longer (trainer.max_epochs) or profile fewer steps"
        )
    return (
        f"the run ends in its warm-up: after {need}, rounded to whole training calls, none of "
        f"its {total} steps would be left for the steady state; train longer "
        "(trainer.max_epochs) or profile fewer steps"
    )


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
