"""Ctrl-C during a Slurm sweep's --wait: the jobs stay on Slurm, and what the sweep says of
them (the scancel line, sweep.json) comes from one last look at squeue and scontrol, not
from the poll before the interrupt, which may be seconds old. The clients' answers are
given as text: the Slurm tier interrupts a real sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import submitit
from analysis_helpers import make_result
from rich.console import Console
from submitit.core.utils import cloudpickle_dump
from sweep_helpers import CPU_PROFILE, write_profile, write_sweep

from scalescope.launch import monitor
from scalescope.launch import sweep as sweep_module
from scalescope.launch.cluster import load_profile
from scalescope.launch.executor import Launcher
from scalescope.launch.monitor import SweepWatch, parse_squeue
from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

IDS = ("23", "24", "25", "26")


def _watched(root: Path) -> SweepWatch:
    """Four jobs as the last poll saw them: 23 running, 24 to 26 pending behind it."""
    sweep = write_sweep(root, extra="repeats: 2\norder_seed: 1\n")
    plan = plan_sweep(
        load_sweep_config(sweep),
        sweep,
        executor="slurm",
        profile=load_profile(write_profile(root, CPU_PROFILE)),
        sweep_id="ctrlc",
    )
    plan.sweep_dir.mkdir(parents=True)
    watch = SweepWatch(plan, Launcher(plan))
    for h, job_id in zip(watch.handles, IDS, strict=True):
        h.job = submitit.Job(plan.sweep_dir / job_id, job_id, tasks=(0,))
        watch.status_of(h).state = "RUNNING" if job_id == "23" else "PENDING"
    return watch


def _states(watch: SweepWatch) -> dict[str, str]:
    manifest = json.loads((watch.plan.sweep_dir / "sweep.json").read_text())
    return {j["job_id"]: j["state"] for j in manifest["jobs"]}


def test_an_interrupt_refreshes_the_states_before_saying_what_stays_on_slurm(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job 23 completed after the last poll: it is not listed to scancel, and sweep.json says
    COMPLETED; 24 started meanwhile. The refresh is bounded: no client gets more time than
    the interrupt allows."""
    watch = _watched(in_tmp)
    (watch.plan.sweep_dir / "23").mkdir()
    cloudpickle_dump(
        ("success", make_result("23")), watch.plan.sweep_dir / "23" / "23_0_result.pkl"
    )
    asked: list[float] = []

    def squeue(ids: Any, timeout_s: float = 30.0) -> Any:
        asked.append(timeout_s)
        return parse_squeue(
            "24|RUNNING|0:04|None\n25|PENDING|0:00|Dependency\n26|PENDING|0:00|Dependency\n"
        )

    def scontrol(job_id: str, timeout_s: float = 30.0) -> Any:
        asked.append(timeout_s)
        return ("COMPLETED", None) if job_id == "23" else None

    monkeypatch.setattr(monitor, "squeue_states", squeue)
    monkeypatch.setattr(monitor, "scontrol_state", scontrol)
    console = Console(record=True, width=300)
    assert sweep_module._interrupted(watch, watch.plan, console) == 130
    text = console.export_text()
    assert "3 job(s) stay on Slurm (scancel 24 25 26 stops them)" in text, text
    assert _states(watch) == {"23": "COMPLETED", "24": "RUNNING", "25": "PENDING", "26": "PENDING"}
    assert asked and max(asked) <= sweep_module.INTERRUPT_REFRESH_S


def test_when_slurm_does_not_answer_the_states_are_said_to_be_the_last_seen(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = _watched(in_tmp)
    monkeypatch.setattr(monitor, "squeue_states", lambda ids, timeout_s=30.0: None)
    console = Console(record=True, width=300)
    assert sweep_module._interrupted(watch, watch.plan, console) == 130
    text = console.export_text()
    assert "4 job(s) stay on Slurm (scancel 23 24 25 26 stops them)" in text, text
    assert "states as last seen: squeue did not answer" in text, text
    assert _states(watch) == {"23": "RUNNING", "24": "PENDING", "25": "PENDING", "26": "PENDING"}
