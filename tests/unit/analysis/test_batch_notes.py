"""A user's module's record warnings about its batch (``batch.warnings``): said once per
series and scale in "Read this first" (the terminal, report.md, summary.json), with a word
where they put the speedup in doubt."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from analysis_helpers import make_result, summarize_main, write_log

from analysis.analyze import analyze
from analysis.read.frame import runs_frame
from analysis.read.parse import ParseResult, Run
from scalescope.record import ResultRecord

SAME = (
    "the 2 ranks' first training batches were identical: every rank may be training on the "
    "same data (shard the data set by rank)"
)


def passed(per_device: int) -> str:
    return (
        f"scalescope passed batch_size={per_device} to MultiData, but its training loader "
        f"yielded batches of {per_device * 3 // 2} at most (mean {per_device * 1.5:.4g}) per "
        "device: the record uses the measured batch"
    )


def _run(job: str, world: int, warnings: list[str], same: bool | None) -> ResultRecord:
    r = make_result(job, world=(1, world), train_time_s=10.0 / world, global_batch_size=96)
    batch: dict[str, Any] = {
        "per_device_max": 96 // world,
        "warnings": warnings,
        "data": {"iterable": True, "same_first_batch": same},
    }
    return dataclasses.replace(r, batch=batch)


def _records() -> list[ResultRecord]:
    return [
        _run("11", 1, [passed(64)], None),
        _run("12", 1, [passed(64)], None),
        _run("21", 2, [SAME, passed(32)], True),
        _run("22", 2, [SAME, passed(32)], True),
    ]


def _notes(records: list[ResultRecord]) -> list[str]:
    runs = runs_frame(ParseResult(runs=[Run(r, ("x",)) for r in records]))
    return [n for n in analyze(runs).notes if "warned" in n]


def test_each_scale_s_warnings_are_said_once_with_how_many_runs_gave_them() -> None:
    one, two = _notes(_records())
    assert one == f"spiral · strong · fp32 at 1x1: the job warned: {passed(64)} (2 of 2 runs)."
    assert two.startswith(
        f"spiral · strong · fp32 at 1x2: the job warned: {SAME} (2 of 2 runs); "
        f"{passed(32)} (2 of 2 runs). The speedup here is in doubt:"
    )


def test_only_ranks_that_may_share_their_data_put_the_speedup_in_doubt() -> None:
    one, two = _notes(_records())
    assert "in doubt" not in one and "in doubt" in two
    assert _notes([_run("11", 1, [], None), _run("21", 2, [], False)]) == []


def test_the_warnings_reach_the_terminal_the_report_and_the_summary_json(tmp_path: Path) -> None:
    for r in _records():
        write_log(tmp_path / "logs" / f"slurm-{r.identity.job_id}.out", r)
    proc = summarize_main(tmp_path / "logs", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "the job warned: the 2 ranks' first training batches" in " ".join(proc.stdout.split())
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "## Read this first" in report and report.count("the job warned") == 2
    doc = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert sum("the job warned" in n for n in doc["notes"]) == 2
    assert all("batch" not in row for row in doc["runs"])  # the section itself stays out
