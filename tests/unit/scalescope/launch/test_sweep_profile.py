"""``profile_repeat``: one repeat of every shape captures a profile, the others stay clean;
a sweep that asks for it wrongly is refused in one line before anything is submitted."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_helpers import assert_nothing_submitted, expect_error, sweep_cli, write_sweep

from scalescope.launch.executor import Launcher
from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

PROFILE = "  trainer.profile.steps: 5\n"


def plan_of(sweep: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    return plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t", **kwargs)


def test_only_the_named_repeat_of_every_shape_profiles(in_tmp: Path) -> None:
    sweep = write_sweep(in_tmp, extra="repeats: 3\nprofile_repeat: 1\n", overrides=PROFILE)
    plan = plan_of(sweep)
    assert plan.profile_repeat == 1
    launcher = Launcher(plan)
    handles = launcher.handles()
    assert len(handles) == 6
    for h in handles:
        steps = launcher._run(h).config["trainer"]["profile"]["steps"]
        assert steps == (5 if h.repeat == 1 else 0), (h.label, h.repeat)
        assert h.plan.profiles(h.repeat) == (h.repeat == 1)
    # everything else in the unprofiled repeats' configs is the profiled one's
    sp = plan.shapes[0]
    on, off = sp.config_dict(1), sp.config_dict(0)
    assert on["trainer"].pop("profile")["steps"] == 5
    assert off["trainer"].pop("profile")["steps"] == 0
    assert on == off


def test_without_profile_repeat_every_repeat_runs_as_the_overrides_say(in_tmp: Path) -> None:
    sweep = write_sweep(in_tmp, extra="repeats: 2\n", overrides=PROFILE)
    launcher = Launcher(plan_of(sweep))
    assert {launcher._run(h).config["trainer"]["profile"]["steps"] for h in launcher.handles()} == {
        5
    }
    plain = Launcher(plan_of(write_sweep(in_tmp, extra="repeats: 2\n")))
    assert {plain._run(h).config["trainer"]["profile"]["steps"] for h in plain.handles()} == {0}


@pytest.mark.parametrize(
    ("extra", "overrides", "argv", "phrase"),
    [
        (
            "repeats: 2\nprofile_repeat: 2\n",
            PROFILE,
            (),
            "profile_repeat: 2 names no repeat: the sweep runs 2 repeat(s) of every shape, "
            "numbered from 0 to 1",
        ),
        (  # --repeats wins over the file: checked against what will run
            "repeats: 3\nprofile_repeat: 2\n",
            PROFILE,
            ("--repeats", "2"),
            "profile_repeat: 2 names no repeat",
        ),
        (
            "repeats: 2\nprofile_repeat: 0\n",
            "",
            (),
            "profile_repeat: 0, but nothing asks for a profile: set trainer.profile.steps",
        ),
        ("repeats: 2\nprofile_repeat: -1\n", PROFILE, (), "profile_repeat"),
    ],
)
def test_a_wrong_profile_repeat_is_one_line_and_submits_nothing(
    in_tmp: Path,
    capsys: pytest.CaptureFixture[str],
    extra: str,
    overrides: str,
    argv: tuple[str, ...],
    phrase: str,
) -> None:
    sweep = write_sweep(in_tmp, extra=extra, overrides=overrides)
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local", *argv)
    assert phrase in err


def test_the_dry_run_says_which_jobs_profile(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_sweep(
        in_tmp, extra="repeats: 3\nprofile_repeat: 0\norder_seed: 1\n", overrides=PROFILE
    )
    rc = sweep_cli("--config", str(sweep), "--executor", "local", "--dry-run")
    out = capsys.readouterr().out
    assert rc == 0
    assert_nothing_submitted(in_tmp)
    assert (
        "  profile       repeat 0 of every shape (round 1) profiles (trainer.profile.steps=5); "
        "the other repeats run with trainer.profile.steps=0"
    ) in out
    assert out.count("3 job(s), repeat 0 profiled") == 2  # each shape's line
    sweep = write_sweep(in_tmp, extra="repeats: 2\norder_seed: 1\n")
    assert sweep_cli("--config", str(sweep), "--executor", "local", "--dry-run") == 0
    plain = capsys.readouterr().out
    assert "profile" not in plain  # a sweep without a profile prints what it printed before
