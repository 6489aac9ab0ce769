"""A job that left no record keeps its shape (from sweep.json, else its sbatch log's first
line) and its cause, each said once; a user's Ctrl-C is "interrupted", not a crash."""

from __future__ import annotations

import json
from pathlib import Path

from analysis_helpers import make_result, start_of, summarize_main, write_log

from analysis import load_all
from analysis.read.failures.collect import scan_lines

INTERRUPTED_TRACEBACK = [
    "submitit INFO - Starting with JobEnvironment",
    "Traceback (most recent call last):",
    '  File "/x/scalescope/train.py", line 9, in <module>',
    "    main()",
    "KeyboardInterrupt",
]


def _entry(job_id: str | None, shape: str, repeat: int, folder: Path, state: str) -> dict:
    nodes, dpn = (int(x) for x in shape.split("x"))
    log = None if job_id is None else folder / job_id / f"{job_id}_0_log"
    return {
        "job_id": job_id,
        "shape": shape,
        "nodes": nodes,
        "devices_per_node": dpn,
        "world_size": nodes * dpn,
        "repeat": repeat,
        "state": state,
        "detail": None,
        "elapsed_s": None if job_id is None else 3.0,
        "stdout": None if log is None else f"{log}.out",
        "stderr": None if log is None else f"{log}.err",
    }


def _sweep(folder: Path) -> Path:
    sweep = folder / "sweeps" / "s1"
    done = make_result("101", world=(1, 1), sweep_id="s1")
    write_log(sweep / "101" / "101_0_log.out", start_of(done), done)
    # stopped with Ctrl-C while starting: a traceback, no start event
    write_log(sweep / "201" / "201_0_log.out", "submitit INFO - Starting")
    write_log(sweep / "201" / "201_0_log.err", *INTERRUPTED_TRACEBACK)
    doc = {
        "sweep_id": "s1",
        "name": "local",
        "executor": "local",
        "jobs": [
            _entry("101", "1x1", 0, sweep, "COMPLETED"),
            _entry("201", "1x2", 1, sweep, "FAILED"),
            _entry(None, "2x1", 0, sweep, "PENDING"),
        ],
        "argv": ["scalescope", "sweep"],
    }
    (sweep / "sweep.json").write_text(json.dumps(doc), encoding="utf-8")
    return sweep


def _sbatch_log(folder: Path) -> Path:
    return write_log(
        folder / "slurm-301.out",
        "scalescope job 301: 2 node(s) (n[1-2]), 1 task(s) per node, world size 2, GPUs per node 0",
        "  config configs/spiral.yaml, profile configs/clusters/local.yaml, overrides: ",
        "srun: error: n2: task 1: Exited with exit code 1",
    )


def test_a_users_interrupt_is_interrupted_not_a_crash() -> None:
    (ev,) = scan_lines(enumerate(INTERRUPTED_TRACEBACK, 1), "x.err")
    assert (ev.code, ev.label) == ("interrupted", "interrupted")
    (said,) = scan_lines([(1, "scalescope train: interrupted")], "x.err")
    assert said.code == "interrupted"
    (other,) = scan_lines([(1, "Traceback (most recent call last):"), (2, "ValueError: x")], "y")
    assert other.code == "exception"


def test_jobs_without_a_record_keep_their_shape_and_say_their_cause_once(tmp_path: Path) -> None:
    _sweep(tmp_path)
    _sbatch_log(tmp_path)
    _, failures, _ = load_all(tmp_path, jobs=1)
    rows = {r["job_id"]: r for r in failures.to_dict("records")}
    assert set(rows) == {"201", "301", "not submitted"}
    shapes = {k: (r["nodes"], r["devices_per_node"], r["reason"]) for k, r in rows.items()}
    assert shapes == {
        "201": (1, 2, "interrupted"),
        "301": (2, 1, "exit_code"),
        "not submitted": (2, 1, "never_started"),
    }
    proc = summarize_main(tmp_path, "--no-write")
    assert proc.returncode == 0, proc.stderr
    lines = {
        line.split()[1]: line.strip()
        for line in proc.stdout.splitlines()
        if line.strip().startswith("•") and ("201" in line or "301" in line or "not sub" in line)
    }
    assert lines["201"].startswith("• 201 (shape 1x2 repeat 1): interrupted: KeyboardInterrupt")
    assert lines["301"].startswith("• 301 (shape 2x1): task exit code")
    assert lines["not"] == (
        "• not submitted (shape 2x1 repeat 0): never started: the sweep ended before its turn; "
        "sweep.json says PENDING"
    )
    for line in lines.values():
        assert "unknown" not in line
        for phrase in ("never started", "not submitted", "interrupted", "shape"):
            assert line.count(phrase) <= 1, line
