"""The profiling command the advice suggests, checked against the runs it would repeat.

A sweep run again with ``trainer.profile.steps`` set captures nothing where its runs end in
the warm-up the capture extends (the job warns "not captured: the run ends in its warm-up"
and records no trace). So the suggestion is held against the job's own rule
(:func:`scalescope.run_length.capture_misfit`, which the job decides with) for every run the
sweep command would repeat: as is where every run fits; else with the least
``trainer.max_epochs`` (or ``trainer.max_steps`` where that bounds the runs) at which every
run keeps a steady state after the capture; else no command, and why these runs are too short
to profile. Pure: no printing.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from analysis.read.frame import whole_number
from scalescope.run_length import RunLength, capture_misfit, resolve_warmup

PROFILE_STEPS = 5
"""The profiled steps the advice suggests."""
PROFILE_OVERRIDE = f"trainer.profile.steps={PROFILE_STEPS}"
"""What the advice adds to a sweep's command line to see a scale's operations."""
MORE_EPOCHS = 20
"""How many more epochs than the runs had the advice may ask for before it calls them too
short to profile."""
MORE_STEPS = 2000
"""The same for ``trainer.max_steps``, in optimizer steps."""


@dataclass(frozen=True)
class ProfileAdvice:
    command: str
    """The sweep command that profiles and captures ('' where none: no manifest recorded how
    the sweep was submitted, or no length fits)."""
    note: str
    """Why there is no command although the sweep's command is known ('' otherwise)."""


def _section(mapping: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def run_length(row: Mapping[str, Any]) -> RunLength | None:
    """A run's length as its record gives it, the way the job reads its own (None where the
    epoch's length was not known before it ran: the job does not check those either)."""
    config = _section(row, "config")
    trainer = _section(config, "trainer")
    per_epoch = row.get("steps_per_epoch")
    if per_epoch is None or per_epoch is pd.NA or int(per_epoch) <= 0 or not trainer:
        return None
    per_epoch = int(per_epoch)
    max_steps = whole_number(trainer.get("max_steps"))
    max_steps = max_steps if max_steps and max_steps > 0 else None
    warmup = resolve_warmup(trainer.get("warmup_steps", "auto"), per_epoch, max_steps)
    if warmup is None:
        return None
    user_module = ":" in str(_section(config, "workload").get("name", ""))  # else grouped
    profile, diagnosis = _section(trainer, "profile"), _section(config, "diagnosis")
    world = row.get("world_size")
    several = world is not None and world is not pd.NA and int(world) > 1
    return RunLength(
        steps_per_epoch=per_epoch,
        epochs=max(1, whole_number(trainer.get("max_epochs")) or 1),
        max_steps=max_steps,
        steps_per_call=1
        if user_module
        else max(1, whole_number(trainer.get("steps_per_call")) or 1),
        warmup_steps=warmup,
        measures=profile.get("ranks", "auto") == "auto"
        and several
        and bool(diagnosis.get("enabled", True)),
    )


def _all_fit(runs: Sequence[RunLength]) -> bool:
    return all(capture_misfit(r, PROFILE_STEPS) is None for r in runs)


def _least(
    runs: Sequence[RunLength], values: range, make: Callable[[RunLength, int], RunLength]
) -> int | None:
    return next((v for v in values if _all_fit([make(r, v) for r in runs])), None)


def _epochs_for(run: RunLength, max_steps: int) -> RunLength:
    epochs = max(run.epochs, math.ceil(max_steps / run.steps_per_epoch))
    return replace(run, max_steps=max_steps, epochs=epochs)


def _lengthen(runs: Sequence[RunLength]) -> list[str] | None:
    """The overrides that make a capture fit every run, or None within the advice's reach."""
    epochs = max(r.epochs for r in runs)
    bounded = [r for r in runs if r.max_steps is not None]
    if not bounded:
        found = _least(
            runs, range(epochs + 1, epochs + MORE_EPOCHS + 1), lambda r, e: replace(r, epochs=e)
        )
        return None if found is None else [f"trainer.max_epochs={found}"]
    steps = max(r.max_steps or 0 for r in bounded)
    found = _least(runs, range(steps + 1, steps + MORE_STEPS + 1), _epochs_for)
    if found is None:
        return None
    out = [f"trainer.max_steps={found}"]
    need = max(_epochs_for(r, found).epochs for r in runs)
    return [*out, f"trainer.max_epochs={need}"] if need > epochs else out


def _with(command: str, overrides: Sequence[str]) -> str:
    """The recorded command with the suggestion's overrides in place of its own."""
    added = [PROFILE_OVERRIDE, *overrides]
    keys = {w.split("=", 1)[0] for w in added}
    words = [w for w in shlex.split(command) if w.split("=", 1)[0] not in keys]
    return shlex.join([*words, *added])


def profile_advice(rows: pd.DataFrame) -> ProfileAdvice:
    """The profiling command for the runs of one sweep (``rows``: every run its command would
    repeat, all of its shapes)."""
    commands = [c for c in rows.get("sweep_command", pd.Series(dtype=object)) if isinstance(c, str)]
    if not commands:
        return ProfileAdvice("", "")
    runs = [r for r in (run_length(row) for _, row in rows.iterrows()) if r is not None]
    if _all_fit(runs):
        return ProfileAdvice(_with(commands[0], []), "")
    overrides = _lengthen(runs)
    if overrides is not None:
        return ProfileAdvice(_with(commands[0], overrides), "")
    why = next(m for m in (capture_misfit(r, PROFILE_STEPS) for r in runs) if m)
    return ProfileAdvice("", f"these runs are too short to profile ({PROFILE_OVERRIDE}): {why}")


def sweep_advice(runs: pd.DataFrame) -> dict[str, ProfileAdvice]:
    """The advice per sweep command, each over every run that command would repeat."""
    if "sweep_command" not in runs or runs.empty:
        return {}
    known = runs[runs["sweep_command"].map(lambda c: isinstance(c, str) and bool(c))]
    return {str(c): profile_advice(rows) for c, rows in known.groupby("sweep_command")}


def advice_for(rows: pd.DataFrame, advice: Mapping[str, ProfileAdvice]) -> ProfileAdvice:
    """The advice for a scale point's runs: that of the sweep they came from."""
    commands = [c for c in rows.get("sweep_command", pd.Series(dtype=object)) if isinstance(c, str)]
    return advice.get(commands[0], ProfileAdvice("", "")) if commands else ProfileAdvice("", "")
