"""The profiling command the advice suggests captures a trace in the runs it would repeat:
held against the job's own rule (scalescope.run_length), lengthened where the runs end in the
warm-up the capture extends, or refused as too short."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

import pandas as pd
from analysis_helpers import REPO

from analysis.compute.findings import _profile_hint
from analysis.compute.profile_advice import (
    PROFILE_OVERRIDE,
    PROFILE_STEPS,
    profile_advice,
    run_length,
)
from analysis.read.frame import load_all
from scalescope.run_length import capture_misfit

QUICKSTART = REPO / "tests" / "fixtures" / "quickstart"
COMMAND = "scalescope sweep --config s.yaml --executor local trainer.max_epochs=1"


def _row(world: int, per_epoch: int = 8, **trainer: Any) -> dict[str, Any]:
    settings = {"max_epochs": 1, "max_steps": None, "warmup_steps": 2, "steps_per_call": 2}
    return {
        "sweep_command": COMMAND,
        "world_size": world,
        "steps_per_epoch": per_epoch,
        "config": {
            "trainer": {**settings, **trainer},
            "workload": {"name": "gpt"},
            "diagnosis": {"enabled": True},
        },
    }


def _overrides(command: str) -> dict[str, str]:
    return dict(w.split("=", 1) for w in shlex.split(command) if "=" in w)


def test_the_demo_is_told_the_epochs_that_make_its_capture_fit() -> None:
    """The quick start's runs (8 steps, a 2-step warm-up, 2 steps a call) end in the warm-up
    a 5-step capture extends, as each job warned; the advice asks for 2 epochs, where every
    run of the sweep keeps a steady state after the capture."""
    runs = load_all(QUICKSTART, jobs=1).runs
    lengths = [run_length(row) for _, row in runs.iterrows()]
    assert all(r is not None and capture_misfit(r, PROFILE_STEPS) for r in lengths)
    advice = profile_advice(runs)
    assert advice.command.endswith(f"--wait {PROFILE_OVERRIDE} trainer.max_epochs=2")
    assert all(capture_misfit(replace(r, epochs=2), PROFILE_STEPS) is None for r in lengths)  # type: ignore[arg-type]


def test_runs_long_enough_get_the_command_as_it_was() -> None:
    advice = profile_advice(pd.DataFrame([_row(1, per_epoch=40), _row(2, per_epoch=40)]))
    assert _overrides(advice.command) == {
        "trainer.max_epochs": "1",
        "trainer.profile.steps": str(PROFILE_STEPS),
    }
    assert advice.note == ""


def test_the_recorded_epochs_are_replaced_not_repeated() -> None:
    advice = profile_advice(pd.DataFrame([_row(1), _row(2)]))
    words = shlex.split(advice.command)
    assert [w for w in words if w.startswith("trainer.max_epochs=")] == ["trainer.max_epochs=2"]


def test_a_step_bound_is_raised_where_it_ends_the_runs() -> None:
    """max_steps 8 over 100-step epochs: more epochs would not help; more steps do."""
    advice = profile_advice(pd.DataFrame([_row(2, per_epoch=100, max_steps=8)]))
    steps = int(_overrides(advice.command)["trainer.max_steps"])
    run = run_length(_row(2, per_epoch=100, max_steps=steps))
    less = run_length(_row(2, per_epoch=100, max_steps=steps - 1))
    assert run is not None and capture_misfit(run, PROFILE_STEPS) is None
    assert less is not None and capture_misfit(less, PROFILE_STEPS) is not None


def test_runs_out_of_reach_are_called_too_short_and_get_no_command() -> None:
    """A 5000-step warm-up over 8-step epochs would need hundreds of epochs."""
    advice = profile_advice(pd.DataFrame([_row(1, warmup_steps=5000)]))
    assert advice.command == ""
    assert advice.note.startswith("these runs are too short to profile")
    assert "the run ends in its warm-up" in advice.note
    hint = _profile_hint({"profile_command": "", "profile_note": advice.note})
    assert "too short to profile" in hint and PROFILE_OVERRIDE in hint
    assert "scalescope sweep" not in hint


def test_a_users_module_steps_one_call_at_a_time_and_one_rank_measures_nothing() -> None:
    row = _row(1)
    row["config"]["workload"] = {"name": "mypkg.mod:Model"}
    run = run_length(row)
    assert run is not None and run.steps_per_call == 1 and not run.measures
    assert run_length(_row(2)).measures  # type: ignore[union-attr]
    assert run_length({**_row(2), "steps_per_epoch": 0}) is None  # length unknown
