"""The diagnosis on the job side, with real processes (2 ranks, gloo) and real records.

* the step-time breakdown and the calibration leave training exactly as it was;
* what is not measured is null with a reason, never 0;
* injected causes of a known size (slow input, one slow rank, an all-reduce held back by a
  DDP communication hook) are each attributed to the right part by the analysis' waterfall,
  over two runs at 2 processes, and the report names them first;
* a communication-heavy model shows its exposed communication;
* a rank that dies in the calibration or before the gather ends the job, with a reason.

Every injected effect is several times the noise of a 2-core machine with a busy neighbour
(a spiral step takes 2-4 ms there): under such a neighbour the causes below gave input wait
36-40 of 56-61 lost points (50 ms a fetch), rank skew 86-88 of 99 (40 ms) and exposed
communication 91-93 of 98 (20 ms), and the comm-heavy model 32-41 of 68.
"""

from __future__ import annotations

import io
import json
import statistics
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from core_helpers import REPO, TINY, TrainRun, run_train

from analysis import summarize
from analysis.diagnosis import LABELS, waterfall
from analysis.frame import load_all
from scalescope.job.allreduce import predicted_step_s
from scalescope.record import ResultRecord, encode

pytestmark = pytest.mark.timeout(600)

REPEATS = 2
"""Runs at 2 processes per cause: attributions are asserted on their mean, never one draw."""


def only_result(run: TrainRun) -> ResultRecord:
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    return result


def diag(result: ResultRecord) -> dict[str, Any]:
    assert result.diagnosis is not None
    return result.diagnosis


def summarize_in_process(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = summarize.main(list(argv))
    return rc, out.getvalue(), err.getvalue()


# --- what the record says --------------------------------------------------------------------


def test_the_diagnosis_does_not_change_the_trajectory(
    spiral_runs: dict[str, Any], spiral_two_no_diagnosis: TrainRun
) -> None:
    on, off = only_result(spiral_runs["two"]), only_result(spiral_two_no_diagnosis)
    # Bit-identical: the probes only read clocks, the calibration runs after the last
    # validation, takes no optimizer step and restores buffers and RNG states.
    assert diag(on)["status"] == "recorded"
    assert on.val_loss_final == off.val_loss_final
    assert on.val_acc_final == off.val_acc_final


def test_every_rank_is_in_the_record(spiral_runs: dict[str, Any]) -> None:
    on = only_result(spiral_runs["two"])
    d = diag(on)
    assert d["status"] == "recorded" and d["clock"] == "wall"
    assert d["steady_steps"] == on.steady_steps > 0
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert [r["local_rank"] for r in d["ranks"]] == [0, 1]
    for r in d["ranks"]:
        assert r["node"] in on.node_names
        assert r["peak_mem_gib"] is None  # CPU: no device memory, not 0
        assert r["peak_host_rss_gib"] > 0.05  # torch alone is more than 50 MB
        assert r["comm_wait_s"] > 0  # two ranks: backward waits for the all-reduce
        assert r["compute_s"] > 0
    # The diagnosis' per-rank step times and the timing callback's steady time are measured
    # apart (probes vs. the agreed clock); the slowest rank's must account for the agreed
    # steady time, which is the max over ranks.
    assert max(r["step_time_s"] for r in d["ranks"]) * on.steady_steps == pytest.approx(
        on.steady_time_s, rel=1e-6
    )
    own = {r["rank"]: r["own_s"] for r in d["ranks"]}
    assert d["slowest_rank"] == max(own, key=lambda k: own[k])
    assert d["typical_rank"] == min(own, key=lambda k: own[k])  # lower median of two


def test_calibration_and_allreduce_baseline_are_measured(spiral_runs: dict[str, Any]) -> None:
    d = diag(only_result(spiral_runs["two"]))
    cal = d["calibration"]
    assert cal["status"] == "measured", cal
    assert cal["steps"] >= 1 and cal["windows"] >= 1
    assert cal["fwd_bwd_s"] > 0 and cal["fwd_bwd_sync_s"] > 0
    ar = d["allreduce"]
    assert ar["status"] == "measured", ar
    assert ar["backend"] == "gloo" and ar["world_size"] == 2
    assert ar["sizes"] and ar["predicted_step_s"] > 0 and ar["busbw_gbps"] > 0
    # The sweep goes past the spiral's 11 kB gradient (towards 8 MiB) so the fit sees bandwidth;
    # busbw is also reported at the gradient size.
    assert ar["sizes"][-1]["bytes"] > ar["gradient_bytes"]
    assert ar["busbw_at_gradient_gbps"] > 0
    assert ar["fit"]["points"] == len(ar["sizes"]) and ar["fit"]["alpha_s"] >= 0, ar["fit"]
    # DDP's own buckets, read when training ended: the spiral's small parameters fill one.
    assert (ar["bucket_source"], ar["bucket_reason"]) == ("ddp", None), ar
    assert ar["bucket_bytes"] == [ar["gradient_bytes"]]
    assert ar["predicted_step_s"] == pytest.approx(
        predicted_step_s(ar["fit"], ar["bucket_bytes"], 2)
    )
    # Their cost is recorded, and it was paid outside the timed region.
    assert d["overhead_s"]["calibration"] == cal["seconds"] > 0
    assert d["overhead_s"]["allreduce_baseline"] == ar["seconds"] > 0


def test_what_was_not_measured_is_null_with_a_reason(
    spiral_runs: dict[str, Any], spiral_two_no_diagnosis: TrainRun
) -> None:
    d = diag(only_result(spiral_runs["two"]))
    assert d["nvml"]["status"] == "unavailable"
    assert d["nvml"]["reason"] == "CPU run: no GPU to sample"
    assert d["nvml"]["gpus"] is None
    off = diag(only_result(spiral_two_no_diagnosis))
    assert off == {"status": "off", "reason": "diagnosis.enabled=false", "ranks": None}


def test_one_device_skips_calibration_and_baseline_and_says_why(
    spiral_runs: dict[str, Any],
) -> None:
    d = diag(only_result(spiral_runs["one"]))
    for section in ("calibration", "allreduce"):
        assert d[section]["status"] == "skipped"
        assert d[section]["reason"] == "1 device: nothing to all-reduce"
    (rank,) = d["ranks"]
    assert rank["comm_wait_s"] == 0.0  # no all-reduce exists: an honest zero
    assert rank["compute_s"] > 0
    assert d["rank_skew"] == 0.0


def test_a_users_module_is_diagnosed_and_trains_the_same(tmp_path: Path) -> None:
    """examples/my_project: automatic optimization, its own loaders, self.log in its step."""
    args = ("tracking.mode=off", "trainer.devices=2", "trainer.max_epochs=2")
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


# --- injected causes of a known size, attributed ------------------------------------------------

DELAY_S = 0.02
CAUSES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    # cause -> (the waterfall part it must land in, the train arguments, whether the plain
    # spiral's 1-device run is its baseline: the fault does nothing on one device)
    "slow input": ("input", ("faults.input_sleep_s=0.1",), False),
    "one slow rank": ("skew", ("faults.slow_rank=1", "faults.slow_rank_sleep_s=0.04"), True),
    "delayed all-reduce": ("comm", (f"faults.allreduce_delay_s={DELAY_S}",), True),
}


def _folder_with(
    folder: Path, baseline: ResultRecord | None, args: tuple[str, ...], config: tuple[str, ...]
) -> Path:
    """One folder: the 1-device baseline (run here, or a shared run's record) and REPEATS
    runs at 2 processes."""
    if baseline is not None:
        (folder / "slurm-baseline.out").write_text(encode(baseline) + "\n")
    else:
        only_result(run_train(REPO, *args, output_dir=folder, module_args=config))
    for _ in range(REPEATS):
        only_result(
            run_train(REPO, *args, "trainer.devices=2", output_dir=folder, module_args=config)
        )
    return folder


@pytest.fixture(scope="module")
def attributed(
    tmp_path_factory: pytest.TempPathFactory, spiral_runs: dict[str, Any]
) -> dict[str, Any]:
    """Each cause at 1 process and REPEATS times at 2, summarised; one folder per cause."""
    out = {}
    plain_one = only_result(spiral_runs["one"])
    for cause, (_, args, shares_baseline) in CAUSES.items():
        folder = tmp_path_factory.mktemp(cause.replace(" ", "-"))
        _folder_with(folder, plain_one if shares_baseline else None, (*TINY, *args), ())
        rc, _, err = summarize_in_process(str(folder), "--out", str(folder / "sum"), "--no-charts")
        assert rc == 0, err
        out[cause] = (
            load_all(folder),
            waterfall(load_all(folder).runs),
            (folder / "sum" / "report.md").read_text(),
        )
    return out


def _scaled_row(wf: Any) -> Any:
    (row,) = [r for _, r in wf.table.iterrows() if not r["is_baseline"]]
    assert row["n"] == REPEATS and row["n_recorded"] == REPEATS
    return row


@pytest.mark.parametrize("cause", list(CAUSES))
def test_an_injected_cause_is_attributed_to_its_part(attributed: dict, cause: str) -> None:
    part = CAUSES[cause][0]
    _, wf, _ = attributed[cause]
    row = _scaled_row(wf)
    lost = row["lost_pts_mean"]
    parts = {p: row[f"{p}_pts_mean"] for p in ("comm", "input", "skew", "compute")}
    print(f"{cause}: lost {lost:.1f} points (mean of {REPEATS} runs), parts {parts}")
    assert lost > 30, row.to_dict()
    assert max(parts, key=lambda p: parts[p]) == part, parts
    assert parts[part] > 0.5 * lost, (parts, lost)  # most of the loss


def test_a_delayed_allreduce_is_recovered_as_exposed_communication(attributed: dict) -> None:
    loaded, _, _ = attributed["delayed all-reduce"]
    exposed = [
        d["calibration"]["exposed_comm_s"]
        for d, w in zip(loaded.runs["diagnosis"], loaded.runs["world_size"], strict=True)
        if w == 2
    ]
    assert len(exposed) == REPEATS
    # The hook holds the one bucket back DELAY_S; the real all-reduce adds well under 1 ms.
    assert statistics.mean(exposed) == pytest.approx(DELAY_S, rel=0.25), exposed


@pytest.mark.parametrize("cause", list(CAUSES))
def test_the_report_names_the_cause_first(attributed: dict, cause: str) -> None:
    part = CAUSES[cause][0]
    _, _, report = attributed[cause]
    words = report.split("## Where the efficiency went, in words", 1)[1]
    named = {LABELS[p]: words.find(f"{LABELS[p]}, ") for p in LABELS}
    first = min((i, label) for label, i in named.items() if i >= 0)[1]
    assert first == LABELS[part], words[:1500]
    advice = {
        "skew": "rank 1 on node",
        "input": "scalescope bench-data",
        "comm": "busbw",
    }[part]
    assert advice in words, words[:1500]


def test_a_communication_heavy_model_shows_exposed_communication(tmp_path: Path) -> None:
    """A model of many parameters and little compute per step (weak scaling). What the
    waterfall can say of it robustly today: its exposed communication is a large share of
    the loss in every run (32-41 of 68 points under a busy neighbour; compute per sample
    grows there too, as two ranks and the neighbour share two cores)."""
    config = ("--config", "configs/diagnosis/comm_heavy.yaml")
    folder = _folder_with(tmp_path, None, ("workload.num_samples=600",), config)
    wf = waterfall(load_all(folder).runs)
    row = _scaled_row(wf)
    assert row["comm_pts_mean"] > 0.25 * row["lost_pts_mean"] > 0, row.to_dict()
    exposed = [parts.exposed_comm_s for _, world, _, parts, _ in wf.runs if world == 2]
    assert len(exposed) == REPEATS and min(exposed) > 0, exposed


# --- ranks that die --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "reason"), [("calibration", "collective_error"), ("gather", "collective_error")]
)
def test_a_rank_that_dies_ends_the_job_with_a_reason(
    tmp_path: Path, where: str, reason: str
) -> None:
    run = run_train(
        REPO,
        *TINY,
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
    rc, out, err = summarize_in_process(str(log), "--no-write", "--format", "json")
    assert rc == 0, err
    (row,) = json.loads(out)["failures"]
    assert row["reason"] == reason, row
    print(f"rank 1 died in {where}: {row['reason']}: {row['detail']}")
