"""The plan (analysis.compute.plan): time to train and node-hours checked by hand on the quick
start's logs, the projected rows' intervals, and the recommendation rule in built cases."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from analysis_helpers import REPO, make_result

from analysis.analyze import ProjectionRequest, analyze
from analysis.compute.plan import (
    PlanError,
    PlanRequest,
    make_plan,
    tokens_per_sample,
    work_in_samples,
)
from analysis.read.frame import load_all, runs_frame
from analysis.read.parse import ParseResult, Run

QUICKSTART = REPO / "tests" / "fixtures" / "quickstart"
TOKENS = 2e11
SEQ_LEN = 32  # the quick start's gpt: preset tiny, seq_len 32 (its workload parameters)


@pytest.fixture(scope="module")
def quickstart() -> tuple[pd.DataFrame, object]:
    runs = load_all([str(QUICKSTART)], jobs=1).runs
    result = analyze(runs, project=ProjectionRequest([2, 4, 8]), plan=PlanRequest(TOKENS, "tokens"))
    return runs, result


def _by_hand(rows: pd.DataFrame) -> tuple[float, float]:
    """(steady throughput's mean, start-up + warm-up s) of one scale's runs: the arithmetic
    mean, the one the scaling table's speedup divides."""
    steady = rows["steady_samples_per_s"].astype(float)
    warm = rows["train_time_s"] * (1 - rows["samples_per_s"] / steady)
    return float(steady.mean()), float(rows["setup_time_s"].mean() + warm.mean())


def test_measured_rows_match_a_hand_calculation(quickstart) -> None:  # type: ignore[no-untyped-def]
    runs, result = quickstart
    plan = result.plan.table
    measured = plan[plan["source"] == "measured"]
    assert len(measured) == 2
    for _, row in measured.iterrows():
        mine = runs[(runs["nodes"] == row["nodes"]) & (runs["world_size"] == row["world_size"])]
        mean, fixed = _by_hand(mine)
        hours = (TOKENS / SEQ_LEN / mean + fixed) / 3600
        assert row["time_h"] == pytest.approx(hours, rel=1e-9)
        assert row["node_hours"] == pytest.approx(hours * row["nodes"], rel=1e-9)
        assert row["device_hours"] == pytest.approx(hours * row["world_size"], rel=1e-9)
        assert row["time_low_h"] < row["time_h"] < row["time_high_h"]


def test_projected_rows_contain_the_hand_centre_and_widen_with_scale(quickstart) -> None:  # type: ignore[no-untyped-def]
    runs, result = quickstart
    plan = result.plan.table
    projected = plan[plan["source"] == "projected"].sort_values("world_size")
    assert projected["nodes"].tolist() == [2, 4, 8]
    largest = runs[runs["world_size"] == runs["world_size"].max()]
    _, fixed = _by_hand(largest)
    proj = result.projection.table
    proj = proj[proj["what_if"] == "as measured"].set_index("nodes")
    widths, spans = [], []
    for _, row in projected.iterrows():
        hours = (TOKENS / SEQ_LEN / proj.loc[row["nodes"], "throughput"] + fixed) / 3600
        assert row["startup_s"] + row["warmup_cost_s"] == pytest.approx(fixed, rel=1e-9)
        assert row["time_low_h"] < hours < row["time_high_h"]
        assert row["node_hours_low"] <= hours * row["nodes"] <= row["node_hours_high"]
        widths.append(row["node_hours_high"] - row["node_hours_low"])
        spans.append(row["time_high_h"] / row["time_low_h"])
    assert widths == sorted(widths) and spans == sorted(spans)
    assert widths[0] < widths[-1] and spans[0] < spans[-1]


def test_a_unit_the_records_do_not_count_is_refused(quickstart) -> None:  # type: ignore[no-untyped-def]
    spiral = _frame({(1, 1): 100.0, (2, 1): 55.0})
    with pytest.raises(
        PlanError, match=r"^unit: tokens, but the records count samples \(.*workload spiral "
    ):
        make_plan(spiral, analyze(spiral).scaling, PlanRequest(1e9, "tokens"))


def test_tokens_per_sample_is_the_records_field_else_the_gpt_parameters() -> None:
    """The record's ``tokens_per_sample`` (a user's module that said it); a record made before
    the field existed: the gpt workload's sequence length from its parameters."""
    assert tokens_per_sample("examples.m:M", '{"init_args":{}}', 512) == 512
    assert tokens_per_sample("examples.m:M", '{"init_args":{}}', pd.NA) is None
    assert tokens_per_sample("examples.m:M", '{"tokens_per_sample":64}', None) == 64
    assert tokens_per_sample("gpt", '{"preset":"tiny","seq_len":null}') == 32
    assert tokens_per_sample("gpt", '{"preset":"small"}', pd.NA) == 256
    assert tokens_per_sample("spiral", "{}") is None
    assert tokens_per_sample("gpt", "not json") is None


def test_a_plan_in_tokens_reads_the_records_tokens_per_sample() -> None:
    """Spiral records that say 10 tokens per sample (as a user's module would): the work in
    samples is the tokens over 10, and the column reaches the runs frame."""
    runs = []
    for world, t in {(1, 1): 100.0, (2, 1): 55.0}.items():
        rec = make_result(f"{world[0]}", world=world, train_time_s=t)
        runs.append(Run(replace(rec, tokens_per_sample=10), ("x",)))
    frame = runs_frame(ParseResult(runs=runs))
    assert frame["tokens_per_sample"].tolist() == [10, 10]
    assert work_in_samples(PlanRequest(1e9, "tokens"), frame, "s") == pytest.approx(1e8)


# --- the rule ---------------------------------------------------------------------------------


def _frame(times: dict[tuple[int, int], float], repeats: int = 2) -> pd.DataFrame:
    """Spiral runs of (nodes, devices per node) -> train time, ``repeats`` each, 1% apart."""
    runs = []
    for world, t in times.items():
        for i in range(repeats):
            rec = make_result(
                f"{world[0]}{world[1]}{i}", world=world, train_time_s=t * (1 + 0.01 * i)
            )
            runs.append(Run(rec, ("x",)))
    return runs_frame(ParseResult(runs=runs))


# efficiencies 100%, 90%, 60% on 1, 2 and 4 nodes of one device
POOR = {(1, 1): 100.0, (2, 1): 100.0 / 1.8, (4, 1): 100.0 / 2.4}


def _answer(runs: pd.DataFrame, request: PlanRequest, projection: pd.DataFrame | None = None):  # type: ignore[no-untyped-def]
    result = make_plan(runs, analyze(runs).scaling, request, projection=projection)
    (a,) = result.answers
    return result.table, a


def test_fastest_above_the_floor_and_cheapest_differ() -> None:
    table, a = _answer(_frame(POOR), PlanRequest(1e7))
    assert (a["fastest"]["nodes"], a["cheapest"]["nodes"]) == (2, 1)
    fastest_overall = table.loc[table["time_h"].idxmin()]
    assert fastest_overall["nodes"] == 4  # faster still, but below the floor
    assert a["stops_paying"]["from"]["nodes"] == 2 and a["stops_paying"]["to"]["nodes"] == 4


def test_measured_points_only() -> None:
    _, a = _answer(_frame(POOR), PlanRequest(1e7, floor=0.5))
    assert a["fastest"]["nodes"] == 4 and a["fastest"]["source"] == "measured"
    assert not a["has_projection"] and not a["no_projected_clears"]
    # the fastest is the largest measured scale: measure beyond it
    assert [(r["nodes"], why) for r, why in a["measure_next"]] == [(4, "beyond")]


def test_no_projected_scale_clears_the_floor() -> None:
    runs = _frame({(1, 1): 100.0, (2, 1): 100.0 / 1.9})
    projection = pd.DataFrame(
        [
            {
                "series": s,
                "what_if": "as measured",
                "nodes": n,
                "devices_per_node": 1,
                "world_size": n,
                "per_device_batch_size": 256 // n,
                "efficiency": e,
                "efficiency_low": e - 0.1,
                "efficiency_high": e + 0.05,
                "throughput": e * n * 80.0,
            }
            for s in analyze(runs).scaling["series"].unique()
            for n, e in ((4, 0.72), (8, 0.6))
        ]
    )
    _, a = _answer(runs, PlanRequest(1e7), projection)
    assert a["fastest"]["nodes"] == 2 and a["fastest"]["source"] == "measured"
    assert a["has_projection"] and a["no_projected_clears"]
    # 4 nodes keep the floor at their centre (72%) but not at the lower end: the choice is
    # open, and measuring 4 nodes settles it
    assert a["open"]["nodes"] == 4 and not a["settled"]
    assert [(r["nodes"], why) for r, why in a["measure_next"]] == [(4, "projected")]


def test_a_scale_that_cannot_be_projected_has_no_figures_and_says_so() -> None:
    """100,000 nodes of the quick start's strong-scaling series leave less than one sample a
    micro-batch: the projection gives no efficiency, and neither its throughput (it gave
    0.0014 samples/s a device) nor the plan's table ('nan', '— no interval') pretend to."""
    from analysis.present.plan.text import table_rows

    runs = load_all([str(QUICKSTART)], jobs=1).runs
    request = PlanRequest(2e7, "samples")
    result = analyze(runs, project=ProjectionRequest([2, 100000]), plan=request)
    proj = result.projection.table
    far = proj[proj["nodes"] == 100000]
    assert len(far) and far["efficiency"].isna().all() and far["throughput"].isna().all()
    plan = result.plan.table
    shown = table_rows(plan.to_dict("records"), request).set_index("Scale")
    row = shown.loc["100000x2"]
    assert row["Note"] == "cannot be projected"
    assert {row["Mean samples/s"], row["Time to train (h)"], row["Node-hours"]} == {"—"}
    assert shown.loc["2x2", "Time to train (h)"].count("[") == 1  # a projected scale keeps its band


def test_the_plans_throughput_is_written_as_its_times_are() -> None:
    """Throughputs of every size read alike in the plan's table: whole, thousands grouped,
    never in exponent form beside a grouped one (4.774e+05 beside 2,870)."""
    from analysis.present.plan.text import table_rows

    runs = load_all([str(QUICKSTART)], jobs=1).runs
    request = PlanRequest(2e7, "samples")
    plan = analyze(runs, project=ProjectionRequest([2]), plan=request).plan.table
    rows = plan.to_dict("records")
    rows[0] = {**rows[0], "throughput": 477_400.0}
    rows[1] = {**rows[1], "throughput": 2_870.4}
    shown = table_rows(rows, request)["Mean samples/s"].tolist()
    assert shown[:2] == ["477,400", "2,870"]
