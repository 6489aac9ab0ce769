"""No run leaves the statistics quietly: one the groups cannot count is a problem row."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from analysis_helpers import make_result, summarize_main, write_log

from analysis import load_all
from analysis.compute.metrics import group_stats
from analysis.read.frame import MEASURED_COLUMNS


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
