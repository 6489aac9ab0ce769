"""The diagnosis on the job side, with real processes (2 ranks, gloo) and real records.

* the step-time breakdown and the calibration leave training exactly as it was;
* what is not measured is null with a reason, never 0;
* injected causes of a known size (slow input, one slow rank, per-step stragglers rotating
  between the ranks, an all-reduce held back by a DDP communication hook) are each
  attributed to the right part by the analysis' waterfall, over two runs at 2 processes,
  and the report names them first;
* a communication-heavy model shows its exposed communication.

Ranks that die or fail in the calibration: test_diagnosis_failures.py.

Every injected effect is several times the noise of a 2-core machine with a busy neighbour
(a spiral step takes 2-4 ms there): under such a neighbour the causes below gave input wait
36-40 of 56-61 lost points (50 ms a fetch), rank skew 86-88 of 99 (40 ms) and exposed
communication 91-93 of 98 (20 ms), and the comm-heavy model 32-41 of 68 (figures of the
calibration-based estimate; docs/diagnosis.md's table has the current ones). The overlap
burn and the batch-norm delays, sized nearer the noise, grow with the machine's slowness
(:func:`slowness`).
"""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
from core_helpers import REPO, TINY, TrainRun, run_train
from diagnosis_helpers import diag, only_result, summarize_in_process
from time_limits import TIMEOUT_SCALE

from analysis.compute.waterfall import LABELS, waterfall
from analysis.read.frame import load_all
from scalescope.allreduce_model import predicted_step_s
from scalescope.record import ResultRecord, encode

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="session")
def slowness(request: pytest.FixtureRequest) -> float:
    """How many times slower than the machine the injected effects below were sized on this
    one runs (tests/time_limits.py: the factor its time limits stretch by). An effect sized
    in seconds grows with it, so that it stays as many times the run's noise, which grows
    with the machine's step, as where it was set."""
    return float(request.config.stash.get(TIMEOUT_SCALE, 1.0))


REPEATS = 2
"""Runs at 2 processes per cause: attributions are asserted on their mean, never one draw."""


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
    assert len(cal["paired_diffs_s"]) == cal["windows"]  # one difference per ABBA pair
    waits = d["step_waits"]
    assert waits["steps"] == d["steady_steps"] and waits["exposed_s"] > 0
    for r in d["ranks"]:  # each rank's wait splits into waiting for others and the rest
        assert r["waits_steps"] == d["steady_steps"]
        assert r["exposed_comm_s"] == pytest.approx(waits["exposed_s"], rel=1e-9)
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


BRITTLE = """
from examples.my_project.model import MyModel


class Brittle(MyModel):
    def calibration_loss(self, batch):
        if self.global_rank == 1:
            raise RuntimeError("rank 1 cannot calibrate")
        return self.training_step(batch, 0)
"""


def test_a_calibration_that_fails_on_one_rank_keeps_the_record(tmp_path: Path) -> None:
    """The calibration is optional and runs after the gather: one rank failing in it is
    the section's status and reason, the other rank never waits for it, the record stands."""
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    (tmp_path / "brittle.py").write_text(BRITTLE)
    run = run_train(
        tmp_path,
        "tracking.mode=off",
        "trainer.devices=2",
        "trainer.max_epochs=2",
        "workload.name=brittle:Brittle",
        "trainer.collective_timeout_s=60",
        output_dir=tmp_path / "out",
        module_args=("--config", "examples/my_project.yaml"),
    )
    result = only_result(run)
    d = diag(result)
    assert d["status"] == "recorded" and result.steady_steps and result.steady_steps > 0
    cal = d["calibration"]
    assert cal["status"] == "skipped" and cal["exposed_comm_s"] is None
    assert cal["reason"] == "the calibration pass failed: RuntimeError: rank 1 cannot calibrate"
    assert d["step_waits"]["steps"] == d["steady_steps"]  # communication came from the steps


# --- injected causes of a known size, attributed ------------------------------------------------

DELAY_S = 0.05
STEPS_ONLY = ("diagnosis.calibration_steps=0",)
"""The attribution comes from every rank's training steps: the calibration (a cross-check,
tested on the shared spiral runs and the overlap test below) is left out here."""
NO_BASELINE = (*STEPS_ONLY, "diagnosis.allreduce_baseline=false")
"""Causes that are not communication need no all-reduce baseline either (the delayed
all-reduce keeps it: its advice quotes the measured bus bandwidth)."""
CAUSES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    # cause -> (the waterfall part it must land in, the train arguments, whether the plain
    # spiral's 1-device run is its baseline: the fault does nothing on one device)
    # 200 ms a fetch, every rank and the baseline alike: the step is mostly the sleep, so
    # what the loaded machine adds to the all-reduce stays small beside it (with 100 ms,
    # beside the Slurm tier and more, input fell to half of the loss); fewer samples keep
    # the run as short as before.
    "slow input": (
        "input",
        ("faults.input_sleep_s=0.2", "workload.num_samples=1000", *NO_BASELINE),
        False,
    ),
    "one slow rank": (
        "skew",
        ("faults.slow_rank=1", "faults.slow_rank_sleep_s=0.04", *NO_BASELINE),
        True,
    ),
    # 40 ms on one rank per step, a different one each step: on average the typical rank
    # waits 20 ms a step for the other, and neither rank is slower on average. Its own
    # sleeps (20 ms a step on average) are its compute: see OWN_COST.
    "rotating stragglers": ("jitter", ("faults.rotating_sleep_s=0.04", *NO_BASELINE), True),
    "delayed all-reduce": ("comm", (f"faults.allreduce_delay_s={DELAY_S}", *STEPS_ONLY), True),
}


OWN_COST = {"rotating stragglers": "compute"}
"""Where a cause's own time goes besides the waiting it causes: with rotating stragglers the
typical rank is itself the straggler in half the steps, and that sleep is its compute; the
other half it waits, which is the cause's part."""


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
    parts = {p: row[f"{p}_pts_mean"] for p in ("comm", "input", "skew", "jitter", "compute")}
    print(f"{cause}: lost {lost:.1f} points (mean of {REPEATS} runs), parts {parts}")
    assert lost > 30, row.to_dict()
    own = OWN_COST.get(cause)
    rivals = {p: v for p, v in parts.items() if p != own}
    assert max(rivals, key=lambda p: rivals[p]) == part, parts
    if own is None:
        assert parts[part] > 0.5 * lost, (parts, lost)  # most of the loss
    else:  # the waiting it causes and its own time: most of the loss, a third at least waiting
        assert parts[part] + parts[own] > 0.7 * lost and parts[part] > 0.3 * lost, parts


def test_a_delayed_allreduce_is_recovered_as_exposed_communication(attributed: dict) -> None:
    _, wf, _ = attributed["delayed all-reduce"]
    exposed = [p.comm_step_s for _, world, _, p, _ in wf.runs if world == 2]
    assert len(exposed) == REPEATS
    assert {p.comm_source for _, world, _, p, _ in wf.runs if world == 2} == {"steps"}
    # The hook holds the one bucket back DELAY_S; the real all-reduce adds a few ms, and up to
    # ~10 ms beside a busy process: the delay is several times that, so 25% holds it.
    assert statistics.mean(exposed) == pytest.approx(DELAY_S, rel=0.25), exposed


def test_rotating_stragglers_are_not_read_as_communication(attributed: dict) -> None:
    """Per-step stragglers made the old calibration-based estimate call them communication;
    from every rank's steps, the exposed all-reduce stays small."""
    _, wf, _ = attributed["rotating stragglers"]
    row = _scaled_row(wf)
    assert row["comm_pts_mean"] < 0.25 * row["jitter_pts_mean"], row.to_dict()
    waits = [p.jitter_step_s + p.skew_step_s for _, world, _, p, _ in wf.runs if world == 2]
    # the typical rank waits for the other in about half the steps: ~20 ms a step
    assert statistics.mean(waits) == pytest.approx(0.02, rel=0.35), waits


def test_one_slow_rank_is_named(attributed: dict) -> None:
    _, wf, report = attributed["one slow rank"]
    row = _scaled_row(wf)
    assert row["slowest_rank"] == 1 and row["slowest_seen"] == REPEATS
    assert "rank 1 on node" in report


@pytest.mark.parametrize("cause", list(CAUSES))
def test_the_report_names_the_cause_first(attributed: dict, cause: str) -> None:
    part = CAUSES[cause][0]
    _, _, report = attributed[cause]
    words = report.split("## Where the efficiency went, in words", 1)[1]
    own = OWN_COST.get(cause)
    named = {LABELS[p]: words.find(f"{LABELS[p]}, ") for p in LABELS if p != own}
    first = min((i, label) for label, i in named.items() if i >= 0)[1]
    assert first == LABELS[part], words[:1500]
    advice = {
        "skew": "rank 1 on node",
        "input": "scalescope bench-data",
        "comm": "busbw",
        "jitter": "a different rank is slowest from step to step",
    }[part]
    assert advice in words, words[:1500]


COMM_HEAVY = ("--config", "configs/diagnosis/comm_heavy.yaml")


@pytest.fixture(scope="module")
def comm_heavy_baseline(tmp_path_factory: pytest.TempPathFactory) -> ResultRecord:
    """The communication-heavy model on one device (its baseline in both tests below)."""
    folder = tmp_path_factory.mktemp("comm-heavy-one")
    return only_result(
        run_train(REPO, "workload.num_samples=600", output_dir=folder, module_args=COMM_HEAVY)
    )


WAITS = ("comm", "input", "skew", "jitter")
"""The parts of a step other than compute and the overlap slowdown: time spent waiting."""


def test_a_communication_heavy_model_shows_exposed_communication(
    tmp_path: Path, comm_heavy_baseline: ResultRecord
) -> None:
    """A model of many parameters and little compute per step (weak scaling): its exposed
    communication and the slowdown of backward beside it are a large share of every
    2-process step, and the largest of the parts that only scale brings.

    Those points (100 x part / the run's own step time) are measured inside each run. The
    loss itself is not asserted: with no injected effect it is the difference between runs
    made at different moments, and on a 2-core machine shared with other jobs it moves with
    their load (one CI run, its baseline made beside the Slurm tier's jobs, measured -9.5
    points lost, compute -59, while communication was 27.5 and the overlap 8.3)."""
    folder = _folder_with(tmp_path, comm_heavy_baseline, ("workload.num_samples=600",), COMM_HEAVY)
    wf = waterfall(load_all(folder).runs)
    row = _scaled_row(wf)
    parts = {p: round(row[f"{p}_pts_mean"], 1) for p in (*WAITS, "overlap", "compute")}
    print(f"comm-heavy: lost {row['lost_pts_mean']:.1f}, parts {parts}")
    overlap = 0.0 if math.isnan(parts["overlap"]) else parts["overlap"]  # folded: within noise
    assert parts["comm"] + overlap > 15, row.to_dict()
    assert max(WAITS, key=lambda p: parts[p]) == "comm", parts
    # an overlap slowdown within its noise is folded into compute (NaN here): no part then
    shares = [
        (p.per_sample("comm") + (0.0 if p.overlap_note else p.per_sample("overlap"))) / p.t_s
        for _, world, _, p, _ in wf.runs
        if world == 2
    ]
    assert len(shares) == REPEATS and min(shares) > 0.15, shares
    exposed = [p.exposed_comm_s for _, world, _, p, _ in wf.runs if world == 2]
    assert min(exposed) > 0, exposed


BURN_S = 0.015
"""The overlap burn on the machine the test was sized on (:func:`slowness` scales it)."""


def test_communication_that_slows_backward_is_taken_out_of_compute(
    tmp_path: Path, comm_heavy_baseline: ResultRecord, slowness: float
) -> None:
    """A communication hook that busy-loops BURN_S for the first bucket, while backward
    still has gradients to compute: backward is that much slower in every synced step.
    The calibration recovers it as the overlap slowdown, and the waterfall moves it out of
    compute into its own part instead of counting it twice."""
    burn = BURN_S * slowness
    args = ("workload.num_samples=600", f"faults.overlap_burn_s={burn}")
    folder = _folder_with(tmp_path, comm_heavy_baseline, args, COMM_HEAVY)
    wf = waterfall(load_all(folder).runs)
    row = _scaled_row(wf)
    overlap = [p.overlap_step_s for _, world, _, p, _ in wf.runs if world == 2]
    print(
        f"overlap burn {burn:.4f}: recovered {overlap}; parts "
        f"{ {c: round(row[f'{c}_pts_mean'], 1) for c in ('comm', 'overlap', 'compute')} }"
    )
    assert len(overlap) == REPEATS
    assert statistics.mean(overlap) == pytest.approx(burn, rel=0.35), overlap
    assert row["overlap_pts_mean"] > row["comm_pts_mean"], row.to_dict()
    # not counted twice: the remainder stays small beside the part
    assert abs(row["remainder_pts_mean"]) < 0.5 * row["overlap_pts_mean"], row.to_dict()


# --- a module with buffers: a wait is a wait in whichever collective it happens -------------

BATCH_NORM = """
from torch import nn

from examples.my_project.model import MyModel


class BnModel(MyModel):
    \"\"\"MyModel with batch normalisation: DDP broadcasts its buffers before every forward.\"\"\"

    def __init__(self, features=32, classes=4, hidden=128, lr=1e-3):
        super().__init__(features, classes, hidden, lr)
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )
"""
BN_DELAY_S = 0.03
"""The batch-norm causes' delay on the machine the tests were sized on (:func:`slowness`
scales it)."""


def _bn_causes(delay: float) -> dict[str, tuple[str, ...]]:
    return {
        # rank 1's loader is slower: rank 0 waits for it in the next buffer broadcast
        "slow loader": (
            "faults.slow_rank=1",
            f"faults.slow_rank_sleep_s={delay}",
            "faults.slow_rank_at=input",
            *NO_BASELINE,
        ),
        # rank 1's forward is slower: rank 0 waits for it in the gradient all-reduce
        "slow forward": (
            "faults.slow_rank=1",
            f"faults.slow_rank_sleep_s={delay}",
            "faults.slow_rank_at=forward",
            *NO_BASELINE,
        ),
        "delayed all-reduce": (f"faults.allreduce_delay_s={delay}", *STEPS_ONLY),
    }


@pytest.fixture(scope="module")
def batch_norm(tmp_path_factory: pytest.TempPathFactory, slowness: float) -> dict[str, Any]:
    """The batch-norm module at 1 process, and each cause REPEATS times at 2; one waterfall
    per cause, all against the same 1-process baseline; the delay under ``delay_s``."""
    work = tmp_path_factory.mktemp("batch-norm")
    shutil.copytree(REPO / "examples", work / "examples")
    (work / "bn_model.py").write_text(BATCH_NORM)
    common = (
        "--config",
        "examples/my_project.yaml",
        "tracking.mode=off",
        "trainer.max_epochs=3",
        "workload.name=bn_model:BnModel",
    )

    def train(folder: Path, *args: str) -> ResultRecord:
        return only_result(run_train(work, *args, output_dir=folder, module_args=common))

    baseline = train(tmp_path_factory.mktemp("bn-one"), *NO_BASELINE)
    delay = BN_DELAY_S * slowness
    out: dict[str, Any] = {"delay_s": delay}
    for cause, args in _bn_causes(delay).items():
        folder = tmp_path_factory.mktemp(f"bn-{cause.replace(' ', '-')}")
        (folder / "slurm-baseline.out").write_text(encode(baseline) + "\n")
        for _ in range(REPEATS):
            train(folder, *args, "trainer.devices=2")
        out[cause] = waterfall(load_all(folder).runs)
    return out


def _bn_parts(wf: Any) -> tuple[float, dict[str, float]]:
    row = _scaled_row(wf)
    parts = {p: row[f"{p}_pts_mean"] for p in ("comm", "input", "skew", "jitter", "compute")}
    return row["lost_pts_mean"], parts


@pytest.mark.parametrize("cause", ["slow loader", "slow forward"])
def test_a_slow_rank_is_skew_whichever_collective_its_peers_wait_in(
    batch_norm: dict[str, Any], cause: str
) -> None:
    """With buffers, DDP broadcasts them before every forward: a rank whose loader is slower
    keeps its peers waiting there, not in the all-reduce. That wait is rank skew (or input),
    as much as a wait in the all-reduce for a rank whose forward is slower; communication
    stays what is left once the last rank arrived."""
    lost, parts = _bn_parts(batch_norm[cause])
    delay_ms = batch_norm["delay_s"] * 1000
    print(f"batch norm, {cause} {delay_ms:.0f} ms on rank 1: lost {lost:.1f}, {parts}")
    assert lost > 30, parts
    assert parts["skew"] + parts["input"] >= 0.5 * lost, (lost, parts)
    assert parts["comm"] < 0.25 * lost, (lost, parts)


def test_a_delayed_all_reduce_with_buffers_is_communication(batch_norm: dict[str, Any]) -> None:
    """The all-reduce held back the delay on every rank: communication takes most of the
    loss, and its exposed time rises over the runs without the delay by the delay."""
    lost, parts = _bn_parts(batch_norm["delayed all-reduce"])
    delay = batch_norm["delay_s"]
    print(f"batch norm, all-reduce delayed {delay * 1000:.0f} ms: lost {lost:.1f}, {parts}")
    assert parts["comm"] > 0.5 * lost, (lost, parts)

    def exposed(cause: str) -> float:
        values = [p.exposed_comm_s for _, world, _, p, _ in batch_norm[cause].runs if world == 2]
        assert len(values) == REPEATS
        return statistics.mean(values)

    plain = statistics.mean(exposed(c) for c in ("slow loader", "slow forward"))
    added = exposed("delayed all-reduce") - plain
    assert added == pytest.approx(delay, rel=0.25), (added, plain)
