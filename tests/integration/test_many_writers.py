"""Jobs finishing at once into one outputs/ folder, summarised while they write.

Real processes throughout: four ``python -m scalescope.train`` runs started together
(two of them sharing one job id, as requeued or re-submitted jobs do, so they race for the
same run directory), each printing its record into its own log, and summaries of the same
folder written by two ``python -m analysis.summarize`` processes at the same time.
No record may be lost and no summary may be half-written. (Four writers and two summarizers
already outnumber the machine's two cores; more only made the test slower.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from core_helpers import TINY, clean_env

from scalescope.record import ResultRecord, decode_line, read_result_json

JOBS = 4
SUMMARIZERS = 2


def _summarize(out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "analysis.summarize", str(out), "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )


@pytest.mark.timeout(900)
def test_jobs_finishing_at_once_lose_no_record(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    logs = out / "logs"
    logs.mkdir(parents=True)
    procs = []
    for i in range(JOBS):
        job_id = "shared-7" if i % 2 else f"job-{i}"  # jobs 1 and 3 race
        log = (logs / f"job-{i}.out").open("w")
        procs.append(
            (
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "scalescope.train",
                        *TINY,
                        "trainer.max_epochs=1",
                        "trainer.max_steps=8",
                        f"output_dir={out}",
                    ],
                    cwd=tmp_path,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=clean_env({"SCALESCOPE_JOB_ID": job_id}),
                ),
                log,
            )
        )
    # Summaries of the same folder while the jobs write, several at once.
    summaries: list[subprocess.Popen[str]] = []
    while any(p.poll() is None for p, _ in procs) and len(summaries) < 3 * SUMMARIZERS:
        if sum(s.poll() is None for s in summaries) < SUMMARIZERS:
            summaries.append(_summarize(out))
        time.sleep(1.0)
    for p, log in procs:
        log.close()
        assert p.wait() == 0, (logs / f"job-{procs.index((p, log))}.out").read_text()[-2000:]
    for s in summaries:
        _, err = s.communicate(timeout=300)
        assert s.returncode in (0, 1), err  # 1: some jobs had not finished yet

    # Every job left exactly one record in its log and one result.json in its own run dir.
    run_dirs = set()
    uuids = set()
    for i in range(JOBS):
        lines = (logs / f"job-{i}.out").read_text().splitlines()
        results = [e for e in map(decode_line, lines) if isinstance(e, ResultRecord)]
        assert len(results) == 1, f"job {i}: {len(results)} records"
        (result,) = results
        assert read_result_json(Path(result.identity.run_dir) / "result.json") == result
        run_dirs.add(result.identity.run_dir)
        uuids.add(result.identity.run_uuid)
    assert len(run_dirs) == JOBS and len(uuids) == JOBS

    # Several final summaries at once: each exits 0, the folder is whole, all runs in it.
    finals = [_summarize(out) for _ in range(SUMMARIZERS)]
    for s in finals:
        _, err = s.communicate(timeout=300)
        assert s.returncode == 0, err
    doc = json.loads((out / "summary" / "summary.json").read_text())
    assert len(doc["runs"]) == JOBS and not doc["failures"]
    assert {r["run_uuid"] for r in doc["runs"]} == uuids
    assert not [p for p in doc["problems"] if p["severity"] == "warning"], doc["problems"]
    assert (out / "summary" / "report.md").is_file()
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".summary.")]
    assert leftovers == [".summary.lock"], leftovers
