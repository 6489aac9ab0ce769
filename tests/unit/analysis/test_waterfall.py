"""The efficiency waterfall: lost efficiency split into communication, input, skew, compute.

Records are built here with a ``diagnosis`` laid out as the job side writes it, each with an
injected cause (slow input, one slow rank, a communication-heavy model), and the analysis
must put the lost points where the cause is.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from analysis_helpers import make_result, summarize_main, write_log
from hypothesis import given
from hypothesis import strategies as st

from analysis.analyze import analyze
from analysis.compute.findings import finding, findings
from analysis.compute.run_parts import hidden_share, run_parts
from analysis.compute.waterfall import NOT_RECORDED, PARTS, attribute, chart_slugs, waterfall
from analysis.present.tables import diagnosis_table
from analysis.read.frame import load_all
from scalescope.record import ResultRecord, decode_line, encode

GLOBAL_BATCH = 256
BASE = {"input": 0.002, "compute": 0.100, "exposed": 0.0}
"""One device, batch 256: per-step seconds."""


def make_diagnosis(
    world: int,
    *,
    batch: int,
    input_s: float,
    compute_s: float,
    exposed_s: float,
    slow_rank: int | None = None,
    slow_extra_s: float = 0.0,
    calibration: str = "measured",
    predicted_s: float | None = 0.004,
    busbw_gbps: float | None = 1.5,
    nodes: int = 1,
    rotating_s: float = 0.0,
    step_waits: bool = True,
    overlap_s: float | None = None,
) -> dict[str, Any]:
    """A recorded breakdown: every rank needs input + compute, ``slow_rank`` needs
    ``slow_extra_s`` more (inside compute); every rank then waits in the all-reduce for
    the slowest, for ``rotating_s`` of per-step stragglers (a different rank each step, so
    every rank's mean own time is the same) and for the exposed communication, so all step
    times are equal. ``step_waits=False``: a record from before per-step waits existed."""
    own = [input_s + compute_s + (slow_extra_s if r == slow_rank else 0.0) for r in range(world)]
    step = max(own) + exposed_s + (rotating_s if world > 1 else 0.0)
    per_node = max(1, world // nodes)
    ranks = [
        {
            "rank": r,
            "local_rank": r % per_node,
            "node": f"node{r // per_node + 1}",
            "step_time_s": step,
            "input_wait_s": input_s,
            "comm_wait_s": step - own[r],
            "compute_s": own[r] - input_s,
            "own_s": own[r],
            "peak_mem_gib": None,
            "peak_host_rss_gib": 0.5,
        }
        for r in range(world)
    ]
    if step_waits:
        for row in ranks:
            wait = 0.0 if world == 1 else row["comm_wait_s"] - exposed_s
            row.update(wait_s=wait, exposed_comm_s=row["comm_wait_s"] - wait, waits_steps=100)
    order = sorted(range(world), key=lambda r: (own[r], r))
    typical, slowest = order[(world - 1) // 2], order[-1]
    multi = world > 1
    measured = multi and calibration == "measured"
    return {
        "status": "recorded",
        "reason": None,
        "clock": "wall",
        "steady_steps": 100,
        "per_device_batch_size": batch,
        "ranks": ranks,
        "slowest_rank": slowest,
        "slowest_node": ranks[slowest]["node"],
        "typical_rank": typical,
        "rank_skew": (own[slowest] - own[typical]) / own[typical],
        "calibration": {
            "status": calibration if multi else "skipped",
            "reason": None if measured else "1 device: nothing to all-reduce" if not multi else "x",
            "steps": 4,
            "windows": 3,
            "fwd_bwd_s": compute_s if measured else None,
            "fwd_bwd_sync_s": compute_s + exposed_s if measured else None,
            "exposed_comm_s": exposed_s if measured else None,
            "overlap_slowdown_s": overlap_s if measured else None,
            "seconds": 0.5 if measured else None,
        },
        "allreduce": {
            "status": "measured" if multi else "skipped",
            "reason": None if multi else "1 device: nothing to all-reduce",
            "backend": "gloo" if multi else None,
            "world_size": world,
            "gradient_bytes": 4_000_000 if multi else None,
            "sizes": [],
            "busbw_gbps": busbw_gbps if multi else None,
            "predicted_step_s": predicted_s if multi else None,
            "fit": {"alpha_s": 5e-05, "busbw_gbps": 1.6} if multi else None,
            "seconds": 0.3 if multi else None,
        },
        "nvml": {
            "status": "unavailable",
            "reason": "no NVIDIA driver",
            "interval_s": 1.0,
            "gpus": [],
        },
        "overhead_s": {"calibration": 0.5, "allreduce_baseline": 0.3},
    }


def diag_record(
    job_id: str,
    world: int,
    *,
    input_s: float,
    compute_s: float,
    exposed_s: float = 0.0,
    jitter: float = 1.0,
    with_diagnosis: bool = True,
    num_workers: int = 2,
    scaling_mode: str = "strong",
    **extra: Any,
) -> ResultRecord:
    """A strong-scaling run on ``world`` devices (global batch 256) whose headline throughput
    follows from the step its breakdown describes (``jitter`` scales the compute time: a
    repeat's noise)."""
    batch = GLOBAL_BATCH // world if scaling_mode == "strong" else GLOBAL_BATCH // 2
    d = make_diagnosis(
        world,
        batch=batch,
        input_s=input_s,
        compute_s=compute_s * jitter,
        exposed_s=exposed_s,
        **extra,
    )
    step = d["ranks"][0]["step_time_s"]
    per_device = batch / step
    held = GLOBAL_BATCH if scaling_mode == "strong" else batch
    record = make_result(
        job_id, world=(1, world), global_batch_size=held, scaling_mode=scaling_mode
    )
    config = {"name": "spiral", "workload": {"name": "spiral", "num_workers": num_workers}}
    return replace(
        record,
        config=config,
        steady_samples_per_s=per_device * world,
        steady_samples_per_s_per_device=per_device,
        diagnosis=d if with_diagnosis else None,
    )


JITTER = (1.0, 1.03, 0.97)

PATTERNS: dict[str, dict[str, Any]] = {
    # the dataset sleeps: input wait does not shrink with the per-device batch
    "input": {"input_s": 0.040, "compute_s": 0.050, "exposed_s": 0.001},
    # rank 1 sleeps 40 ms each step: rank 0 waits for it in every all-reduce
    "skew": {
        "input_s": 0.001,
        "compute_s": 0.050,
        "exposed_s": 0.001,
        "slow_rank": 1,
        "slow_extra_s": 0.040,
    },
    # many parameters, little compute: the all-reduce is not hidden behind backward
    "comm": {"input_s": 0.001, "compute_s": 0.050, "exposed_s": 0.040, "predicted_s": 0.050},
    # the all-reduce beside backward slows it by 30 ms (inside each rank's compute)
    "overlap": {"input_s": 0.001, "compute_s": 0.080, "exposed_s": 0.001, "overlap_s": 0.030},
    # a different rank sleeps 40 ms each step: the others wait for it, none is slow on average
    "jitter": {"input_s": 0.001, "compute_s": 0.050, "exposed_s": 0.001, "rotating_s": 0.040},
}


def pattern_records(pattern: str, *, base_diag: bool = True, **over: Any) -> list[ResultRecord]:
    records = []
    for i, j in enumerate(JITTER):
        records.append(
            diag_record(
                f"1{i}",
                1,
                input_s=BASE["input"],
                compute_s=BASE["compute"],
                jitter=j,
                with_diagnosis=base_diag,
            )
        )
        records.append(diag_record(f"2{i}", 2, jitter=j, **{**PATTERNS[pattern], **over}))
    return records


def runs_of(tmp_path: Path, records: list[ResultRecord]) -> pd.DataFrame:
    for r in records:
        write_log(tmp_path / f"slurm-{r.identity.job_id}.out", r)
    loaded = load_all(tmp_path)
    assert not [p for p in loaded.problems if p.severity == "warning"], loaded.problems
    return loaded.runs


def summed(row: Any) -> float:
    """The parts of a waterfall row added up; an overlap slowdown not measured is inside
    compute, so it is left out, as the waterfall does."""
    return math.fsum(
        row[f"{p}_pts_mean"]
        for p in PARTS
        if not (p == "overlap" and math.isnan(row[f"{p}_pts_mean"]))
    )


def scaled_row(table: pd.DataFrame) -> pd.Series:
    rows = table[~table["is_baseline"]]
    assert len(rows) == 1
    return rows.iloc[0]


# --- the pure arithmetic ----------------------------------------------------------------------


def test_attribute_matches_a_hand_computed_example() -> None:
    # baseline: 1 device, 0.102 s per step of 256 samples; the run: 0.091 s per 128 samples
    t_run = 0.091 / 128
    base_x = 256 / 0.102
    run_s = {
        "overlap": 0.0,
        "input": 0.040 / 128,
        "compute": 0.050 / 128,
        "skew": 0.0,
        "jitter": 0.0,
        "comm": 0.001 / 128,
    }
    base_s = {
        "input": 0.002 / 256,
        "compute": 0.100 / 256,
        "overlap": 0.0,
        "skew": 0.0,
        "jitter": 0.0,
        "comm": 0.0,
    }
    a = attribute(t_run, run_s, base_x, base_s)
    assert a["lost"] == pytest.approx(100 * (1 - 0.102 / (2 * 0.091)))
    assert a["input"] == pytest.approx(100 * (0.040 - 0.001) / 0.091)
    assert a["compute"] == pytest.approx(0.0, abs=1e-9)
    assert a["comm"] == pytest.approx(100 * 0.001 / 0.091)
    # everything the step holds is explained: nothing is left over
    assert a["remainder"] == pytest.approx(0.0, abs=1e-9)


positive = st.floats(min_value=1e-6, max_value=1e3, allow_nan=False, allow_infinity=False)


@given(
    run=st.tuples(*[positive] * 6),
    base=st.tuples(*[positive] * 6),
)
def test_a_fully_explained_step_leaves_no_remainder(
    run: tuple[float, ...], base: tuple[float, ...]
) -> None:
    names = ("comm", "overlap", "input", "skew", "jitter", "compute")
    t_run, t_base = math.fsum(run), math.fsum(base)
    a = attribute(
        t_run, dict(zip(names, run, strict=True)), 1 / t_base, dict(zip(names, base, strict=True))
    )
    assert a["remainder"] == pytest.approx(0.0, abs=1e-7 * max(1.0, abs(a["lost"])))


def test_a_missing_part_leaves_the_remainder_unknown_not_zero() -> None:
    a = attribute(
        1.0, {"comm": math.nan, "input": 0.1, "skew": 0, "jitter": 0, "compute": 0.5}, 1.0, {}
    )
    assert math.isnan(a["comm"]) and math.isnan(a["remainder"])
    assert a["lost"] == pytest.approx(0.0)


def test_hidden_share_is_clipped_and_says_why_when_missing() -> None:
    assert hidden_share(0.05, 0.01) == (pytest.approx(0.8), "")
    assert hidden_share(0.01, 0.05) == (0.0, "")  # more exposed than predicted: none hidden
    assert hidden_share(0.05, 0.0) == (1.0, "")
    share, why = hidden_share(math.nan, 0.01)
    assert math.isnan(share) and "predicted" in why
    share, why = hidden_share(0.05, math.nan)
    assert math.isnan(share) and "not measured" in why


# --- reading one record -------------------------------------------------------------------------


def test_one_device_has_no_communication_and_it_is_zero_honestly() -> None:
    d = make_diagnosis(1, batch=256, input_s=0.002, compute_s=0.1, exposed_s=0.0)
    p = run_parts(d, 256 / 0.102, 1)
    assert p.recorded and p.comm_step_s == 0.0 and p.skew_step_s == 0.0
    assert math.isnan(p.hidden_share) and "nothing to all-reduce" in p.hidden_reason
    assert p.per_sample("input") == pytest.approx(0.002 / 256)


def test_an_older_record_without_calibration_leaves_communication_not_recorded() -> None:
    d = make_diagnosis(
        2,
        batch=128,
        input_s=0.002,
        compute_s=0.05,
        exposed_s=0.01,
        calibration="skipped",
        step_waits=False,
    )
    d["calibration"]["reason"] = "diagnosis.calibration=false"
    p = run_parts(d, 128 / 0.062, 2)
    assert p.recorded
    assert math.isnan(p.comm_step_s) and math.isnan(p.jitter_step_s)
    assert p.comm_reason == "calibration skipped: diagnosis.calibration=false"
    assert "no per-step waits" in p.jitter_reason


def test_an_older_record_takes_communication_from_its_calibration() -> None:
    d = make_diagnosis(2, batch=128, input_s=0.002, compute_s=0.05, exposed_s=0.01)
    d["calibration"]["exposed_comm_s"] = 0.007  # what its calibration said
    for row in d["ranks"]:
        del row["wait_s"], row["exposed_comm_s"]
    p = run_parts(d, 128 / 0.062, 2)
    assert (p.comm_step_s, p.comm_source) == (0.007, "calibration")


def test_per_step_waits_carry_communication_without_calibration() -> None:
    """The calibration is a cross-check: communication comes from the training steps."""
    d = make_diagnosis(
        2, batch=128, input_s=0.002, compute_s=0.05, exposed_s=0.01, calibration="skipped"
    )
    p = run_parts(d, 128 / 0.062, 2)
    assert p.comm_step_s == pytest.approx(0.01) and p.comm_source == "steps"
    assert math.isnan(p.calibration_comm_s)


def test_the_typical_ranks_wait_splits_into_persistent_and_rotating() -> None:
    """Rank 1 is 20 ms slower on average, and per-step stragglers add 15 ms: the typical
    rank waits 35 ms beyond the exposed all-reduce; 20 are the slow rank, 15 rotate."""
    d = make_diagnosis(
        2,
        batch=128,
        input_s=0.002,
        compute_s=0.05,
        exposed_s=0.004,
        slow_rank=1,
        slow_extra_s=0.020,
        rotating_s=0.015,
    )
    p = run_parts(d, 128 / 0.091, 2)
    assert p.typical_rank == 0 and p.slowest_rank == 1
    assert p.comm_step_s == pytest.approx(0.004)
    assert p.skew_step_s == pytest.approx(0.020)
    assert p.jitter_step_s == pytest.approx(0.015)
    # on the typical rank's clock the parts are its whole step
    parts = p.input_step_s + p.compute_step_s + p.comm_step_s + p.skew_step_s + p.jitter_step_s
    assert parts == pytest.approx(d["ranks"][0]["step_time_s"])


@given(
    world=st.integers(2, 64),
    steps=st.integers(20, 200),
    exposed_ms=st.floats(0.0, 10.0),
    jitter=st.floats(0.0, 0.2),
    loader_ms=st.floats(0.0, 20.0),
    seed=st.integers(0, 2**16),
)
def test_waits_in_either_collective_are_never_read_as_communication(
    world: int, steps: int, exposed_ms: float, jitter: float, loader_ms: float, seed: int
) -> None:
    """Simulated ranks that arrive at two collectives per step: the buffer broadcast (after
    their loader, rank 0's being ``loader_ms`` slower) and the all-reduce (after their own
    compute, which varies step to step). At each collective a rank waits from its arrival
    until the last rank's, plus the collective's own time (0 for the broadcast, the injected
    exposed time for the all-reduce). Whatever the jitter, the loader delay and the world
    size, the exposed communication recovered is the injected one, and every other wait is
    the typical rank's skew or rotating stragglers."""
    import numpy as np

    from scalescope.job.cross_rank import step_wait_stats
    from scalescope.job.diagnosis import assemble

    rng = np.random.default_rng(seed)
    loader = np.zeros((world, steps))
    loader[0] += loader_ms / 1000.0
    own = 0.010 * (1 + jitter * rng.random((world, steps)))  # seconds, per rank and step
    exposed = exposed_ms / 1000.0
    broadcast = loader.max(axis=0) - loader  # arrive, wait for the last, leave together
    gradient = own.max(axis=0) - own + exposed
    waits = np.stack([gradient, broadcast], axis=1)  # (rank, collective, step)
    least = waits.min(axis=0)
    parts = []
    for r in range(world):
        stats = step_wait_stats(waits[r], least)
        comm = float(waits[r].sum(axis=0).mean())
        diag = {
            "clock": "wall",
            "step_time_s": float((own[r] + loader[r]).mean()) + comm,
            "input_wait_s": float(loader[r].mean()),
            "comm_wait_s": comm,
            "compute_s": float(own[r].mean()),
            "step_waits": stats,
        }
        parts.append({"node": "n", "local_rank": r, "diagnosis": diag})
    d = assemble(
        per_rank=parts,
        steady_steps=steps,
        per_device_batch_size=32,
        allreduce={"status": "skipped"},
        nvml={"status": "unavailable"},
        calibration={"status": "skipped", "reason": "x"},
        calibration_steps=0,
    )
    p = run_parts(d, 32 / max(r["step_time_s"] for r in d["ranks"]), world)
    assert p.comm_step_s == pytest.approx(exposed, abs=1e-12)
    typical = p.typical_rank
    assert typical is not None
    # the typical rank's waits beyond the exposed time: for the slow loader, and for the
    # straggler of each step
    waited = float((broadcast[typical] + gradient[typical]).mean()) - exposed
    assert p.skew_step_s + p.jitter_step_s == pytest.approx(waited, abs=1e-12)
    assert p.skew_step_s >= 0 and p.jitter_step_s >= -1e-12


@pytest.mark.parametrize(
    ("diagnosis", "expected"),
    [
        (None, "record has no breakdown"),
        (
            {"status": "off", "reason": "diagnosis.enabled=false"},
            "diagnosis off: diagnosis.enabled=false",
        ),
        ("oops", "diagnosis is not an object"),
    ],
)
def test_no_breakdown_says_why(diagnosis: Any, expected: str) -> None:
    p = run_parts(diagnosis, 1000.0, 2)
    assert not p.recorded and p.reason == expected
    assert all(math.isnan(p.per_sample(c)) for c in ("input", "compute", "skew", "jitter", "comm"))


def test_a_malformed_breakdown_names_the_key() -> None:
    d = make_diagnosis(2, batch=128, input_s=0.002, compute_s=0.05, exposed_s=0.01)
    d["ranks"][1]["compute_s"] = "fast"
    p = run_parts(d, 1000.0, 2)
    assert p.reason == "malformed: diagnosis.ranks[1].compute_s is not a number"
    d = make_diagnosis(2, batch=128, input_s=0.002, compute_s=0.05, exposed_s=0.01)
    d["typical_rank"] = 7
    assert "typical_rank (7) names no rank" in run_parts(d, 1000.0, 2).reason


def test_the_record_carries_the_diagnosis_through_its_log_line() -> None:
    record = diag_record("9", 2, **PATTERNS["skew"])
    back = decode_line(encode(record))
    assert isinstance(back, ResultRecord) and back.diagnosis == record.diagnosis
    old = json.loads(encode(replace(record, diagnosis=None)).split(" ", 1)[1])
    del old["diagnosis"], old["checksum"]
    assert decode_line(":::SCALESCOPE " + json.dumps(old)).diagnosis is None  # type: ignore[union-attr]


# --- the injected causes ------------------------------------------------------------------------


@pytest.mark.parametrize("cause", ["input", "skew", "comm", "jitter", "overlap"])
def test_each_injected_cause_gets_most_of_the_lost_points(tmp_path: Path, cause: str) -> None:
    runs = runs_of(tmp_path, pattern_records(cause))
    analysis = analyze(runs)
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    assert row["status"] == "recorded" and row["n"] == 3 and row["n_recorded"] == 3
    parts = {
        c: row[f"{c}_pts_mean"] for c in ("comm", "overlap", "input", "skew", "jitter", "compute")
    }
    assert max(parts, key=parts.__getitem__) == cause
    assert parts[cause] > 0.8 * row["lost_pts_mean"] > 0
    assert abs(row["remainder_pts_mean"]) < 2.0
    # an interval from three repeats, around the mean
    assert row[f"{cause}_pts_ci_low"] < parts[cause] < row[f"{cause}_pts_ci_high"]


def test_parts_add_up_to_the_headline_loss_of_the_scaling_table(tmp_path: Path) -> None:
    runs = runs_of(tmp_path, pattern_records("skew"))
    analysis = analyze(runs)
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    total = summed(row)
    assert total == pytest.approx(row["lost_pts_mean"], rel=1e-9)
    scaled = analysis.scaling[~analysis.scaling["is_baseline"]].iloc[0]
    # one definition of efficiency: the waterfall's loss is the scaling table's
    assert row["lost_pts_mean"] == pytest.approx(100 * (1 - scaled["parallel_efficiency"]))
    # the stacked step: the parts of the typical rank's step plus nothing left over
    step = row["input_step_s"] + row["compute_step_s"] + row["skew_step_s"] + row["comm_step_s"]
    assert step == pytest.approx(row["step_s"], rel=1e-6)
    assert row["other_step_s"] == pytest.approx(0.0, abs=1e-9)


def test_the_baseline_is_the_one_the_scaling_table_picks(tmp_path: Path) -> None:
    records = pattern_records("input")
    records += [
        diag_record(f"4{i}", 4, jitter=j, **{**PATTERNS["input"], "compute_s": 0.025})
        for i, j in enumerate(JITTER)
    ]
    runs = runs_of(tmp_path, records)
    from analysis.compute.metrics import BaselineSpec

    spec = BaselineSpec.parse("2")
    analysis = analyze(runs, baseline=spec)
    assert analysis.waterfall is not None
    t = analysis.waterfall.table
    assert set(t["baseline_world_size"]) == {2} == set(analysis.scaling["baseline_world_size"])
    # against the 2-device baseline, 4 devices lose less; the input wait is still the cause
    four = t[t["world_size"] == 4].iloc[0]
    scaled = analysis.scaling[analysis.scaling["world_size"] == 4].iloc[0]
    assert four["lost_pts_mean"] == pytest.approx(100 * (1 - scaled["parallel_efficiency"]))
    assert four["input_pts_mean"] > four["compute_pts_mean"]
    # the 1-device group, below the baseline, gains (negative loss), still adding up
    one = t[t["world_size"] == 1].iloc[0]
    assert one["lost_pts_mean"] < 0
    assert summed(one) == pytest.approx(one["lost_pts_mean"])


def test_findings_read_correctly_for_each_cause(tmp_path: Path) -> None:
    texts = {}
    for cause in ("input", "skew", "comm", "jitter"):
        folder = tmp_path / cause
        wf = waterfall(runs_of(folder, pattern_records(cause)))
        (item,) = findings(wf)
        texts[cause] = item["text"]
    first_part = {k: v.split(" lost: ", 1)[1] for k, v in texts.items()}
    assert first_part["input"].startswith("input wait, ")
    assert (
        "2 loader worker(s) per device (workload.num_workers); see `scalescope bench-data`"
        in (texts["input"])
    )
    assert first_part["skew"].startswith("rank skew, ")
    assert (
        "rank 1 on node node1 is slowest (+78% over the typical rank); check that node"
        in (texts["skew"])
    )
    assert first_part["comm"].startswith("exposed communication, ")
    assert (
        "busbw 1.5 GB/s (fit: latency 50 µs), 20% of the predicted all-reduce hidden behind "
        "backward; try a larger "
        "per-device batch, gradient accumulation or larger DDP buckets" in texts["comm"]
    )
    assert first_part["jitter"].startswith("rotating stragglers, ")
    assert "a different rank is slowest from step to step" in texts["jitter"]
    for text in texts.values():
        assert "At 2 devices (1 node), 3 run(s): " in text
        assert "under 1 point each: " in text and "compute per sample" in text
        assert "unexplained, 0 points [0, 0]." in text


def test_weak_scaling_uses_the_weak_scaling_efficiency(tmp_path: Path) -> None:
    # weak scaling: the per-device batch stays 128, so compute per sample stays put and the
    # loss is the slow input alone
    records = []
    for i, j in enumerate(JITTER):
        records.append(
            diag_record(f"1{i}", 1, input_s=0.001, compute_s=0.05, jitter=j, scaling_mode="weak")
        )
        records.append(diag_record(f"2{i}", 2, jitter=j, scaling_mode="weak", **PATTERNS["input"]))
    analysis = analyze(runs_of(tmp_path, records))
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    scaled = analysis.scaling[~analysis.scaling["is_baseline"]].iloc[0]
    expected = 100 * (1 - scaled["per_device_throughput_efficiency"])
    assert row["lost_pts_mean"] == pytest.approx(expected)
    assert row["input_pts_mean"] > 0.8 * row["lost_pts_mean"]
    assert abs(row["compute_pts_mean"]) < 3
    (item,) = findings(analysis.waterfall)
    assert "input wait, " in item["text"]


def test_repeats_without_a_breakdown_are_left_out_of_the_parts_only(tmp_path: Path) -> None:
    records = pattern_records("input")
    records.append(diag_record("29", 2, with_diagnosis=False, **PATTERNS["input"]))
    analysis = analyze(runs_of(tmp_path, records))
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    assert (row["n"], row["n_recorded"], row["input_pts_n"]) == (4, 3, 3)
    assert row["status"] == "recorded"
    # the loss is over the same three runs as its parts: they still add up
    parts = summed(row)
    assert parts == pytest.approx(row["lost_pts_mean"])
    table = diagnosis_table(analysis)
    assert table is not None and table.frame.iloc[0]["n (breakdown)"] == "4 (3)"


def test_the_step_chart_comes_from_the_runs_its_points_do(tmp_path: Path) -> None:
    """A repeat without a breakdown, and much slower: the step chart's step time is the mean
    over the three runs with one, as the points are, so the parts fill the step exactly (on
    the typical rank's clock they are its whole step: nothing is left as 'other'). Mixing
    the fourth run in made the step 15% longer than its parts."""
    records = pattern_records("input")
    records.append(diag_record("29", 2, with_diagnosis=False, jitter=1.6, **PATTERNS["input"]))
    analysis = analyze(runs_of(tmp_path, records))
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    with_parts = [r for r in records if r.identity.world_size == 2 and r.diagnosis]
    assert len(with_parts) == 3
    by_hand = statistics.mean(1 / r.steady_samples_per_s_per_device for r in with_parts)
    assert row["t_s"] == pytest.approx(by_hand)
    assert row["other_step_s"] == pytest.approx(0.0, abs=1e-12)


# --- not recorded -------------------------------------------------------------------------------


def test_runs_without_a_breakdown_are_not_recorded_never_zero(tmp_path: Path) -> None:
    runs = runs_of(tmp_path, pattern_records("input", base_diag=False))
    analysis = analyze(runs)
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    assert row["status"] == "not recorded (baseline: record has no breakdown)"
    assert all(math.isnan(row[f"{p}_pts_mean"]) for p in PARTS)
    assert row["lost_pts_mean"] > 0  # the loss itself is known from the headline
    table = diagnosis_table(analysis)
    assert table is not None
    cells = table.frame.iloc[0].tolist()
    assert cells.count(NOT_RECORDED) == 9  # six parts, unexplained, hidden share, busbw
    assert not any(c in ("0", "0.0", "0.0%") for c in cells)
    (item,) = findings(analysis.waterfall)
    assert "where they went: not recorded (baseline: record has no breakdown)." in item["text"]


def test_an_uncalibrated_scale_shows_communication_as_not_recorded(tmp_path: Path) -> None:
    runs = runs_of(tmp_path, pattern_records("comm", calibration="skipped", step_waits=False))
    analysis = analyze(runs)
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    assert row["status"] == "recorded"
    assert math.isnan(row["comm_pts_mean"]) and math.isnan(row["remainder_pts_mean"])
    assert row["input_pts_mean"] == pytest.approx(0.0, abs=1.0)
    table = diagnosis_table(analysis)
    assert table is not None
    first = table.frame.iloc[0]
    assert first["Exposed comm (pts)"] == NOT_RECORDED == first["Unexplained (pts)"]
    (item,) = findings(analysis.waterfall)
    assert "exposed communication: not recorded (calibration skipped: x)" in item["text"]


# --- charts and the command -------------------------------------------------------------------


def test_charts_render_to_png(tmp_path: Path) -> None:
    from analysis.present.charts import ranks_chart, step_parts_chart

    wf = waterfall(runs_of(tmp_path / "logs", pattern_records("skew")))
    series = wf.table["series"].iloc[0]
    assert set(wf.ranks["rank"]) == {0, 1}
    assert wf.ranks.loc[wf.ranks["is_slowest"], "rank"].tolist() == [1]
    for name, fig in (
        ("steps", step_parts_chart(wf.table, series)),
        ("ranks", ranks_chart(wf.ranks, series)),
    ):
        path = tmp_path / f"{name}.png"
        fig.savefig(path)
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    texts = [t.get_text() for t in ranks_chart(wf.ranks, series).axes[0].texts]
    assert "slowest: rank 1\non node1" in texts


def test_a_scale_without_a_breakdown_is_labelled_in_the_chart(tmp_path: Path) -> None:
    from analysis.present.charts import step_parts_chart

    records = [r for r in pattern_records("input") if r.identity.world_size == 1]
    records += [
        diag_record(f"2{i}", 2, with_diagnosis=False, **PATTERNS["input"]) for i in range(2)
    ]
    wf = waterfall(runs_of(tmp_path, records))
    fig = step_parts_chart(wf.table, wf.table["series"].iloc[0])
    assert NOT_RECORDED in [t.get_text() for t in fig.axes[0].texts]
    fig.savefig(tmp_path / "chart.png")


def test_chart_slugs_are_file_safe_and_unique() -> None:
    slugs = chart_slugs(["spiral · strong · fp32", "spiral-strong-fp32", "Ünï [x] / y"])
    assert slugs == {
        "spiral · strong · fp32": "spiral-strong-fp32",
        "spiral-strong-fp32": "spiral-strong-fp32-2",
        "Ünï [x] / y": "n-x-y",
    }


def test_summarize_writes_the_waterfall_end_to_end(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    for r in pattern_records("input"):
        write_log(logs / f"slurm-{r.identity.job_id}.out", r)
    out = tmp_path / "summary"
    proc = summarize_main(logs, "--out", out, "--format", "table", "--wide")
    assert proc.returncode == 0, proc.stderr
    assert "Where the efficiency went" in proc.stdout
    csv = pd.read_csv(out / "diagnosis.csv")
    scaled = csv[~csv["is_baseline"]].iloc[0]
    assert scaled["status"] == "recorded" and scaled["input_pts_mean"] > 30
    slug = "spiral-strong-fp32"
    for stem in (f"diagnosis_{slug}", f"ranks_{slug}"):
        assert (out / "charts" / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Where the efficiency went, in words" in report
    assert f"](charts/diagnosis_{slug}.png)" in report and f"](charts/ranks_{slug}.png)" in report
    assert "input wait, " in report and "loader worker(s) per device" in report
    doc = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [r["world_size"] for r in doc["diagnosis"]] == [1, 2]
    assert doc["diagnosis_findings"][0]["series"] == "spiral · strong · fp32"
    assert "diagnosis" not in doc["runs"][0]  # the raw breakdown stays in the records


def test_an_overlap_slowdown_is_taken_out_of_compute() -> None:
    d = make_diagnosis(2, batch=128, input_s=0.002, compute_s=0.08, exposed_s=0.001, overlap_s=0.03)
    p = run_parts(d, 128 / 0.083, 2)
    assert p.overlap_step_s == pytest.approx(0.03)
    assert p.compute_step_s == pytest.approx(0.05)
    # not measured: it stays inside compute, and the parts still add up
    d["calibration"]["overlap_slowdown_s"] = None
    p = run_parts(d, 128 / 0.083, 2)
    assert math.isnan(p.overlap_step_s) and p.compute_step_s == pytest.approx(0.08)
    a = attribute(
        p.t_s,
        {c: p.per_sample(c) for c in PARTS[:-1]},
        256 / 0.102,
        {
            "comm": 0.0,
            "overlap": 0.0,
            "input": 0.002 / 256,
            "skew": 0.0,
            "jitter": 0.0,
            "compute": 0.1 / 256,
        },
    )
    assert math.isnan(a["overlap"]) and math.isfinite(a["remainder"])


def _with_overlap_pairs(paired_ms: list[float], overlap_ms: list[float]) -> dict[str, Any]:
    """A 2-rank breakdown whose calibration has these pairs of windows: each pair's
    exposed all-reduce (synced - no_sync, the overlap already taken out) and overlap."""
    d = make_diagnosis(2, batch=128, input_s=0.002, compute_s=0.05, exposed_s=0.001)
    paired, overlap = [v / 1e3 for v in paired_ms], [v / 1e3 for v in overlap_ms]
    d["calibration"].update(
        paired_diffs_s=paired,
        exposed_comm_s=statistics.median(paired),
        overlap_diffs_s=overlap,
        overlap_slowdown_s=statistics.median(overlap),
    )
    return d


def test_an_overlap_slowdown_within_its_noise_is_folded_not_subtracted() -> None:
    """Pairs of 0.25, 0.11, 0.69 and 0.46 ms: mean 0.3775 ms, standard deviation 0.2532 ms,
    t(0.975, 3) = 3.182, so the 95% interval is 0.3775 -/+ 0.403 ms: it includes 0. The
    slowdown is noise: it stays inside compute, and the calibration's exposed all-reduce no
    longer has it subtracted (each pair's 1.0 ms plus its overlap: median 1.355 ms)."""
    d = _with_overlap_pairs([1.0, 1.0, 1.0, 1.0], [0.25, 0.11, 0.69, 0.46])
    p = run_parts(d, 128 / 0.053, 2)
    assert math.isnan(p.overlap_step_s)
    assert p.overlap_note.startswith("within noise (0.38 ms [-0.025, 0.78] over 4 pairs)")
    assert p.compute_step_s == pytest.approx(0.05)  # nothing taken out
    assert p.calibration_comm_s == pytest.approx(0.001355)


def test_an_overlap_slowdown_beyond_its_noise_is_taken_out_of_compute() -> None:
    d = _with_overlap_pairs([1.0, 1.0, 1.0], [30.0, 31.0, 29.0])
    p = run_parts(d, 128 / 0.053, 2)
    assert p.overlap_step_s == pytest.approx(0.030) and p.overlap_note == ""
    assert p.compute_step_s == pytest.approx(0.020)
    assert p.calibration_comm_s == pytest.approx(0.001)
    one = _with_overlap_pairs([1.0], [0.2])  # one pair: no interval to judge it by
    assert run_parts(one, 128 / 0.053, 2).overlap_step_s == pytest.approx(0.0002)


def test_a_negative_overlap_beyond_its_noise_is_named_as_a_disagreement(tmp_path: Path) -> None:
    """The synced windows reached their last gradient 10 ms sooner, consistently: not a gain
    communication gave backward but windows that disagree. It is folded, never subtracted
    from communication, and "Read this first" names the measurement."""
    d = _with_overlap_pairs([1.0, 1.0, 1.0], [-10.0, -11.0, -9.0])
    p = run_parts(d, 128 / 0.053, 2)
    assert math.isnan(p.overlap_step_s) and p.compute_step_s == pytest.approx(0.05)
    assert p.overlap_note.startswith("below zero beyond its noise (-10 ms")
    records = pattern_records("overlap", overlap_s=-0.010)
    for r in records:
        if r.diagnosis and r.identity.world_size == 2:
            r.diagnosis["calibration"]["overlap_diffs_s"] = [-0.010, -0.011, -0.009]
    analysis = analyze(runs_of(tmp_path, records))
    (note,) = [n for n in analysis.notes if "overlap slowdown" in n]
    assert note.startswith("spiral · strong · fp32 at 1x2: the overlap slowdown is below zero")
    assert "the calibration's synced passes reached their last gradient sooner" in note
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    assert math.isnan(row["overlap_pts_mean"])
    assert "communication overlapping backward: below zero beyond its noise" in finding(row)


def test_records_whose_communication_comes_from_the_calibration_say_so(tmp_path: Path) -> None:
    analysis = analyze(runs_of(tmp_path, pattern_records("comm", step_waits=False)))
    (note,) = [n for n in analysis.notes if "calibration windows" in n]
    assert note.startswith("spiral · strong · fp32 at 1x2: exposed communication comes from")
    fresh = analyze(runs_of(tmp_path / "new", pattern_records("comm")))
    assert not [n for n in fresh.notes if "calibration windows" in n]


# --- compute split: GPU work and host overhead ------------------------------------------------


def _with_split(record: ResultRecord, idle: float, util: float) -> ResultRecord:
    """The record's breakdown as a GPU run records it: NVML's utilisation, and compute split
    into GPU work and host overhead (scalescope.job.compute_split)."""
    d = dict(record.diagnosis or {})
    rows = [{"rank": r["rank"], "gpu_util_pct": util, "gpu_idle_share": idle} for r in d["ranks"]]
    d["compute_split"] = {
        "status": "recorded",
        "reason": None,
        "source": "nvml_utilization",
        "ranks": rows,
        "gpu_idle_share": idle,
    }
    return replace(record, diagnosis=d)


def test_a_launch_bound_gpu_is_named_in_the_compute_advice(tmp_path: Path) -> None:
    """A 2-device run whose compute per sample doubled while its GPU idled 56% of compute:
    the advice says launch-bound and names the profile setting; the table shows the split."""
    records = []
    for i, j in enumerate(JITTER):
        records.append(diag_record(f"1{i}", 1, input_s=0.001, compute_s=0.05, jitter=j))
        slow = diag_record(f"2{i}", 2, input_s=0.001, compute_s=0.05, jitter=j)
        records.append(_with_split(slow, idle=0.56, util=44.0))
    analysis = analyze(runs_of(tmp_path, records))
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    assert row["compute_pts_mean"] > 20
    assert row["gpu_idle_share_mean"] == pytest.approx(0.56)
    assert row["gpu_util_pct_mean"] == pytest.approx(44.0)
    (item,) = findings(analysis.waterfall)
    assert "the GPU idles 56% of compute: the step is launch-bound" in item["text"]
    assert "trainer.profile.steps=5" in item["text"]
    table = diagnosis_table(analysis)
    assert table is not None
    assert list(table.frame.iloc[0][["GPU busy (NVML)", "GPU idle in compute"]]) == ["44%", "56%"]


def test_a_cpu_run_has_no_split_column_and_no_launch_bound_advice(tmp_path: Path) -> None:
    records = []
    for i, j in enumerate(JITTER):
        records.append(diag_record(f"1{i}", 1, input_s=0.001, compute_s=0.05, jitter=j))
        records.append(diag_record(f"2{i}", 2, input_s=0.001, compute_s=0.05, jitter=j))
    analysis = analyze(runs_of(tmp_path, records))
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    assert math.isnan(row["gpu_idle_share_mean"])
    assert row["compute_split_note"] == "not in this record (recorded before the split)"
    (item,) = findings(analysis.waterfall)
    assert "launch-bound" not in item["text"] and "trainer.profile.steps=5" in item["text"]
    table = diagnosis_table(analysis)
    assert table is not None and "GPU idle in compute" not in table.frame.columns
