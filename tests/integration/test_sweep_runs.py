"""A real local sweep end to end, and Ctrl-C in the middle of one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from core_helpers import default_sigint
from sweep_helpers import (
    sweep_cli,
    write_sweep,
)

from scalescope.job.clocks.timing import READY_LINE
from scalescope.record import ResultRecord, decode_line


def records_in(log: Path) -> list[Any]:
    events = []
    for line in log.read_text(errors="replace").splitlines():
        event = decode_line(line)
        if event is not None:
            events.append(event)
    return events


@pytest.mark.timeout(600)
def test_local_sweep_end_to_end(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = write_sweep(in_tmp, shapes=((1, 1), (1, 2)), extra="repeats: 1\norder_seed: 1\n")
    rc = sweep_cli(
        "--config",
        str(sweep),
        "--executor",
        "local",
        "--sweep-id",
        "e2e",
        "trainer.max_epochs=1",
        "workload.num_samples=1000",
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    sweep_dir = in_tmp / "outputs" / "sweeps" / "e2e"
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    jobs = manifest["jobs"]
    assert [j["state"] for j in jobs] == ["COMPLETED", "COMPLETED"], out
    world_sizes = []
    uuids: list[str | None] = []
    for job in jobs:
        results = [e for e in records_in(Path(job["stdout"])) if isinstance(e, ResultRecord)]
        assert len(results) == 1, f"job {job['job_id']}: {len(results)} result records"
        (result,) = results
        assert result.identity.sweep_id == "e2e"
        assert result.identity.launcher == "submitit-local"
        assert result.identity.world_size == job["world_size"]
        # The plan travels into the job and comes back in the record.
        assert result.identity.repeat_index == job["repeat"] == 0
        assert result.identity.cluster == job["cluster"] == "local"
        assert result.identity.run_uuid and len(result.identity.run_uuid) == 32
        assert Path(result.identity.run_dir, "result.json").is_file()
        world_sizes.append(result.identity.world_size)
        uuids.append(result.identity.run_uuid)
    assert world_sizes == [1, 2]
    assert manifest["order_seed"] == 1 and [j["order"] for j in jobs] == [0, 1]
    assert len({r for r in uuids}) == 2
    # Other ranks print no record.
    rank1_logs = list(sweep_dir.glob("*/*_1_log.out"))
    assert len(rank1_logs) == 1 and not records_in(rank1_logs[0])


def _sweep_processes(marker: str) -> list[int]:
    """Processes whose command line mentions ``marker`` (the sweep's folder)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


@pytest.mark.timeout(600)
def test_ctrl_c_stops_a_local_sweep_and_keeps_finished_results(tmp_path: Path) -> None:
    # The 1-process job finishes; SIGINT arrives once both ranks of the 2-process job have
    # met (a moment chosen by an event, not a clock). Its 420 steps sleep 10 ms each, so it
    # still trains seconds later, however busy the machine: the signal cannot come too late.
    # order_seed 1 runs 1x1 first, then 1x2.
    sweep = write_sweep(tmp_path, shapes=((1, 1), (1, 2)), extra="repeats: 1\norder_seed: 1\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "scalescope.cli",
            "sweep",
            "--config",
            str(sweep),
            "--executor",
            "local",
            "--sweep-id",
            "ctrl-c",
            "trainer.max_epochs=60",
            "workload.num_samples=2000",
            "faults.step_sleep_s=0.01",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=default_sigint,
    )
    sweep_dir = tmp_path / "outputs" / "sweeps" / "ctrl-c"
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            if "shape 1x2  repeat 0  RUNNING" in line:
                break
        else:
            pytest.fail("the sweep ended before the second job started:\n" + "".join(lines))
        assert any("shape 1x1  repeat 0  COMPLETED" in ln for ln in lines), "".join(lines)
        job_id = lines[-1].split()[0]
        log = sweep_dir / job_id / f"{job_id}_0_log.out"
        deadline = time.monotonic() + 120
        while not (log.exists() and READY_LINE in log.read_text(errors="replace")):
            assert time.monotonic() < deadline, "the second job's ranks never met"
            time.sleep(0.2)
        # Both ranks have met and train.
        assert len(_sweep_processes(str(sweep_dir))) >= 3  # controller and two tasks
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines) + rest
    assert proc.returncode == 130, out
    interrupted = [ln for ln in out.splitlines() if ln.startswith("interrupted:")]
    assert len(interrupted) == 1, out
    assert f"cancelled {job_id} (1x2 repeat 0)" in interrupted[0], out
    assert f"summarise them: python -m analysis.summarize {sweep_dir}" in out.splitlines(), out
    assert _sweep_processes(str(sweep_dir)) == [], "processes of the sweep survived"

    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    states = {j["shape"]: j["state"] for j in manifest["jobs"]}
    assert states == {"1x1": "COMPLETED", "1x2": "CANCELLED"}
    first = next(j for j in manifest["jobs"] if j["shape"] == "1x1")
    results = [e for e in records_in(Path(first["stdout"])) if isinstance(e, ResultRecord)]
    assert len(results) == 1 and results[0].identity.world_size == 1
    assert Path(results[0].identity.run_dir, "result.json").is_file()
