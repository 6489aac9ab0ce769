"""The runs frame (analysis.read.frame): its columns typed with units; no run leaves the
statistics quietly (one the groups cannot count is a problem row); a batch that does not follow
its declared scaling mode is a problem row too."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from analysis_helpers import make_result, summarize_main, write_log

from analysis import load_all
from analysis.compute.metrics import group_stats
from analysis.read.frame import MEASURED_COLUMNS, scaling_mismatches


def test_run_without_a_finite_time_is_a_problem_not_silently_uncounted(tmp_path: Path) -> None:
    write_log(tmp_path / "slurm-1.out", make_result("1", world=(1, 1)))
    write_log(tmp_path / "slurm-3.out", make_result("3", world=(1, 2)))
    # a clock that failed: the job wrote NaN, which a record carries as null
    write_log(
        tmp_path / "slurm-2.out", replace(make_result("2", world=(1, 2)), train_time_s=math.nan)
    )
    write_log(
        tmp_path / "slurm-4.out",
        replace(make_result("4", world=(1, 4)), train_time_s=math.inf, job_time_s=math.nan),
    )
    runs, _, problems = load_all(tmp_path, jobs=1)
    assert sorted(runs["job_id"]) == ["1", "2", "3", "4"]  # every run is listed
    messages = {Path(p.file).name: p.message for p in problems}
    assert messages == {
        "slurm-2.out": "run 2.r0: no finite value for train_time_s; it is listed with the runs "
        "but left out of these statistics of its group (n counts finite values only)",
        "slurm-4.out": "run 4.r0: no finite value for train_time_s, job_time_s; it is listed "
        "with the runs but left out of these statistics of its group (n counts finite values "
        "only)",
    }
    groups = group_stats(runs)
    assert groups.set_index("world_size")["n"].to_dict() == {1: 1, 2: 1, 4: 0}

    proc = summarize_main(tmp_path, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    assert "slurm-2.out: run 2.r0: no finite value for train_time_s" in proc.stderr
    assert "nanx" not in proc.stdout


def test_measured_columns_follow_the_record_schema() -> None:
    # the scale and the headline times are required fields; optional ones (val loss) are not
    assert {"world_size", "nodes", "train_time_s", "job_time_s", "samples_per_s"} <= set(
        MEASURED_COLUMNS
    )
    assert "val_loss_final" not in MEASURED_COLUMNS


def test_frame_columns_are_typed_with_units(tmp_path: Path) -> None:
    r = make_result("80", world=(2, 4))
    write_log(tmp_path / "slurm-80.out", r)
    runs, failures, _ = load_all(tmp_path)
    assert str(runs["world_size"].dtype) == "Int64"
    assert runs["train_time_s"].dtype == "float64"
    assert str(runs["started_at"].dtype).startswith("datetime64")
    assert runs["version_torch"].iloc[0] == "2.13.0+cpu"
    assert {"samples_per_s", "job_time_s", "peak_host_rss_gib_max"} <= set(runs.columns)
    assert failures.empty and "reason" in failures.columns


def _runs(mode: str, batches: list[tuple[int, int, int]]) -> pd.DataFrame:
    """One row per run: (world size, per-device batch, global batch), one series otherwise."""
    rows = []
    for world, per_device, global_ in batches:
        rows.append(
            {
                "config_name": "demo",
                "workload": "m:M",
                "scaling_mode": mode,
                "precision": "32",
                "accumulate_grad_batches": 1,
                "accelerator": "cpu",
                "held_batch_size": per_device if mode == "weak" else global_,
                "epochs": 2,
                "workload_params": "{}",
                "device_name": "cpu",
                "cluster": "local",
                "world_size": world,
                "per_device_batch_size": per_device,
                "global_batch_size": global_,
                "sources": f"logs/{world}.out",
            }
        )
    return pd.DataFrame(rows)


def test_strong_scaling_with_a_constant_per_device_batch_is_a_problem_row() -> None:
    (problem,) = scaling_mismatches(_runs("strong", [(1, 1, 1), (2, 1, 2), (2, 1, 2)]))
    assert "declared strong scaling, but the per-device batch recorded is 1" in problem.message
    assert "that is weak scaling" in problem.message and problem.file == "logs/1.out"


def test_weak_scaling_with_a_constant_global_batch_is_a_problem_row() -> None:
    (problem,) = scaling_mismatches(_runs("weak", [(1, 64, 64), (2, 32, 64)]))
    assert "that is strong scaling" in problem.message


@pytest.mark.parametrize(
    ("mode", "batches"),
    [
        ("strong", [(1, 64, 64), (2, 32, 64)]),  # as declared
        ("weak", [(1, 32, 32), (2, 32, 64)]),  # as declared
        ("strong", [(2, 1, 2), (2, 1, 2)]),  # one world size: nothing to compare
    ],
)
def test_batches_that_follow_their_mode_raise_nothing(
    mode: str, batches: list[tuple[int, int, int]]
) -> None:
    assert scaling_mismatches(_runs(mode, batches)) == []


def _user_batch(per_device_max: int, mean: float) -> dict[str, object]:
    return {"per_device_max": per_device_max, "per_device_mean": mean, "warnings": []}


def test_a_record_that_rounded_a_short_last_batch_into_its_batch_keys_on_the_full_one(
    tmp_path: Path,
) -> None:
    # records made when the identity held the rounded mean: 1010 samples in batches of 64 on
    # one rank (mean 63.1, recorded 63) and of 32 on each of two (mean 31.6, recorded 32)
    one = make_result("1", world=(1, 1), global_batch_size=63)
    two = make_result("2", world=(1, 2), global_batch_size=64)
    write_log(tmp_path / "slurm-1.out", replace(one, batch=_user_batch(64, 1010 / 16)))
    write_log(tmp_path / "slurm-2.out", replace(two, batch=_user_batch(32, 1010 / 32)))
    runs, _, _ = load_all(tmp_path, jobs=1)
    by_world = runs.set_index("world_size")
    assert by_world["held_batch_size"].to_dict() == {1: 64, 2: 64}  # one series
    assert by_world["global_batch_size"].to_dict() == {1: 64, 2: 64}
    assert by_world["per_device_batch_size"].to_dict() == {1: 64, 2: 32}


def _trained(job: str, world: tuple[int, int], epochs: int, **trainer: Any) -> Any:
    """A run of one config (trainer.max_epochs 10 unless ``trainer`` says) that trained
    ``epochs``: fewer than set where the module stopped itself or a step budget ended it."""
    r = make_result(job, world=world, epochs=epochs, train_time_s=10.0 * epochs)
    return replace(r, config={"trainer": {"max_epochs": 10, "max_steps": None, **trainer}})


def _series(tmp_path: Path, *records: Any) -> dict[str, list[str]]:
    for r in records:
        write_log(tmp_path / f"slurm-{r.identity.job_id}.out", r)
    runs, _, _ = load_all(tmp_path)
    groups = group_stats(runs)
    return {
        str(s): sorted(
            f"{n}x{d}" for n, d in zip(part["nodes"], part["devices_per_node"], strict=True)
        )
        for s, part in groups.groupby("series", sort=True)
    }


def test_runs_that_trained_fewer_epochs_than_set_stay_in_their_configs_series(
    tmp_path: Path,
) -> None:
    """A module's early stop (EarlyStopping) ends its runs at different epochs, a shape or a
    repeat at a time: before, each epoch count was a series of its own, and the 1x2 run had
    no 1-device baseline. The series is the config's (the epochs it was set to train)."""
    got = _series(
        tmp_path,
        _trained("1", (1, 1), epochs=2),
        _trained("2", (1, 2), epochs=3),
        _trained("3", (1, 2), epochs=4),
    )
    assert list(got.values()) == [["1x1", "1x2"]], got
    runs, _, _ = load_all(tmp_path)
    # each run's own epochs are kept as it trained them
    assert sorted(runs["epochs"].tolist()) == [2, 3, 4]
    assert set(runs["planned_epochs"].tolist()) == {10}


def test_configs_set_to_train_differently_are_still_apart(tmp_path: Path) -> None:
    """Another epoch count set, or another step budget, is another configuration."""
    got = _series(
        tmp_path,
        _trained("1", (1, 1), epochs=4, max_epochs=4),
        _trained("2", (1, 1), epochs=8, max_epochs=8),
        _trained("3", (1, 1), epochs=1, max_steps=30),
        _trained("4", (1, 1), epochs=2, max_steps=60),
    )
    assert len(got) == 4, got


def test_a_record_without_its_config_keys_on_the_epochs_it_trained(tmp_path: Path) -> None:
    old = [replace(_trained(str(i), (1, 1), epochs=e), config={}) for i, e in ((1, 2), (2, 3))]
    assert len(_series(tmp_path, *old)) == 2


def test_runs_their_module_stopped_are_said_to_be(tmp_path: Path) -> None:
    """The early-stopped runs of one config: one note per scale, with the epochs set and those
    trained; none for a run that trained what was set, or that reached its step budget."""
    from analysis.analyze import analyze

    records = [
        _trained("1", (1, 1), epochs=2),
        _trained("2", (1, 2), epochs=3),
        _trained("3", (1, 2), epochs=10),
        # a step budget that ends training before the epochs set is not the module's stop
        replace(_trained("4", (1, 1), epochs=1, max_steps=30), steps=30),
    ]
    for r in records:
        write_log(tmp_path / f"slurm-{r.identity.job_id}.out", r)
    runs, _, _ = load_all(tmp_path)
    notes = [n for n in analyze(runs).notes if "stopped itself" in n]
    assert len(notes) == 2, notes
    assert "at 1x1: 1 of 1 run(s) stopped before the 10 epochs set, after 2" in notes[0]
    assert "at 1x2: 1 of 2 run(s) stopped before the 10 epochs set, after 3" in notes[1]
