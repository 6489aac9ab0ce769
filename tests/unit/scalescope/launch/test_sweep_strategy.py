"""Strategy as a sweep axis: every shape under DDP, FSDP and HSDP, one series each."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_helpers import assert_nothing_submitted, expect_error, plan_of, sweep_cli, write_sweep

STRATEGIES = "strategies: [ddp, fsdp]\n"


def test_every_shape_runs_under_each_strategy_labelled_by_it(in_tmp: Path) -> None:
    sweep = write_sweep(in_tmp, shapes=((1, 1), (1, 2)), extra=STRATEGIES + "repeats: 2\n")
    plan = plan_of(sweep)
    assert plan.num_jobs == 8
    pairs = {(sp.shape.label, sp.strategy) for sp in plan.shapes}
    assert pairs == {(s, k) for s in ("1x1", "1x2") for k in ("ddp", "fsdp")}
    for sp in plan.shapes:  # the strategy travels in each run's config
        assert sp.config.trainer.strategy == sp.strategy
        assert sp.label == f"{sp.shape.label}@{sp.strategy}"


def test_without_the_list_labels_stay_as_they_were(in_tmp: Path) -> None:
    plan = plan_of(write_sweep(in_tmp, shapes=((1, 2),)))
    assert [sp.label for sp in plan.shapes] == ["1x2"]
    assert plan.shapes[0].strategy == "ddp"


@pytest.mark.parametrize(
    ("extra", "overrides", "phrase"),
    [
        (
            "strategies: [ddp, zero]\n",
            "",
            "strategies: expected a list of 'ddp' or 'fsdp' or 'hsdp'",
        ),
        ("strategies: [fsdp, fsdp]\n", "", "strategies: fsdp is listed twice"),
        ("strategies: []\n", "", "strategies: the list is empty"),
        (STRATEGIES, "  trainer.strategy: fsdp\n", "override trainer.strategy"),
        (
            'strategies: [fsdp]\nprecisions: ["32", "16-mixed"]\n',
            "",
            "trainer.precision: 16-mixed is not run with strategy fsdp",
        ),
    ],
)
def test_bad_strategies_are_one_line(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], extra: str, overrides: str, phrase: str
) -> None:
    sweep = write_sweep(in_tmp, extra=extra, overrides=overrides)
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert phrase in err
    if "16-mixed" in phrase:  # the plan entry that was refused is named
        assert "at precision 16-mixed under fsdp: " in err


def test_hsdp_is_an_axis_beside_ddp_and_fsdp_its_shard_group_a_node(in_tmp: Path) -> None:
    sweep = write_sweep(
        in_tmp, shapes=((1, 1), (1, 2)), extra="strategies: [ddp, fsdp, hsdp]\nrepeats: 1\n"
    )
    plan = plan_of(sweep)
    assert {(sp.shape.label, sp.strategy) for sp in plan.shapes} == {
        (s, k) for s in ("1x1", "1x2") for k in ("ddp", "fsdp", "hsdp")
    }
    for sp in plan.shapes:
        assert sp.config.trainer.strategy == sp.strategy


def test_a_shard_size_that_does_not_divide_a_shape_is_refused_before_submission(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_sweep(
        in_tmp,
        shapes=((1, 2),),
        extra="strategies: [hsdp]\n",
        overrides="  fsdp.shard_size: 3\n",
    )
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert "shape 1x2 (world size 2) under hsdp: fsdp.shard_size: 3 ranks per shard group" in err
    assert "does not divide the world of 2 ranks" in err


def test_dry_run_names_the_strategy_axis(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, extra=STRATEGIES + "repeats: 1\norder_seed: 2\n")
    rc = sweep_cli("--config", str(sweep), "--executor", "local", "--dry-run", "--sweep-id", "d")
    out = capsys.readouterr().out
    assert rc == 0
    assert_nothing_submitted(in_tmp)
    assert "(2 shapes x 2 strategies x 1 repeats)" in out
    assert "shape 1x2@fsdp: world size 2" in out and ", strategy fsdp, 1 job(s)" in out
    assert "(shape, strategy) pairs shuffled" in out
