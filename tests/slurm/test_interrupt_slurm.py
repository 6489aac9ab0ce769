"""Ctrl-C during ``scalescope sweep --wait`` on the local cluster, after the first job ended
but before the sweep's next poll: the jobs stay on Slurm, and what the sweep then says and
writes comes from squeue and scontrol at that moment, so the job that completed is neither
listed to scancel nor left RUNNING in sweep.json."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from slurm_helpers import REPO, sweep_argv, wait_for_job

from scalescope import cli
from scalescope.launch import sweep as sweep_module

SWEEP = f"""\
name: ctrlc
train_config: {REPO / "configs" / "spiral.yaml"}
overrides:
  trainer.accelerator: cpu
  trainer.max_epochs: 1
  workload.num_samples: 1000
  tracking.mode: "off"
shapes:
  - {{nodes: 1, devices_per_node: 1}}
repeats: 2
timeout_min: 10
"""


def _job_ids(manifest: Path, timeout_s: float) -> list[str]:
    """The sweep's job ids in submission order, once sweep.json has them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if manifest.exists():
            jobs = sorted(json.loads(manifest.read_text())["jobs"], key=lambda j: j["order"])
            if jobs and all(j["job_id"] for j in jobs):
                return [j["job_id"] for j in jobs]
        time.sleep(0.2)
    raise AssertionError(f"no job ids in {manifest} after {timeout_s:.0f} s")


@pytest.mark.timeout(600)
def test_ctrl_c_after_a_job_ended_lists_only_the_jobs_still_on_slurm(
    slurm_cluster: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    # One poll right after the submission, then none before the Ctrl-C: whatever the sweep
    # says of the first job's end, it learnt when interrupted.
    monkeypatch.setattr(sweep_module, "SLURM_POLL_S", 3600.0)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP, encoding="utf-8")
    manifest = tmp_path / "outputs" / "sweeps" / "ctrlc" / "sweep.json"
    ids: list[str] = []
    seen: dict[str, str] = {}

    def interrupt() -> None:
        try:
            ids.extend(_job_ids(manifest, 60))
            seen["first"] = wait_for_job(ids[0], timeout_s=420).state
        except BaseException as exc:
            seen["error"] = repr(exc)
        finally:
            # the terminal's Ctrl-C, to the main thread: sent to the process, the kernel may
            # hand it to this thread, and the main thread's sleep would go on uninterrupted
            signal.pthread_kill(main, signal.SIGINT)

    main = threading.main_thread().ident
    assert main is not None
    # a terminal's foreground process answers Ctrl-C with KeyboardInterrupt; a shell's
    # background job (the test script runs this tier beside the others) starts with SIGINT
    # ignored, and Python then installs no handler of its own
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    try:
        rc = cli.main(sweep_argv(sweep, "ctrlc"))
    finally:
        signal.signal(signal.SIGINT, before)
        thread.join(timeout=30)
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30)
    out = capsys.readouterr().out
    assert "error" not in seen, seen
    assert seen["first"] == "COMPLETED", seen
    assert rc == 130, out
    first, second = ids
    assert f"1 job(s) stay on Slurm (scancel {second} stops them)" in out, out
    assert "states as last seen" not in out, out
    states = {j["job_id"]: j["state"] for j in json.loads(manifest.read_text())["jobs"]}
    assert states[first] == "COMPLETED", states
    assert states[second] in ("PENDING", "CONFIGURING", "RUNNING"), states
