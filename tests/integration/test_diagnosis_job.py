"""The diagnosis on the job side, with real processes (2 ranks, gloo) and real records.

* the step-time breakdown and the calibration leave training exactly as it was;
* what is not measured is null with a reason, never 0;
* three injected causes (slow input, one slow rank, a communication-heavy model) are each
  attributed to the right part by the analysis' waterfall, and the report says so first;
* a rank that dies in the calibration or before the gather ends the job, with a reason.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from core_helpers import REPO, TrainRun, run_train

from analysis.diagnosis import LABELS, waterfall
from analysis.frame import load_all
from scalescope.record import ResultRecord

QUICK = ("tracking.mode=off", "trainer.max_epochs=3")


def only_result(run: TrainRun) -> ResultRecord:
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    return result


def diag(result: ResultRecord) -> dict[str, Any]:
    assert result.diagnosis is not None
    return result.diagnosis


# --- what the record says --------------------------------------------------------------------


@pytest.fixture(scope="module")
def spiral_on_off(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResultRecord]:
    out = {}
    for name, setting in (("on", "true"), ("off", "false")):
        d = tmp_path_factory.mktemp(f"spiral-{name}")
        run = run_train(
            REPO, *QUICK, "trainer.devices=2", f"diagnosis.enabled={setting}", output_dir=d
        )
        out[name] = only_result(run)
    return out


def test_the_diagnosis_does_not_change_the_trajectory(spiral_on_off: dict) -> None:
    on, off = spiral_on_off["on"], spiral_on_off["off"]
    # Bit-identical: the comm hook is PyTorch's own all-reduce (divide, then sum), the
    # calibration runs after the last validation, takes no optimizer step and restores
    # buffers and RNG states.
    assert on.val_loss_final == off.val_loss_final
    assert on.val_acc_final == off.val_acc_final


def test_every_rank_is_in_the_record(spiral_on_off: dict) -> None:
    on = spiral_on_off["on"]
    d = diag(on)
    assert d["status"] == "recorded" and d["clock"] == "wall"
    assert d["steady_steps"] == on.steady_steps
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert [r["local_rank"] for r in d["ranks"]] == [0, 1]
    for r in d["ranks"]:
        assert r["node"] in on.node_names
        assert r["peak_mem_gib"] is None  # CPU: no device memory, not 0
        assert r["peak_host_rss_gib"] > 0
        parts = r["input_wait_s"] + r["compute_s"] + r["comm_wait_s"]
        assert math.isclose(parts, r["step_time_s"], rel_tol=1e-9)
        assert r["own_s"] == pytest.approx(r["input_wait_s"] + r["compute_s"])
        assert r["comm_wait_s"] > 0  # two ranks: backward waits for the all-reduce
    # Every rank ran the same steps; each rank's own steady time is at most the agreed (max).
    assert max(r["step_time_s"] for r in d["ranks"]) * on.steady_steps == pytest.approx(
        on.steady_time_s, rel=1e-6
    )
    assert d["slowest_rank"] in (0, 1) and d["typical_rank"] in (0, 1)
    assert d["rank_skew"] >= 0


def test_calibration_and_allreduce_baseline_are_measured(spiral_on_off: dict) -> None:
    d = diag(spiral_on_off["on"])
    cal = d["calibration"]
    assert cal["status"] == "measured", cal
    assert cal["steps"] == 8 and cal["windows"] == 2
    assert 0 < cal["fwd_bwd_s"] < cal["fwd_bwd_sync_s"]
    assert cal["exposed_comm_s"] == pytest.approx(cal["fwd_bwd_sync_s"] - cal["fwd_bwd_s"])
    ar = d["allreduce"]
    assert ar["status"] == "measured", ar
    assert ar["backend"] == "gloo" and ar["world_size"] == 2
    assert ar["sizes"] and ar["predicted_step_s"] > 0 and ar["busbw_gbps"] > 0
    # Their cost is recorded, and it was paid outside the timed region.
    assert d["overhead_s"]["calibration"] == cal["seconds"] > 0
    assert d["overhead_s"]["allreduce_baseline"] == ar["seconds"] > 0


def test_what_was_not_measured_is_null_with_a_reason(spiral_on_off: dict) -> None:
    d = diag(spiral_on_off["on"])
    assert d["nvml"]["status"] == "unavailable"
    assert "GPU" in d["nvml"]["reason"]
    assert d["nvml"]["gpus"] is None
    off = diag(spiral_on_off["off"])
    assert off == {"status": "off", "reason": "diagnosis.enabled=false", "ranks": None}


def test_one_device_skips_calibration_and_baseline_and_says_why(tmp_path: Path) -> None:
    result = only_result(run_train(REPO, *QUICK, output_dir=tmp_path))
    d = diag(result)
    for section in ("calibration", "allreduce"):
        assert d[section]["status"] == "skipped"
        assert d[section]["reason"] == "1 device: nothing to all-reduce"
    (rank,) = d["ranks"]
    assert rank["comm_wait_s"] == 0.0  # no all-reduce exists: an honest zero
    assert rank["compute_s"] > 0
    assert d["rank_skew"] == 0.0


def test_a_users_module_is_diagnosed_and_trains_the_same(tmp_path: Path) -> None:
    """examples/my_project: automatic optimization, its own loaders, self.log in its step."""
    args = ("tracking.mode=off", "trainer.devices=2")
    config = ("--config", "examples/my_project.yaml")
    on = only_result(run_train(REPO, *args, output_dir=tmp_path / "on", module_args=config))
    off = only_result(
        run_train(
            REPO,
            *args,
            "diagnosis.enabled=false",
            output_dir=tmp_path / "off",
            module_args=config,
        )
    )
    assert on.val_loss_final == off.val_loss_final
    d = diag(on)
    assert d["calibration"]["status"] == "measured", d["calibration"]
    assert all(r["input_wait_s"] > 0 for r in d["ranks"])  # a real DataLoader


# --- injected causes, attributed ------------------------------------------------------------

CAUSES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    # cause -> (the waterfall part it must land in, the config, the train arguments)
    "slow input": ("input", (), ("faults.input_sleep_s=0.15",)),
    "one slow rank": ("skew", (), ("faults.slow_rank=1", "faults.slow_rank_sleep_s=0.01")),
    "communication-heavy model": ("comm", ("--config", "configs/diagnosis/comm_heavy.yaml"), ()),
}


@pytest.fixture(scope="module")
def attributed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each cause at 1 and 2 processes, summarised; one folder per cause."""
    out = {}
    for cause, (_, config, args) in CAUSES.items():
        folder = tmp_path_factory.mktemp(cause.replace(" ", "-"))
        for devices in (1, 2):
            run = run_train(
                REPO,
                *QUICK,
                *args,
                f"trainer.devices={devices}",
                output_dir=folder,
                module_args=config,
            )
            only_result(run)
        loaded = load_all(folder)
        summary = _summarize(folder)
        out[cause] = (waterfall(loaded.runs), summary)
    return out


def _summarize(folder: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "analysis.summarize", str(folder), "--out", str(folder / "sum")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return (folder / "sum" / "report.md").read_text()


@pytest.mark.parametrize("cause", list(CAUSES))
def test_an_injected_cause_is_attributed_to_its_part(attributed: dict, cause: str) -> None:
    part = CAUSES[cause][0]
    wf, _ = attributed[cause]
    row = wf.table[~wf.table["is_baseline"]].iloc[0]
    lost = row["lost_pts_mean"]
    parts = {p: row[f"{p}_pts_mean"] for p in ("comm", "input", "skew", "compute")}
    print(f"{cause}: lost {lost:.1f} points, parts {parts}")
    assert lost > 10, row.to_dict()
    assert max(parts, key=lambda p: parts[p]) == part, parts
    assert parts[part] > 0.5 * lost, (parts, lost)  # most of the loss


@pytest.mark.parametrize("cause", list(CAUSES))
def test_the_report_names_the_cause_first(attributed: dict, cause: str) -> None:
    part = CAUSES[cause][0]
    _, report = attributed[cause]
    words = report.split("## Where the efficiency went, in words", 1)[1]
    named = {LABELS[p]: words.find(f"{LABELS[p]}, ") for p in LABELS}
    first = min((i, label) for label, i in named.items() if i >= 0)[1]
    assert first == LABELS[part], words[:1500]
    if part == "skew":
        assert "rank 1 on node" in words
    if part == "input":
        assert "scalescope bench-data" in words


# --- ranks that die --------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["calibration", "gather"])
def test_a_rank_that_dies_ends_the_job_with_a_reason(tmp_path: Path, where: str) -> None:
    run = run_train(
        REPO,
        *QUICK,
        "trainer.devices=2",
        "trainer.collective_timeout_s=30",
        "faults.exit_rank=1",
        f"faults.exit_at={where}",
        output_dir=tmp_path,
    )
    assert run.returncode != 0, run.describe()
    assert not run.results()
    assert not list(tmp_path.rglob("result.json"))
    log = tmp_path / "slurm-local.out"
    log.write_text(run.combined)
    proc = subprocess.run(
        [sys.executable, "-m", "analysis.summarize", str(log), "--no-write", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    summary = json.loads(proc.stdout)
    (row,) = summary["failures"]
    assert row["reason"] not in (None, "", "unknown"), row
    print(f"rank 1 died in {where}: {row['reason']}: {row['detail']}")
