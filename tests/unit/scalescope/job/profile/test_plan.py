"""The profiler capture's decisions, as pure functions: whether a capture fits a run, which
ranks are profiled, the record's ``profile`` section (and that it survives the record's round
trip) and the summary line's words."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from core_helpers import make_result

from scalescope.job.profile.plan import (
    MEASURE_STEPS,
    call_boundaries,
    choose_ranks,
    not_captured,
    plan_capture,
    section,
    summary_phrase,
    trace_name,
    why_not,
)
from scalescope.record import (
    ResultRecord,
    decode_line,
    encode,
    from_dict,
    read_result_json,
    write_json_atomic,
)

SETTINGS = {
    "requested_steps": 5,
    "ranks_setting": "auto",
    "activities": ["cpu"],
    "record_shapes": False,
    "profile_memory": False,
}


# -- does a capture fit ----------------------------------------------------------------------
def test_call_boundaries_follow_the_groups_of_each_epoch() -> None:
    # 25 steps per epoch in calls of 8: 8, 16, 24, then the epoch's short last call
    assert call_boundaries(25, 2, None, 8) == [8, 16, 24, 25, 33, 41, 49, 50]
    assert call_boundaries(25, 3, 60, 8)[-3:] == [50, 58, 60]  # max_steps cuts the run
    assert call_boundaries(4, 2, None, 1) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_the_capture_starts_at_a_call_boundary_and_the_steady_state_after_it() -> None:
    b = call_boundaries(25, 3, None, 8)
    cap = plan_capture(b, 25, base=25, measure=MEASURE_STEPS, steps=5)
    assert cap is not None
    # measured over the call 25..33 (>= 3 steps), captured in whole calls from 33 (the call
    # 33..41 holds the 5 steps), steady from there
    assert (cap.measure_from, cap.first, cap.end, cap.steady_from) == (25, 33, 41, 41)
    one = plan_capture(call_boundaries(25, 3, None, 1), 25, base=25, measure=3, steps=5)
    assert one is not None and (one.first, one.end, one.steady_from) == (28, 33, 33)


def test_a_capture_its_epoch_would_cut_short_waits_for_the_next_epoch() -> None:
    b = call_boundaries(10, 3, None, 8)  # 8, 10, 18, 20, 28, 30
    cap = plan_capture(b, 10, base=10, measure=3, steps=5)
    # from 18 only 2 steps are left in the epoch: the capture starts at the next one's start
    assert cap is not None and (cap.first, cap.end, cap.steady_from) == (20, 28, 28)


def test_only_an_epoch_shorter_than_the_capture_ends_it_early() -> None:
    b = call_boundaries(4, 4, None, 1)
    cap = plan_capture(b, 4, base=4, measure=3, steps=5)
    # 7 is in the epoch 4..8, which holds no 5 steps: the capture is 7 only, and the steady
    # state starts once that epoch has ended
    assert cap is not None and (cap.first, cap.end, cap.steady_from) == (7, 8, 9)


def test_a_run_that_ends_in_its_warm_up_takes_no_capture() -> None:
    b = call_boundaries(10, 3, None, 8)  # the capture would end the run: no steady state left
    cap = plan_capture(b, 10, base=20, measure=0, steps=9)
    assert cap is not None and (cap.first, cap.end, cap.steady_from) == (20, 30, None)
    assert "none of its 30 steps would be left for the steady state" in why_not(
        cap, total=30, base=20, measure=0, steps=9
    )
    # a capture that would wait for an epoch the run does not have
    assert plan_capture(call_boundaries(10, 2, None, 8), 10, base=10, measure=3, steps=5) is None
    short = plan_capture(call_boundaries(10, 1, None, 8), 10, base=10, measure=3, steps=5)
    assert short is None
    reason = why_not(short, total=10, base=10, measure=3, steps=5)
    assert reason.startswith("the run ends in its warm-up: its 10 steps end before")
    assert "trainer.max_epochs" in reason


# -- which ranks ------------------------------------------------------------------------------
def test_auto_profiles_rank_zero_and_the_busiest_rank() -> None:
    c = choose_ranks("auto", [0.004, 0.0041, 0.022, 0.004], [0, 0, 1, 1], steps=8)
    assert c.ranks == (0, 2) and c.slowest == 2
    assert c.measured == {"0": 4.0, "1": 4.1, "2": 22.0, "3": 4.0}
    assert c.chosen_by.startswith("auto: rank 0 and rank 2, the busiest per step")
    assert "over 8 measured steps" in c.chosen_by


def test_auto_where_rank_zero_is_the_busiest_profiles_it_alone() -> None:
    c = choose_ranks("auto", [0.009, 0.004], [0, 0], steps=3)
    assert c.ranks == (0,) and c.slowest == 0
    assert c.chosen_by.startswith("auto: rank 0, itself the busiest")


def test_ties_go_to_the_lower_rank() -> None:
    assert choose_ranks("auto", [0.001, 0.005, 0.005], [0, 0, 0]).slowest == 1


def test_without_a_measurement_auto_falls_back_to_the_first_node_and_says_why() -> None:
    nodes = [0, 0, 1, 1]
    c = choose_ranks("auto", [None] * 4, nodes, unmeasured="diagnosis.enabled=false")
    assert c.ranks == (0, 1) and c.slowest is None and c.measured is None
    assert c.chosen_by.startswith("node: the slowest rank cannot be known in advance")
    assert "diagnosis.enabled=false" in c.chosen_by
    partly = choose_ranks("auto", [0.1, None, 0.2, 0.3], nodes)
    assert partly.ranks == (0, 1) and "not measured" in partly.chosen_by


def test_node_mode_and_one_rank() -> None:
    c = choose_ranks("node", [0.1, 0.9, 0.2, 0.3], [0, 0, 1, 1])
    assert c.ranks == (0, 1) and c.chosen_by.startswith("node: every rank of the first node")
    assert choose_ranks("auto", [0.1], [0]).ranks == (0,)


# -- the record -------------------------------------------------------------------------------
def _ops(first: str, share: float = 0.4) -> dict[str, Any]:
    return {
        "on": "cpu",
        "total_s": 0.1,
        "communication_s": 0.004,
        "steps": [33, 34, 35, 36, 37],
        "ops": [
            {"name": first, "self_s": share * 0.1, "share": share, "calls": 10},
            {"name": "aten::addmm", "self_s": 0.011, "share": 0.11, "calls": 10},
            {"name": "gloo:all_reduce", "self_s": 0.004, "share": 0.04, "calls": 5},
            {"name": "aten::relu", "self_s": 0.001, "share": 0.01, "calls": 5},
        ],
    }


def _part(rank: int, window_s: float, first: str = "aten::mm") -> dict[str, Any]:
    table = _ops(first)
    for op in table["ops"]:
        op["communication"] = op["name"].startswith("gloo:")
    return {
        "status": "captured",
        "reason": None,
        "steps": [33, 37],
        "trace": trace_name(rank),
        "window_s": window_s,
        "overhead_s": 0.02,
        "top_ops": table,
    }


SHARED = {
    "status": "chosen",
    "settings": SETTINGS,
    "chosen_by": "auto: rank 0 and rank 1, ...",
    "slowest_rank": 1,
    "measured": {"0": 4.0, "1": 22.0},
}


def test_the_section_from_every_ranks_part() -> None:
    s = section(
        SHARED, [_part(0, 0.10), _part(1, 0.13, "Optimizer.step#Adam.step")], steady_step_s=0.02
    )
    assert s["status"] == "captured" and s["reason"] is None
    assert s["steps"] == [33, 37] and s["ranks"] == [0, 1]
    assert s["traces"] == {"0": "traces/rank0.json", "1": "traces/rank1.json"}
    assert s["window_s"] == 0.13  # the slowest profiled rank's: the others wait for it
    assert s["cost_s"] == pytest.approx(0.13 - 5 * 0.02)
    assert s["requested_steps"] == 5 and s["measured"] == {"0": 4.0, "1": 22.0}
    assert set(s["top_ops"]) == {"0", "1"}


def test_a_rank_that_failed_is_the_reason_and_none_captured_is_not_captured() -> None:
    failed = {"status": "failed", "reason": "RuntimeError: no profiler"}
    s = section(SHARED, [_part(0, 0.1), failed], steady_step_s=None)
    assert (
        s["status"] == "captured" and s["ranks"] == [0, 1] and s["traces"] == {"0": trace_name(0)}
    )
    assert s["reason"] == "rank 1: RuntimeError: no profiler" and s["cost_s"] is None
    none = section(SHARED, [failed, None], steady_step_s=0.02)
    assert none["status"] == "not captured" and none["reason"] == "RuntimeError: no profiler"
    assert none["ranks"] == [0]
    off = section(
        {"status": "not captured", "reason": "too short", "settings": SETTINGS},
        [None],
        steady_step_s=None,
    )
    assert off == not_captured("too short", SETTINGS)


def test_the_record_round_trips_with_a_profile_section(tmp_path: Path) -> None:
    profile = section(SHARED, [_part(0, 0.1), _part(1, 0.12)], steady_step_s=0.02)
    result = replace(make_result(), profile=profile)
    decoded = decode_line(encode(result))
    assert isinstance(decoded, ResultRecord) and decoded == result
    assert decoded.profile is not None and decoded.profile["traces"]["1"] == "traces/rank1.json"
    write_json_atomic(tmp_path / "result.json", result.to_dict())
    assert read_result_json(tmp_path / "result.json") == result
    older = result.to_dict()
    del older["profile"]  # a record written before the section existed
    decoded_older = from_dict(older)
    assert isinstance(decoded_older, ResultRecord) and decoded_older.profile is None


# -- the summary line -------------------------------------------------------------------------
def test_the_summary_names_the_slowest_profiled_ranks_top_three() -> None:
    s = section(SHARED, [_part(0, 0.1), _part(1, 0.1, "aten::bmm")], steady_step_s=0.02)
    assert (
        summary_phrase(s)
        == "profile rank 1: aten::bmm 40%, aten::addmm 11%, gloo:all_reduce 4% (comm)"
    )
    no_slowest = dict(s, slowest_rank=None)
    assert summary_phrase(no_slowest).startswith("profile rank 0: aten::mm 40%")
    assert summary_phrase(not_captured("the run ends in its warm-up", SETTINGS)) == (
        "profile not captured (the run ends in its warm-up)"
    )
