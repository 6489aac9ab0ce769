"""Profiler traces on demand (``trainer.profile``), with real processes (2 ranks, gloo).

* a profiled run writes one trace per profiled rank in its run directory, plain JSON whose
  ``ProfilerStep#`` markers hold exactly the profiled steps (one per training call, whose
  optimizer steps are its ``Optimizer.step`` annotations), events nested as Perfetto needs
  them, and its record says so;
* the profiled steps lie in the warm-up: the steady throughput and the breakdown of the same
  run with and without profiling agree (several runs of each, against their own noise);
* gpt's top operation is a matrix product, and the gloo collectives are labelled;
* with one rank made slow, ``ranks: auto`` profiles it, no rank named by the user;
* without the diagnosis the first node's ranks are profiled, and the record says why;
* a run too short for the capture trains as it would unprofiled and says why.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from core_helpers import TINY, TrainRun, run_train

from scalescope.record import ResultRecord
from scalescope.traces import is_communication, profiled_steps, read_trace, top_operations

pytestmark = pytest.mark.timeout(900)

SPIRAL = (*TINY, "trainer.max_epochs=3", "trainer.devices=2")
"""3 epochs of 25 steps in calls of 8: a warm-up of 25, measured 25-33, profiled in the call
33-40 (at least 5 steps, whole calls), steady from 41 (34 steady steps; 50 without)."""
PROFILE = ("trainer.profile.steps=5",)
REPEATS = 2
"""Runs of each, interleaved: the comparison is of means, against the spread of each pair."""


def misnested(trace: dict[str, Any]) -> int:
    """Complete events that overlap an enclosing one on their thread without nesting in it:
    the JSON trace format forbids them, and Perfetto drops them."""
    threads: dict[Any, list[dict[str, Any]]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            threads.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    bad = 0
    for events in threads.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        ends: list[float] = []
        for e in events:
            while ends and ends[-1] <= e["ts"]:
                ends.pop()
            if ends and e["ts"] + e["dur"] > ends[-1] + 1:  # 1 us of rounding
                bad += 1
            ends.append(e["ts"] + e["dur"])
    return bad


def optimizer_steps(trace: dict[str, Any]) -> int:
    return sum(
        1
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("Optimizer.step#")
    )


def only_result(run: TrainRun) -> ResultRecord:
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    return result


def profile_of(result: ResultRecord) -> dict[str, Any]:
    assert result.profile is not None
    return result.profile


@pytest.fixture(scope="module")
def spiral(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[ResultRecord]]:
    """The same 2-process run without and with profiling, REPEATS of each, interleaved."""
    root = tmp_path_factory.mktemp("profile-spiral")
    out: dict[str, list[ResultRecord]] = {"off": [], "on": []}
    for i in range(REPEATS):
        out["off"].append(only_result(run_train(root, *SPIRAL, output_dir=root / f"off{i}")))
        out["on"].append(
            only_result(run_train(root, *SPIRAL, *PROFILE, output_dir=root / f"on{i}"))
        )
    return out


# --- the traces ------------------------------------------------------------------------------


def test_one_trace_per_profiled_rank_with_exactly_the_profiled_steps(
    spiral: dict[str, list[ResultRecord]],
) -> None:
    for result in spiral["on"]:
        p = profile_of(result)
        assert p["status"] == "captured", p
        first, last = p["steps"]
        assert (first, last) == (33, 40)  # the call after the measured steps, whole
        assert p["ranks"] and 0 in p["ranks"] and set(p["traces"]) == {str(r) for r in p["ranks"]}
        run_dir = Path(result.identity.run_dir)
        files = sorted((run_dir / "traces").iterdir())
        assert [f.name for f in files] == [f"rank{r}.json" for r in p["ranks"]]
        for rank in p["ranks"]:
            path = run_dir / p["traces"][str(rank)]
            trace = json.loads(path.read_text())  # plain JSON, as Perfetto and HTA read it
            assert profiled_steps(trace) == [33]  # one marker per call, named by its first step
            assert optimizer_steps(trace) == last - first + 1
            assert misnested(trace) == 0
            assert trace["distributedInfo"]["rank"] == rank
            table = p["top_ops"][str(rank)]
            assert table["on"] == "cpu" and table["steps"] == [33]
            assert table == top_operations(read_trace(path))
        assert p["window_s"] > 0 and p["overhead_s"] >= 0 and p["cost_s"] is not None
    for result in spiral["off"]:
        assert result.profile is None
        assert not (Path(result.identity.run_dir) / "traces").exists()


def test_the_profiled_steps_stay_out_of_every_timed_figure(
    spiral: dict[str, list[ResultRecord]],
) -> None:
    for result in spiral["on"]:
        last = profile_of(result)["steps"][1]
        assert result.warmup_steps is not None and result.warmup_steps > last
        assert result.steady_steps == result.steps - result.warmup_steps == 34
        assert result.diagnosis is not None
        assert result.diagnosis["steady_steps"] == result.steady_steps  # the breakdown's steps
    for result in spiral["off"]:
        assert result.warmup_steps == 25 and result.steady_steps == 50


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.fmean(values)


def test_throughput_and_breakdown_equal_those_of_the_unprofiled_run(
    spiral: dict[str, list[ResultRecord]],
) -> None:
    """Within several times the runs' own noise (at least 20%: two shared cores)."""

    def rates(key: str) -> list[float]:
        values = [r.steady_samples_per_s for r in spiral[key]]
        assert all(v is not None for v in values)
        return [float(v) for v in values if v is not None]

    def per_step(key: str, part: str) -> list[float]:
        out = []
        for r in spiral[key]:
            assert r.diagnosis is not None
            out.append(statistics.fmean(row[part] for row in r.diagnosis["ranks"]))
        return out

    off, on = rates("off"), rates("on")
    noise = max(_spread(off), _spread(on))
    tol = max(0.2, 3 * noise)
    assert abs(statistics.fmean(on) / statistics.fmean(off) - 1) < tol, (on, off, noise)
    for part in ("step_time_s", "compute_s"):
        a, b = per_step("off", part), per_step("on", part)
        part_tol = max(0.25, 3 * max(_spread(a), _spread(b)))
        assert abs(statistics.fmean(b) / statistics.fmean(a) - 1) < part_tol, (part, a, b)


# --- which ranks, which operations -----------------------------------------------------------


def test_the_slow_rank_is_profiled_without_naming_it(tmp_path: Path) -> None:
    run = run_train(
        tmp_path,
        *SPIRAL,
        *PROFILE,
        "faults.slow_rank=1",
        "faults.slow_rank_sleep_s=0.03",
        output_dir=tmp_path / "out",
    )
    p = profile_of(only_result(run))
    assert p["status"] == "captured" and p["ranks_setting"] == "auto"
    assert p["ranks"] == [0, 1] and p["slowest_rank"] == 1
    assert p["chosen_by"].startswith("auto: rank 0 and rank 1, the busiest per step")
    assert p["measured"]["1"] > p["measured"]["0"] + 15  # ms: the 30 ms sleep, less noise
    assert set(p["traces"]) == {"0", "1"}
    assert "; profile rank 1: " in run.stdout


def test_without_the_diagnosis_every_rank_of_the_first_node_is_profiled(tmp_path: Path) -> None:
    # one optimizer step per call: one marker per profiled step
    args = (*SPIRAL, *PROFILE, "diagnosis.enabled=false", "trainer.steps_per_call=1")
    result = only_result(run_train(tmp_path, *args, output_dir=tmp_path))
    p = profile_of(result)
    assert p["status"] == "captured" and p["ranks"] == [0, 1] and p["measured"] is None
    assert p["chosen_by"].startswith("node: the slowest rank cannot be known in advance")
    assert "diagnosis.enabled=false" in p["chosen_by"]
    assert p["steps"] == [25, 29]  # no measurement: from the warm-up's end
    for rank in (0, 1):
        trace = read_trace(Path(result.identity.run_dir) / p["traces"][str(rank)])
        assert profiled_steps(trace) == [25, 26, 27, 28, 29]
        assert optimizer_steps(trace) == 5 and misnested(trace) == 0
    assert result.warmup_steps == 30 and result.steady_steps == 45


GPT = (
    "workload.name=gpt",
    "workload.preset=tiny",
    "workload.d_model=64",
    "trainer.max_epochs=3",
    "trainer.steps_per_call=2",
    "trainer.warmup_steps=2",
    "trainer.devices=2",
    "tracking.mode='off'",
)
"""The tiny preset at twice its width and the default batch (256), so that its matrix products
outweigh the Python between them even beside a busy neighbour (at width 32, one run in four
beside a busy loop put DistributedDataParallel.forward's self time, 25%, and gloo's wait, 24%,
before aten::mm, 21%); 3 epochs of 8 steps in calls of 2: measured 2-6; the capture, which 6-8
would cut short, waits for the next epoch: profiled 8-13 (three calls), steady from 14."""


MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "matmul")


def test_gpt_top_operation_is_a_matrix_product_and_gloo_is_labelled(tmp_path: Path) -> None:
    run = run_train(tmp_path, *GPT, *PROFILE, output_dir=tmp_path)
    result = only_result(run)
    p = profile_of(result)
    assert p["status"] == "captured" and p["steps"] == [8, 13], p
    table = p["top_ops"]["0"]
    top = table["ops"][0]["name"]
    shares = [(op["name"], round(op["share"], 3)) for op in table["ops"]]
    assert any(k in top for k in MATMUL), shares
    assert table["communication_s"] > 0
    # every collective in the trace is labelled as one, whatever gloo and c10d call it
    trace = read_trace(Path(result.identity.run_dir) / p["traces"]["0"])
    assert profiled_steps(trace) == [8, 10, 12] and optimizer_steps(trace) == 6
    assert misnested(trace) == 0
    assert result.warmup_steps == 14
    full = top_operations(trace, n=10_000)
    comm = [op for op in full["ops"] if op["communication"]]
    assert any(op["name"].startswith("gloo:") for op in comm), [o["name"] for o in full["ops"]]
    assert all(is_communication(op["name"]) == op["communication"] for op in full["ops"])
    assert not any(
        op["name"].startswith(("gloo:", "c10d::")) for op in full["ops"] if not op["communication"]
    )
    assert f"; profile rank {p['slowest_rank']}: " in run.stdout


def test_a_run_too_short_for_the_capture_trains_as_unprofiled_and_says_why(
    tmp_path: Path,
) -> None:
    # 25 steps in calls of 8, warm-up 5: 30 profiled steps cannot leave a steady state
    args = (*TINY, "trainer.max_epochs=1", "trainer.warmup_steps=5")
    run = run_train(tmp_path, *args, "trainer.profile.steps=30", output_dir=tmp_path)
    result = only_result(run)
    p = profile_of(result)
    assert p["status"] == "not captured" and p["traces"] == {}
    assert p["reason"].startswith("the run ends in its warm-up")
    assert "scalescope: warning: trainer.profile: not captured: the run ends" in run.stdout
    assert result.warmup_steps == 8 and result.steady_steps == 17  # as without the profile
    assert not (Path(result.identity.run_dir) / "traces").exists()
