"""The efficiency waterfall: lost efficiency split into communication, input, skew, compute.

Records are built in tests/waterfall_helpers.py with a ``diagnosis`` laid out as the job side
writes it, each with an injected cause (slow input, one slow rank, a communication-heavy
model), and the analysis must put the lost points where the cause is. How one record is read
into parts: test_run_parts.py; the findings in words: test_findings.py; the charts:
test_charts.py.
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
from analysis_helpers import summarize_main, write_log
from hypothesis import given
from hypothesis import strategies as st
from waterfall_helpers import (
    JITTER,
    PATTERNS,
    diag_record,
    pattern_records,
    runs_of,
    with_overlap_pairs,
)

from analysis.analyze import analyze
from analysis.compute.findings import finding, findings
from analysis.compute.run_parts import run_parts
from analysis.compute.waterfall import NOT_RECORDED, PARTS, attribute, chart_slugs
from analysis.present.display import MISSING
from analysis.present.tables.tables import diagnosis_table
from scalescope.record import ResultRecord, decode_line, encode


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


# --- reading one record -------------------------------------------------------------------------


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


def test_parts_and_the_unexplained_rest_are_their_injected_sizes(tmp_path: Path) -> None:
    """Worked by hand, each part on its own (none of them derived from the others):
    baseline, 1 device, 2 + 100 ms a step of 256 samples; at 2 devices (128 each) rank 1
    needs 40 ms more, so the typical rank 0 has 1 ms input, 50 ms compute, waits 40 ms for
    rank 1 and 1 ms for the all-reduce: a 92 ms step. Its headline throughput is injected
    8 ms a step slower than that breakdown (1280 samples/s per device: 100 ms a step), a
    time no part holds. Per 100 ms of the run's step: lost = 100 (1 - 1280 x 0.102 / 256) =
    49 points; rank skew 40, exposed comm 1, input and compute 0 (the baseline's per sample);
    unexplained: the injected 8."""
    records = []
    for i in range(3):
        records.append(diag_record(f"1{i}", 1, input_s=0.002, compute_s=0.100))
        two = diag_record(f"2{i}", 2, **PATTERNS["skew"])
        records.append(
            replace(two, steady_samples_per_s=2560.0, steady_samples_per_s_per_device=1280.0)
        )
    analysis = analyze(runs_of(tmp_path, records))
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    hand = {"skew": 40.0, "comm": 1.0, "input": 0.0, "compute": 0.0, "jitter": 0.0}
    for part, points in hand.items():
        assert row[f"{part}_pts_mean"] == pytest.approx(points, abs=1e-9), part
    assert math.isnan(row["overlap_pts_mean"])  # not measured: inside compute
    assert row["lost_pts_mean"] == pytest.approx(49.0)
    assert row["remainder_pts_mean"] == pytest.approx(8.0)
    scaled = analysis.scaling[~analysis.scaling["is_baseline"]].iloc[0]
    # one definition of efficiency: the waterfall's loss is the scaling table's
    assert scaled["parallel_efficiency"] == pytest.approx(0.51)
    # the stacked step: the typical rank's parts are its recorded 92 ms, the headline's
    # 100 ms step holds the injected 8 ms on top as "other"
    step = row["input_step_s"] + row["compute_step_s"] + row["skew_step_s"] + row["comm_step_s"]
    assert step == pytest.approx(0.092) and row["step_s"] == pytest.approx(0.100)
    assert row["other_step_s"] == pytest.approx(0.008)


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


def _two_steps_a_batch(record: ResultRecord) -> ResultRecord:
    """``record`` as a module that steps two optimizers a batch (a GAN) records it: its
    diagnosis' parts per optimizer step (Lightning's, two a batch: 200 in all), its batches
    100, its headline throughput a batch per two such steps."""
    assert record.diagnosis is not None
    batch = record.diagnosis["per_device_batch_size"]
    step = record.diagnosis["ranks"][0]["step_time_s"]
    per_device = batch / (2 * step)
    return replace(
        record,
        steps=200,
        batch={"per_device_max": batch, "optimizer_steps": 100, "warnings": []},
        steady_samples_per_s=per_device * record.identity.world_size,
        steady_samples_per_s_per_device=per_device,
    )


def test_two_optimizer_steps_a_batch_divide_each_part_by_a_step_s_samples(tmp_path: Path) -> None:
    """The comm pattern's parts fill its step (nothing unexplained) when each optimizer step
    is half a batch too: at 2 devices 40 ms of exposed all-reduce in a 91 ms step, 44 points,
    and no input or compute lost (half the batch in half the step). Divided by the samples of
    a batch, every part was half its size and half the loss unexplained."""
    records = [_two_steps_a_batch(r) for r in pattern_records("comm")]
    analysis = analyze(runs_of(tmp_path, records))
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    assert row["per_device_batch_size"] == 128  # the batch, as recorded
    assert row["comm_pts_mean"] == pytest.approx(row["lost_pts_mean"], abs=1.0)
    assert row["comm_pts_mean"] == pytest.approx(44.0, abs=1.5)
    assert abs(row["remainder_pts_mean"]) < 1.0
    assert abs(row["input_pts_mean"]) < 1.0 and abs(row["compute_pts_mean"]) < 3.0
    # the step chart's step is an optimizer step, which its parts fill
    assert row["step_s"] == pytest.approx(0.091, rel=0.03)
    assert row["other_step_s"] == pytest.approx(0.0, abs=2e-3)


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


def test_a_negative_overlap_beyond_its_noise_is_named_as_a_disagreement(tmp_path: Path) -> None:
    """The synced windows reached their last gradient 10 ms sooner, consistently: not a gain
    communication gave backward but windows that disagree. It is folded, never subtracted
    from communication, and "Read this first" names the measurement."""
    d = with_overlap_pairs([1.0, 1.0, 1.0], [-10.0, -11.0, -9.0])
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


def _with_split(
    record: ResultRecord, idle: float, util: float, alone: float | None = None
) -> ResultRecord:
    """The record's breakdown as a GPU run records it: NVML's utilisation, and compute split
    into GPU work and host overhead (scalescope.job.diagnosis.compute_split); ``alone``: the
    time per step the collectives' kernels ran alone (absent in records made before it was)."""
    d = dict(record.diagnosis or {})
    rows = [{"rank": r["rank"], "gpu_util_pct": util, "gpu_idle_share": idle} for r in d["ranks"]]
    if alone is not None:
        for row in rows:
            row["comm_alone_s"] = alone
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
        records.append(_with_split(slow, idle=0.56, util=44.0, alone=0.0032 * j))
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
    assert row["gpu_comm_alone_s_mean"] == pytest.approx(0.0032)
    cells = ["GPU busy (NVML)", "Collectives alone (ms/step)", "GPU idle in compute"]
    assert list(table.frame.iloc[0][cells]) == ["44%", "3.2", "56%"]
    # a record made before the collectives' lone time was: the split, without that cell
    older = [_with_split(r, 0.56, 44.0) if r.identity.world_size == 2 else r for r in records]
    older_table = diagnosis_table(analyze(runs_of(tmp_path / "older", older)))
    assert older_table is not None
    assert list(older_table.frame.iloc[0][cells]) == ["44%", MISSING, "56%"]


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


# --- other programs' load on the cores ------------------------------------------------------


def _loaded(record: ResultRecord, share: float) -> ResultRecord:
    """The record as if other programs had kept ``share`` of its one machine's 2 cores busy
    over a 10 s training interval while its threads waited for a core a third as long as
    they ran."""
    own = 20.0 * (1 - share)
    machine = {"nodes": ["n1"], "cores": 2, "wall_s": 10.0, "busy_cpu_s": 20.0}
    machine.update(own_cpu_s=own, other_cpu_s=20.0 * share, own_wait_s=own / 3)
    return replace(record, host_load=[machine])


@pytest.mark.parametrize(
    ("base_share", "scaled_share", "said"),
    [
        (
            0.5,
            0.0,
            "other programs took 50% of the baseline's cores: its slower time makes the loss "
            "here look smaller than it is; the per-device batch",
        ),
        (
            0.0,
            0.3,
            "other programs took 30% of these runs' cores (see Read this first): the compute "
            "part holds that contention; the per-device batch",
        ),
        (0.05, 0.05, None),
    ],
)
def test_other_programs_load_is_named_in_the_compute_advice(
    tmp_path: Path, base_share: float, scaled_share: float, said: str | None
) -> None:
    """Compute per sample that grew while other programs took the cores, at the scale point
    or at its baseline: the advice says so, each the way it bends the loss, before naming
    the work; under the note's threshold (10%) it says nothing of it."""
    records = []
    for i, j in enumerate(JITTER):
        base = diag_record(f"1{i}", 1, input_s=0.001, compute_s=0.05, jitter=j)
        scaled = diag_record(f"2{i}", 2, input_s=0.001, compute_s=0.08, jitter=j)
        records += [_loaded(base, base_share), _loaded(scaled, scaled_share)]
    analysis = analyze(runs_of(tmp_path, records))
    assert analysis.waterfall is not None
    row = scaled_row(analysis.waterfall.table)
    slowed = [s if s >= 0.1 else 0.0 for s in (scaled_share, base_share)]
    assert row["other_cpu_share_mean"] == pytest.approx(slowed[0])
    assert row["baseline_other_cpu_share_mean"] == pytest.approx(slowed[1])
    (item,) = findings(analysis.waterfall)
    if said is None:
        assert "other programs" not in item["text"]
    else:
        assert said in item["text"]
