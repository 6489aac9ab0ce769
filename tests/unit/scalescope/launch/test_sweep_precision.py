"""Precision as a sweep axis: every shape at every listed precision, interleaved by round."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sweep_helpers import assert_nothing_submitted, expect_error, plan_of, sweep_cli, write_sweep

from scalescope.launch.executor import Launcher

PRECISIONS = 'precisions: ["32", "bf16-mixed"]\n'


def test_jobs_are_shapes_x_precisions_x_repeats_interleaved_by_round(in_tmp: Path) -> None:
    sweep = write_sweep(
        in_tmp, shapes=((1, 1), (1, 2)), extra=PRECISIONS + "repeats: 3\norder_seed: 5\n"
    )
    plan = plan_of(sweep)
    assert plan.num_jobs == 12
    pairs = {(sp.shape.label, sp.precision) for sp in plan.shapes}
    assert pairs == {(s, p) for s in ("1x1", "1x2") for p in ("32", "bf16-mixed")}
    for sp in plan.shapes:  # the precision travels in each run's config
        assert sp.config.trainer.precision == sp.precision
        assert sp.label == f"{sp.shape.label}@{sp.precision}"
    order = plan.submission_order()
    rounds = [order[i : i + 4] for i in range(0, 12, 4)]
    for repeat, block in enumerate(rounds):
        assert {r for r, _ in block} == {repeat}
        assert {(sp.shape.label, sp.precision) for _, sp in block} == pairs
    # pairs are shuffled within rounds, reproducibly
    assert len({tuple(sp.label for _, sp in b) for b in rounds}) > 1
    assert [sp.label for _, sp in plan_of(sweep).submission_order()] == [
        sp.label for _, sp in order
    ]
    handles = Launcher(plan).handles()
    assert [(h.repeat, h.label) for h in handles] == [(r, sp.label) for r, sp in order]
    assert Counter(h.label for h in handles) == {
        label: 3 for label in (sp.label for sp in plan.shapes)
    }
    run = Launcher(plan)._run(handles[0])
    assert run.config["trainer"]["precision"] == handles[0].plan.precision
    # Two precisions of one shape are two Slurm job names, told apart in squeue.
    from scalescope.launch.executor import slurm_parameters

    names = {slurm_parameters(plan, sp)["job_name"] for sp in plan.shapes}
    assert len(names) == 4
    assert f"scalescope-{plan.name}-1x2@bf16-mixed" in names


@pytest.mark.parametrize(
    ("extra", "overrides", "phrase"),
    [
        (
            'precisions: ["32", "64"]\n',
            "",
            "precisions: expected a list of '32' or 'bf16-mixed' or '16-mixed'",
        ),
        ('precisions: ["32", "32"]\n', "", "precisions: 32 is listed twice"),
        ("precisions: []\n", "", "precisions: the list is empty"),
        ("precisions: 32\n", "", "precisions: expected a list"),
        (PRECISIONS, "  trainer.precision: bf16-mixed\n", "override trainer.precision"),
        (
            'precisions: ["32", "16-mixed"]\n',
            "",
            "shape 1x1 (world size 1) at precision 16-mixed: ",
        ),
    ],
)
def test_bad_precisions_are_one_line(
    in_tmp: Path,
    capsys: pytest.CaptureFixture[str],
    extra: str,
    overrides: str,
    phrase: str,
) -> None:
    sweep = write_sweep(in_tmp, extra=extra, overrides=overrides)
    err = expect_error(in_tmp, capsys, "--config", str(sweep), "--executor", "local")
    assert phrase in err


def test_dry_run_lists_every_shape_and_precision(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = write_sweep(in_tmp, extra=PRECISIONS + "repeats: 2\norder_seed: 2\n")
    rc = sweep_cli(
        "--config", str(sweep), "--executor", "local", "--dry-run", "--sweep-id", "t-dry"
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert_nothing_submitted(in_tmp)
    assert "jobs          8 (2 shapes x 2 precisions x 2 repeats)" in out
    for label in ("1x1@32", "1x1@bf16-mixed", "1x2@32", "1x2@bf16-mixed"):
        assert f"shape {label}: world size" in out
        assert out.count(f" {label}") >= 3  # its header, and once in each round's order
    assert "precision bf16-mixed, 2 job(s)" in out
    assert "order         round by round, (shape, precision) pairs shuffled (seed" in out
