"""The plan's rule (analysis.compute.plan.rule): it never recommends a scale another beats on
time to train and charged cost, judges the floor per charged unit (a node is charged whole),
says where the intervals leave the choice open and what would settle it."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from analysis_helpers import REPO, make_result
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.analyze import ProjectionRequest, analyze
from analysis.compute.plan import PlanRequest, charged_cost, dominated_by, make_plan
from analysis.read.frame import load_all, runs_frame
from analysis.read.parse import ParseResult, Run

QUICKSTART = REPO / "tests" / "fixtures" / "quickstart"


def _frame(times: dict[tuple[int, int], list[float]]) -> pd.DataFrame:
    """Spiral runs of (nodes, devices per node) -> each repeat's training time."""
    runs = []
    for (nodes, dpn), repeats in times.items():
        for i, t in enumerate(repeats):
            rec = make_result(f"{nodes}{dpn}{i}", world=(nodes, dpn), train_time_s=t)
            runs.append(Run(rec, ("x",)))
    return runs_frame(ParseResult(runs=runs))


def _plan(runs: pd.DataFrame, request: PlanRequest, projection: pd.DataFrame | None = None):  # type: ignore[no-untyped-def]
    result = make_plan(runs, analyze(runs).scaling, request, projection=projection)
    (a,) = result.answers
    return result.table, a


def _shape(row: dict | None) -> str | None:  # type: ignore[type-arg]
    return None if row is None else f"{int(row['nodes'])}x{int(row['devices_per_node'])}"


@pytest.fixture(scope="module")
def quickstart() -> pd.DataFrame:
    return load_all([str(QUICKSTART)], jobs=1).runs


@pytest.mark.parametrize("floor", [0.5, 0.7, 0.9, 0.95, 0.99])
def test_the_quick_start_never_names_a_dominated_scale(quickstart, floor: float) -> None:  # type: ignore[no-untyped-def]
    result = analyze(
        quickstart, project=ProjectionRequest([2, 4, 8]), plan=PlanRequest(2e11, "tokens", floor)
    )
    (a,) = result.plan.answers
    assert a["fastest"] is not None and dominated_by(a["fastest"]) is None
    assert dominated_by(a["cheapest"]) is None
    # 1x2 trains faster than 1x1 on the same node for fewer node-hours: 1x1 is dominated
    table = result.plan.table.set_index(["nodes", "devices_per_node"])
    assert table.loc[(1, 1), "dominated_by"] == "1x2"
    assert table.loc[(1, 2), "time_h"] < table.loc[(1, 1), "time_h"]
    assert table.loc[(1, 2), "node_hours"] < table.loc[(1, 1), "node_hours"]


def test_at_the_issue_floor_1x2_is_chosen_over_1x1(quickstart) -> None:  # type: ignore[no-untyped-def]
    """The reproduction: 95% floor, projected to 2, 4 and 8 nodes; 1x1 was chosen."""
    result = analyze(
        quickstart, project=ProjectionRequest([2, 4, 8]), plan=PlanRequest(2e11, "tokens", 0.95)
    )
    (a,) = result.plan.answers
    assert _shape(a["fastest"]) == "1x2" and a["fastest"]["source"] == "measured"
    # a node used as measured is the reference: 1x1 keeps half of what the node delivers
    table = result.plan.table.set_index(["nodes", "devices_per_node"])
    assert table.loc[(1, 2), "charged_efficiency"] == pytest.approx(1.0)
    assert table.loc[(1, 1), "charged_efficiency"] == pytest.approx(
        table.loc[(1, 1), "throughput"] / table.loc[(1, 2), "throughput"]
    )


def test_a_second_device_of_a_node_costs_no_node_hour() -> None:
    """The user's sweep: 1x2 at 63% per-device efficiency, two repeats far apart. Charged by
    the node, 1x2 is faster and cheaper: chosen, and 1x1 dominated. Charged by the device,
    1x2 costs more device-hours: 1x1 is chosen and nothing is dominated."""
    runs = _frame({(1, 1): [100.0, 104.0], (1, 2): [70.0, 90.0]})
    table, a = _plan(runs, PlanRequest(1e7))
    assert _shape(a["fastest"]) == "1x2" and a["settled"]
    assert list(table["dominated_by"].fillna("")) == ["1x2", ""]
    table, a = _plan(runs, PlanRequest(1e7, charge="device"))
    assert _shape(a["fastest"]) == "1x1"
    assert table["dominated_by"].isna().all()
    assert table["charged_efficiency"].tolist() == pytest.approx(table["efficiency"].tolist())


def test_an_open_choice_says_how_many_repeats_would_settle_it() -> None:
    """Two nodes keep the floor at their centre, not at the lower end of two noisy repeats:
    the choice between 1 node and 2 is open, and the repeats that settle it are sized from
    the spread measured."""
    runs = _frame({(1, 1): [100.0, 101.0], (2, 1): [60.0, 66.0]})
    table, a = _plan(runs, PlanRequest(1e7, floor=0.75))
    two = table.set_index("nodes").loc[2]
    assert two["charged_efficiency"] > 0.75 > two["charged_efficiency_low"]
    assert _shape(a["fastest"]) == "1x1" and not a["settled"]
    assert _shape(a["open"]) == "2x1"
    m = a["open_repeats"]
    assert isinstance(m, int) and 2 < m < 1000
    notes = analyze(runs, plan=PlanRequest(1e7, floor=0.75)).notes
    assert any(f"about {m} repeats of 2x1 and its baseline" in n for n in notes), notes


def test_steps_plan_the_same_training_at_every_scale_under_weak_scaling() -> None:
    """Weak scaling: the global batch grows with the devices. Steps count at the baseline's
    global batch, so every scale trains the same samples."""
    runs = []
    for world in (1, 2, 4):
        for i in range(2):
            rec = make_result(
                f"w{world}{i}",
                world=(world, 1),
                train_time_s=100.0 * (1 + 0.01 * i),
                scaling_mode="weak",
                weak_batch=64,
                train_samples=8000 * world,
            )
            runs.append(Run(rec, ("x",)))
    frame = runs_frame(ParseResult(runs=runs))
    table, _ = _plan(frame, PlanRequest(1000, "steps"))
    assert table["work_samples"].tolist() == [1000 * 64] * 3


scale_times = st.lists(
    st.floats(min_value=5.0, max_value=200.0, allow_nan=False), min_size=2, max_size=2
)


@settings(max_examples=40, deadline=None)
@given(
    times=st.tuples(scale_times, scale_times, scale_times, scale_times),
    floor=st.floats(min_value=0.05, max_value=0.99),
    charge=st.sampled_from(["node", "device"]),
)
def test_no_choice_is_ever_dominated(times, floor: float, charge: str) -> None:  # type: ignore[no-untyped-def]
    """Any timings, any floor, either charge: the scale chosen and the cheapest are never
    beaten on both time to train and charged cost, every scale marked dominated is beaten by
    the one it names, and no step the marginal unit is judged on, and no scale to measure
    next, is a dominated one."""
    shapes = [(1, 1), (1, 2), (2, 2), (4, 2)]
    runs = _frame(dict(zip(shapes, times, strict=True)))
    request = PlanRequest(1e7, floor=floor, charge=charge)
    table, a = _plan(runs, request)
    rows = table.to_dict("records")
    by_shape = {_shape(r): r for r in rows}

    def beaten(r: dict) -> bool:  # type: ignore[type-arg]
        t, c = float(r["time_h"]), charged_cost(r, request)
        return any(
            float(o["time_h"]) <= t
            and charged_cost(o, request) <= c
            and (float(o["time_h"]) < t or charged_cost(o, request) < c)
            for o in rows
        )

    for answer in (a["fastest"], a["cheapest"]):
        if answer is not None:
            assert not beaten(answer)
    stop = a["stops_paying"]
    if stop is not None:
        assert not beaten(stop["from"]) and not beaten(stop["to"])
    assert not any(beaten(row) for row, _ in a["measure_next"])
    for r in rows:
        by = dominated_by(r)
        assert (by is not None) == beaten(r)
        if by is not None:
            o = by_shape[by]
            assert float(o["time_h"]) <= float(r["time_h"])
            assert charged_cost(o, request) <= charged_cost(r, request)
    assert all(math.isfinite(float(r["charged_hours"])) for r in rows)


def test_a_dominated_scale_is_no_step_and_nothing_to_measure(quickstart) -> None:  # type: ignore[no-untyped-def]
    """The quick start projected on nodes of one device: 2x1 (two devices on two nodes) is
    slower than 1x2 and costs more node-hours, so it is dominated. The marginal node is judged
    on the step from 1x2 to 4x1, not to 2x1 (which adds a node and no device, and read
    "-0%"), and the scale to measure to check the floor is the first projected one not
    dominated, not 2x1."""
    result = analyze(
        quickstart,
        project=ProjectionRequest([2, 4, 8], devices_per_node=1),
        plan=PlanRequest(2e11, "tokens", 0.7),
    )
    (a,) = result.plan.answers
    table = result.plan.table.set_index(["nodes", "devices_per_node"])
    assert table.loc[(2, 1), "dominated_by"] == "1x2"
    stop = a["stops_paying"]
    assert stop is not None and _shape(stop["from"]) == "1x2" and _shape(stop["to"]) == "4x1"
    assert a["measure_next"] and all(dominated_by(row) is None for row, _ in a["measure_next"])
    assert "2x1" not in {_shape(row) for row, _ in a["measure_next"]}


def test_a_node_is_judged_whole_where_no_measured_scale_filled_one(quickstart) -> None:  # type: ignore[no-untyped-def]
    """The quick start (1x1 and 1x2 measured) projected on nodes of 4 devices, charged by the
    node: the reference is a node of 4 devices at the rate per device 1x2 measured, so 1x2,
    charged a whole node and using half of it, keeps 50% per node, and 1x4 its throughput
    over four of 1x2's devices (it read 184% against the half-used node, and the 70% floor
    meant nothing); the marginal step and the words judge against the same."""
    from analysis.present.plan.text import answer_text

    request = PlanRequest(2e11, "tokens", 0.7)
    result = analyze(
        quickstart, project=ProjectionRequest([1, 2, 4, 8], devices_per_node=4), plan=request
    )
    (a,) = result.plan.answers
    table = result.plan.table.set_index(["nodes", "devices_per_node"])
    per_device = table.loc[(1, 2), "throughput"] / 2
    assert table.loc[(1, 2), "charged_efficiency"] == pytest.approx(0.5)
    assert table.loc[(1, 4), "charged_efficiency"] == pytest.approx(
        table.loc[(1, 4), "throughput"] / (4 * per_device)
    )
    assert table.loc[(1, 4), "charged_efficiency"] <= 1.0
    assert _shape(a["reference"]) == "1x2" and a["reference_devices"] == 4
    stop = a["stops_paying"]
    assert stop is not None
    assert stop["marginal"] == pytest.approx(
        (stop["to"]["throughput"] - stop["from"]["throughput"]) / stop["added"] / (4 * per_device)
    )
    words = answer_text(a, request, "")
    assert "what a node of 4 devices delivers at the rate per device measured in 1x2" in words


def test_the_chart_reads() -> None:
    """Two repeats far apart (the issue's 57.9% [10.1, 331.4]): the legend says what a red
    cross marks; an interval too wide to read is capped with an arrow and its end printed;
    no two scale labels overlap."""
    from analysis.present.plan.chart import CAP, plan_chart

    runs = _frame({(1, 1): [100.0, 101.0], (2, 1): [40.0, 90.0], (4, 1): [30.0, 31.0]})
    table, _ = _plan(runs, PlanRequest(1e7))
    series = table["series"].iloc[0]
    fig = plan_chart(table, series, 0.7)
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "measured, lower end below the 70% floor" in legend
    wide = table[table["time_high_h"] > CAP * table["time_h"]]
    texts = [t.get_text() for t in ax.texts]
    ends = [t for t in texts if t.startswith(("high ", "low "))]
    assert len(wide) >= 1 and len(ends) >= len(wide)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.texts if re.fullmatch(r"\d+x\d+", t.get_text())]
    assert len(labels) == len(table)
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b)


def test_memory_per_device_at_each_planned_scale() -> None:
    """DDP holds the whole state at every scale; FSDP's shards shrink with the devices and
    the part left whole does not (fitted from two measured world sizes); a state beyond the
    device's memory is marked as not fitting."""
    from dataclasses import replace

    gib = 2**30
    runs = []
    for strategy in ("ddp", "fsdp"):
        for world in (1, 2):
            for i in range(2):
                r = make_result(
                    f"{strategy}{world}{i}",
                    world=(1, world),
                    train_time_s=100.0 / world * (1 + 0.01 * i),
                    strategy=strategy,
                )
                state = 12 * gib if strategy == "ddp" else 2 * gib + 10 * gib // world
                memory = {"model_state_bytes": [state] * world, "device_memory_gib": [10.0] * world}
                runs.append(Run(replace(r, memory=memory), ("x",)))
    frame = runs_frame(ParseResult(runs=runs))
    scaling = analyze(frame).scaling
    projection = pd.DataFrame(
        [
            {
                "series": series,
                "what_if": "as measured",
                "nodes": n,
                "devices_per_node": 2,
                "world_size": 2 * n,
                "per_device_batch_size": 128 // n,
                "efficiency": 0.9,
                "efficiency_low": 0.8,
                "efficiency_high": 0.95,
                "throughput": 0.0,
            }
            for series in scaling["series"].unique()
            for n in (2, 4)
        ]
    )
    result = make_plan(frame, scaling, PlanRequest(1e7), projection=projection)
    table = result.table
    for series, part in table.groupby("series"):
        part = part.set_index("world_size")
        if series.endswith("fsdp"):
            assert part.loc[8, "model_state_gib"] == pytest.approx(2 + 10 / 8)
            assert part.loc[8, "model_state_basis"] == "sharded: fitted"
            assert part.loc[1, "fits"] is False or part.loc[1, "fits"] == False  # noqa: E712
            assert bool(part.loc[8, "fits"])
        else:
            assert part["model_state_gib"].tolist() == pytest.approx([12.0] * len(part))
            assert not part["fits"].astype(bool).any()
    from analysis.present.plan.text import plan_study

    (s,) = [s for s in plan_study(result, scaling, frame) if s["series"].endswith("fsdp")]
    assert "Model state per device" in s["columns"]
    column = s["columns"].index("Model state per device")
    assert s["rows"][0][column] == "12 GiB > 10 GiB: does not fit"


def test_a_plan_whose_larger_scales_are_all_beaten_says_so() -> None:
    """1x1 trains faster than 2x1 and 4x1, which also cost more node-hours: every scale that
    adds a node is dominated, so there is no marginal node to judge, and the words say why,
    not that no scale planned adds one."""
    from analysis.present.plan.text import answer_text

    request = PlanRequest(1e7)
    runs = _frame({(1, 1): [100.0, 101.0], (2, 1): [150.0, 151.0], (4, 1): [200.0, 202.0]})
    _, a = _plan(runs, request)
    assert a["stops_paying"] is None and not a["adds_units"]
    assert {_shape(r) for r in a["dominated"]} == {"2x1", "4x1"}
    words = answer_text(a, request, "")
    assert "No scale planned adds a node" not in words
    assert "2x1 and 4x1" in words and "no marginal node to judge" in words
