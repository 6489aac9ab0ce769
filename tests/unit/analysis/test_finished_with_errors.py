"""A job whose rank 0 wrote a complete record while another rank failed (submitit: one log
per task; the sweep's manifest says FAILED): the run is kept, as its record is complete,
and a warning names the log and the error, never silence."""

from __future__ import annotations

import json
from pathlib import Path

from analysis_helpers import make_result, start_of, write_log

from analysis import load_all
from analysis.read.parse import parse

PEER_CLOSED = [
    "[rank1]: Traceback (most recent call last):",
    '[rank1]:   File "/x/scalescope/train.py", line 9, in <module>',
    "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
    "closed by peer [127.0.0.1]:10895",
]
HARMLESS = [
    "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>",
    "Traceback (most recent call last):",
    '  File "torch/utils/data/dataloader.py", line 1477, in __del__',
    "AssertionError: can only test a child process",
]


def _job(folder: Path, job: str, rank1_err: list[str]) -> None:
    r = make_result(f"local-{job}", world=(1, 2), sweep_id="s1")
    write_log(folder / job / f"{job}_0_log.out", start_of(r), r)
    write_log(folder / job / f"{job}_0_log.err", *HARMLESS)
    write_log(folder / job / f"{job}_1_log.out", "submitit INFO - Starting with JobEnvironment")
    write_log(folder / job / f"{job}_1_log.err", *rank1_err)


def _manifest(folder: Path, states: dict[str, tuple[str, str | None]]) -> None:
    jobs = [
        {"job_id": job, "shape": "1x2", "repeat": 0, "state": state, "detail": detail}
        for job, (state, detail) in states.items()
    ]
    doc = {"sweep_id": "s1", "jobs": jobs, "argv": ["scalescope", "sweep"]}
    (folder / "sweep.json").write_text(json.dumps(doc), encoding="utf-8")


def test_another_ranks_error_in_a_finished_job_is_a_warning(tmp_path: Path) -> None:
    _job(tmp_path, "27844", PEER_CLOSED)
    runs, failures, problems = load_all(tmp_path, jobs=1)
    assert runs["job_id"].tolist() == ["local-27844"] and failures.empty
    (p,) = problems
    assert p.severity == "warning"
    assert p.file == f"{tmp_path.name}/27844/27844_1_log.err"
    assert p.message.startswith("job local-27844 finished and its record is kept, but ")
    assert "27844_1_log.err:3" in p.message and "connection closed by a peer" in p.message


def test_a_manifest_that_says_failed_is_a_warning(tmp_path: Path) -> None:
    _job(tmp_path, "27844", ["done"])
    _job(tmp_path, "27885", PEER_CLOSED)
    _job(tmp_path, "27890", ["done"])
    _manifest(
        tmp_path,
        {
            "27844": ("FAILED", "task 1: RuntimeError: boom"),
            "27885": ("FAILED", None),
            "27890": ("COMPLETED", None),
        },
    )
    runs, failures, problems = load_all(tmp_path, jobs=1)
    assert sorted(runs["job_id"]) == ["local-27844", "local-27885", "local-27890"]
    assert failures.empty
    by_file = {p.file: p for p in problems}
    assert set(by_file) == {
        f"{tmp_path.name}/sweep.json",
        f"{tmp_path.name}/27885/27885_1_log.err",
    }
    said = by_file[f"{tmp_path.name}/sweep.json"]
    assert said.severity == "warning"
    assert said.message == (
        "job local-27844 finished and its record is kept, but sweep.json says FAILED "
        "(task 1: RuntimeError: boom)"
    )
    both = by_file[f"{tmp_path.name}/27885/27885_1_log.err"].message
    assert "connection closed by a peer" in both and both.endswith("; sweep.json says FAILED")


def test_a_traceback_python_ignored_is_not_an_error(tmp_path: Path) -> None:
    """DataLoader workers' "Exception ignored in" tracebacks are printed by successful jobs."""
    _job(tmp_path, "27933", HARMLESS)
    runs, failures, problems = load_all(tmp_path, jobs=1)
    assert len(runs) == 1 and failures.empty and problems == []


def test_another_ranks_error_after_the_record_in_one_log_is_a_warning(tmp_path: Path) -> None:
    """srun: every rank prints to one log. Lines after rank 0's record are the ends of the
    other ranks."""
    r = make_result("7011", world=(1, 4))
    write_log(
        tmp_path / "slurm-7011.out",
        start_of(r),
        "0: Traceback (most recent call last):",  # before the record: not read
        "0: ValueError: not this one",
        r,
        "3: Traceback (most recent call last):",
        "3: RuntimeError: NCCL communicator was aborted on rank 3.",
        "srun: error: node1: task 3: Exited with exit code 1",
    )
    write_log(tmp_path / "slurm-7012.out", start_of(make_result("7012")), make_result("7012"))
    runs, failures, problems = load_all(tmp_path, jobs=1)
    assert sorted(runs["job_id"]) == ["7011", "7012"] and failures.empty
    (p,) = problems
    assert p.file == f"{tmp_path.name}/slurm-7011.out"
    assert "slurm-7011.out:6 says Python exception: RuntimeError: NCCL communicator" in p.message


PREEMPTED_5000 = (
    "slurmstepd: error: *** JOB 5000 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO PREEMPTION ***"
)


def _requeued(folder: Path, *err: str) -> None:
    """Job 5000, preempted once and requeued (submitit appends each attempt to its logs):
    its second attempt finished."""
    first, final = make_result("5000", restart_count=0), make_result("5000", restart_count=1)
    write_log(folder / "5000_0_log.out", start_of(first), start_of(final), final)
    write_log(folder / "5000_0_log.err", *err)


def test_an_earlier_attempts_end_is_a_restart_reason_not_a_warning(tmp_path: Path) -> None:
    _requeued(tmp_path, PREEMPTED_5000, "srun: error: n1: task 0: Terminated")
    result = parse([tmp_path], jobs=1)
    (run,) = result.runs
    assert run.restart_reasons == ("preempted",) and result.failures == []
    assert result.problems == []


def test_the_final_attempts_own_error_is_still_a_warning(tmp_path: Path) -> None:
    rank1 = ["Traceback (most recent call last):", "RuntimeError: rank 1 failed at the end"]
    _requeued(tmp_path, PREEMPTED_5000, "srun: error: n1: task 0: Terminated", *rank1)
    (p,) = parse([tmp_path], jobs=1).problems
    assert p.severity == "warning" and "5000_0_log.err:4 says Python exception" in p.message


def test_a_rank_logs_lines_before_its_last_attempt_started_are_not_a_warning(
    tmp_path: Path,
) -> None:
    """submitit prints "Starting with JobEnvironment" as each attempt of a task starts."""
    _requeued(tmp_path)
    starting = "submitit INFO (2026-01-01 00:00:00,000) - Starting with JobEnvironment(job_id=5000)"
    write_log(
        tmp_path / "5000_1_log.out",
        starting,
        "[rank1]: RuntimeError: Connection reset by peer",  # the first attempt's end
        starting,
        "submitit INFO (2026-01-01 01:00:00,000) - Job completed successfully",
    )
    assert parse([tmp_path], jobs=1).problems == []


MEMORY_NOTE = "slurmstepd: error: Exceeded step memory limit at some point."


def test_slurms_memory_limit_note_after_a_record_is_not_an_oom_kill(tmp_path: Path) -> None:
    """Slurm prints it at a step's end when the cgroup reached its limit at some point
    (page cache counts): the step may have ended well. A kill says "oom_kill event"."""
    r = make_result("7020", world=(1, 2))
    write_log(tmp_path / "slurm-7020.out", start_of(r), r, MEMORY_NOTE)
    runs, failures, problems = load_all(tmp_path, jobs=1)
    assert runs["job_id"].tolist() == ["7020"] and failures.empty
    assert [p.severity for p in problems] == ["info"]
    assert "OOM kill" not in problems[0].message
    assert "reached its memory limit" in problems[0].message


def test_a_line_belongs_to_its_attempt_or_to_none() -> None:
    """A line follows its attempt's start event in its file (``attempt``), or no start event
    (None: a log without events). Earlier attempts' lines are how they ended; the evidence of
    an attempt is its own lines and the untied ones, every line where it has none."""
    from analysis.read.failures.classify import Evidence
    from analysis.read.failures.finished import of_attempt, of_earlier_attempts

    lines = [
        Evidence("time_limit", "", "", "a.out", no, attempt=attempt)
        for no, attempt in enumerate([0, 1, None, 2], 1)
    ]
    assert [e.line_no for e in of_earlier_attempts(lines, 2)] == [1, 2]
    assert [e.line_no for e in of_attempt(lines, 1)] == [2, 3]
    assert of_attempt(lines[:2], 2) == lines[:2]
