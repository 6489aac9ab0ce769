"""sweep.json: every job a sweep planned is in the summary, finished or not."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis_helpers import make_result, start_of, summarize_main, write_log

from analysis import load_all


def _entry(job_id: str | None, shape: str, repeat: int, folder: Path, **extra: Any) -> dict:
    """A job entry as scalescope.launch.sweep.manifest writes it (plus keys a newer one may add)."""
    nodes, dpn = (int(x) for x in shape.split("x"))
    log = None if job_id is None else folder / job_id / f"{job_id}_0_log"
    return {
        "job_id": job_id,
        "shape": shape,
        "nodes": nodes,
        "devices_per_node": dpn,
        "world_size": nodes * dpn,
        "repeat": repeat,
        "state": extra.pop("state", "COMPLETED"),
        "detail": None,
        "elapsed_s": extra.pop("elapsed_s", 12.5),
        "stdout": None if log is None else f"{log}.out",
        "stderr": None if log is None else f"{log}.err",
        **extra,
    }


def _manifest(folder: Path, jobs: list[dict]) -> Path:
    path = folder / "sweep.json"
    doc = {
        "sweep_id": "s1",
        "name": "local",
        "executor": "local",
        "profile": None,
        "repeats": 1,
        "shapes": [],
        "jobs": jobs,
        "updated_at": "2025-03-01T10:00:00+00:00",
        "argv": ["scalescope", "sweep"],
    }
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path


def test_every_planned_job_is_a_run_or_a_failure_row(tmp_path: Path) -> None:
    sweep = tmp_path / "sweeps" / "s1"
    done = make_result("101", world=(1, 1), sweep_id="s1")  # the sweep's own job
    write_log(sweep / "101" / "101_0_log.out", start_of(done), done)
    # submitted, its log exists but the job died before printing anything of ours
    write_log(sweep / "102" / "102_0_log.out", "submitit INFO - Starting with JobEnvironment")
    _manifest(
        sweep,
        [
            _entry("101", "1x1", 0, sweep, round=0, order=3, cluster="local", repeat_index=0),
            _entry("102", "1x2", 0, sweep, state="FAILED", round=0, order=1, cluster="local"),
            _entry("103", "1x2", 1, sweep, state="COMPLETED"),  # its folder was deleted
            _entry(None, "2x1", 0, sweep, state="PENDING"),  # the sweep stopped before it
            _entry("104", "2x1", 1, sweep, state="PENDING", elapsed_s=None),  # still queued
        ],
    )
    runs, failures, problems = load_all(tmp_path, jobs=1)
    assert runs["job_id"].tolist() == ["101"]
    rows = {r["job_id"]: r for r in failures.to_dict("records")}
    assert set(rows) == {"102", "103", "104", "not submitted"}
    assert rows["102"]["reason"] == "never_started"
    assert rows["102"]["reason_label"] == "never started"
    assert rows["102"]["detail"] == (
        f"no start event in {sweep}/102/102_0_log.out; sweep.json says FAILED"
    )
    assert (rows["102"]["nodes"], rows["102"]["devices_per_node"]) == (1, 2)
    assert rows["103"]["reason"] == "log_missing"
    assert rows["103"]["detail"] == (
        f"expected at {sweep}/103/103_0_log.out; sweep.json says COMPLETED"
    )
    assert (rows["104"]["reason"], rows["104"]["detail"]) == (
        "never_started",
        f"no log at {sweep}/104/104_0_log.out; sweep.json says PENDING",
    )
    unsubmitted = rows["not submitted"]
    assert unsubmitted["reason"] == "never_started"
    assert unsubmitted["detail"] == "the sweep ended before its turn; sweep.json says PENDING"
    assert unsubmitted["repeat_index"] == 0
    assert (unsubmitted["world_size"], unsubmitted["nodes"], unsubmitted["sweep_id"]) == (
        2,
        2,
        "s1",
    )
    assert all(p.severity == "info" for p in problems)

    proc = summarize_main(tmp_path, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    assert "| 103 |" in proc.stdout and "log missing" in proc.stdout


def test_manifest_logs_outside_the_inputs_are_read(tmp_path: Path) -> None:
    logs, summary_input = tmp_path / "scratch", tmp_path / "results"
    summary_input.mkdir()
    started = make_result("201", sweep_id="s1")
    write_log(logs / "201" / "201_0_log.out", start_of(started))
    _manifest(summary_input, [_entry("201", "1x1", 0, logs, state="RUNNING")])
    _, failures, _ = load_all(summary_input, jobs=1)
    (row,) = failures.to_dict("records")
    # the start event says which configuration it was: not "never started"
    assert (row["job_id"], row["reason"], row["config_name"]) == ("201", "unknown", "spiral")


def test_broken_manifest_is_a_problem_and_the_logs_are_still_summarised(tmp_path: Path) -> None:
    done = make_result("301")
    write_log(tmp_path / "slurm-301.out", done)
    text = json.dumps({"sweep_id": "s", "jobs": [_entry("301", "1x1", 0, tmp_path)]})
    (tmp_path / "sweep.json").write_text(text[: len(text) // 2], encoding="utf-8")
    bad_shape = tmp_path / "other" / "sweep.json"
    bad_shape.parent.mkdir()
    bad_shape.write_text(json.dumps({"sweep_id": "t", "jobs": {"301": {}}}), encoding="utf-8")
    runs, failures, problems = load_all(tmp_path, jobs=1)
    assert runs["job_id"].tolist() == ["301"] and failures.empty
    by_file = {Path(p.file).relative_to(tmp_path.name).as_posix(): p for p in problems}
    assert set(by_file) == {"sweep.json", "other/sweep.json"}
    assert by_file["sweep.json"].message.startswith(
        "not a readable sweep manifest: invalid JSON (Unterminated string"
    )
    assert by_file["sweep.json"].message.endswith("; the logs are still summarised")
    assert by_file["other/sweep.json"].message == (
        "not a readable sweep manifest: 'jobs' is not a list; the logs are still summarised"
    )

    proc = summarize_main(tmp_path, "--no-write")
    assert proc.returncode == 0, proc.stderr
    assert "sweep.json: not a readable sweep manifest: invalid JSON" in proc.stderr


def test_mistyped_entry_names_its_key(tmp_path: Path) -> None:
    _manifest(tmp_path, [{**_entry("401", "1x1", 0, tmp_path), "repeat": "first"}])
    write_log(tmp_path / "slurm-401.out", make_result("401"))
    *_, problems = load_all(tmp_path, jobs=1)
    (problem,) = problems
    assert "jobs[0].repeat is not an integer" in problem.message


def test_the_sweeps_command_line_is_kept_to_profile_it_again(tmp_path: Path) -> None:
    """The manifest's argv, ready to rerun (the executable by name, no --sweep-id, no
    --dry-run), reaches every run of that sweep and the compute advice's profile command."""
    from analysis.read.manifest import sweep_command

    argv = ["/opt/venv/bin/scalescope", "sweep", "--config", "my sweeps/a.yaml", "--wait"]
    argv += ["--sweep-id", "s1", "--dry-run", "trainer.max_epochs=1"]
    assert sweep_command(argv) == (
        "scalescope sweep --config 'my sweeps/a.yaml' --wait trainer.max_epochs=1"
    )
    assert sweep_command(["python", "train.py"]) is None and sweep_command("x") is None
    sweep = tmp_path / "sweeps" / "s1"
    done = make_result("101", world=(1, 1))
    done = replace(done, identity=replace(done.identity, sweep_id="s1"))
    write_log(sweep / "101" / "101_0_log.out", start_of(done), done)
    path = _manifest(sweep, [_entry("101", "1x1", 0, sweep)])
    doc = json.loads(path.read_text())
    doc["argv"] = argv
    path.write_text(json.dumps(doc))
    loaded = load_all(tmp_path)
    assert loaded.runs["sweep_command"].tolist() == [sweep_command(argv)]


def _sweep_manifest(folder: Path, sweep_id: str, jobs: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"sweep_id": sweep_id, "jobs": jobs, "argv": ["scalescope", "sweep"]}
    (folder / "sweep.json").write_text(json.dumps(doc), encoding="utf-8")


def test_a_manifest_speaks_for_its_own_sweeps_job_only(tmp_path: Path) -> None:
    """Job ids start again on another cluster, or after a reinstalled controller: sweepA's
    job 1234, whose log is gone, is not sweepB's job 1234 that finished."""
    _sweep_manifest(
        tmp_path / "sweepA",
        "sweepA",
        [_entry("1234", "1x1", 0, tmp_path / "sweepA", state="FAILED")],
    )
    done = make_result("1234", sweep_id="sweepB")
    write_log(tmp_path / "sweepB" / "slurm-1234.out", start_of(done), done)
    runs, failures, problems = load_all(tmp_path, jobs=1)
    assert runs["job_id"].tolist() == ["1234"]
    rows = failures.to_dict("records")
    assert [(r["job_id"], r["reason"], r["sweep_id"]) for r in rows] == [
        ("1234", "log_missing", "sweepA")
    ]
    assert not [p for p in problems if "finished and its record is kept" in p.message]


def test_two_manifests_listing_one_job_id_are_two_jobs(tmp_path: Path) -> None:
    for sweep in ("sweepA", "sweepB"):
        _sweep_manifest(tmp_path / sweep, sweep, [_entry("1234", "1x1", 0, tmp_path / sweep)])
    _, failures, _ = load_all(tmp_path, jobs=1)
    rows = failures.to_dict("records")
    assert sorted((r["job_id"], r["reason"], r["sweep_id"]) for r in rows) == [
        ("1234", "log_missing", "sweepA"),
        ("1234", "log_missing", "sweepB"),
    ]
