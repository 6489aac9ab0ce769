"""One record's breakdown read into the parts of its step (analysis.compute.run_parts):
communication, overlap, input, skew and rotating stragglers, or why a part is not recorded."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from waterfall_helpers import make_diagnosis, with_overlap_pairs

from analysis.compute.run_parts import hidden_share, run_parts
from analysis.compute.waterfall import PARTS, attribute


def test_hidden_share_is_clipped_and_says_why_when_missing() -> None:
    assert hidden_share(0.05, 0.01) == (pytest.approx(0.8), "")
    assert hidden_share(0.01, 0.05) == (0.0, "")  # more exposed than predicted: none hidden
    assert hidden_share(0.05, 0.0) == (1.0, "")
    share, why = hidden_share(math.nan, 0.01)
    assert math.isnan(share) and "predicted" in why
    share, why = hidden_share(0.05, math.nan)
    assert math.isnan(share) and "not measured" in why


def test_one_device_has_no_communication_and_it_is_zero_honestly() -> None:
    d = make_diagnosis(1, batch=256, input_s=0.002, compute_s=0.1, exposed_s=0.0)
    p = run_parts(d, 256 / 0.102, 1)
    assert p.recorded and p.comm_step_s == 0.0 and p.skew_step_s == 0.0
    assert math.isnan(p.hidden_share) and "nothing to all-reduce" in p.hidden_reason
    assert p.per_sample("input") == pytest.approx(0.002 / 256)


def test_a_part_per_sample_is_per_the_samples_of_the_step_it_was_timed_over() -> None:
    from analysis.compute.run_parts import timed_steps_per_batch

    # a GAN: Lightning counted 256 optimizer steps over 128 batches, two a batch
    assert timed_steps_per_batch({"optimizer_steps": 128}, 256) == 2.0
    # accumulation: a step is a batch of micro-batches, counted once either way
    assert timed_steps_per_batch({"optimizer_steps": 22}, 22) == 1.0
    # built-in workloads, older records, nothing counted: one step a batch
    for batch, steps in [(None, 256), ({}, 256), ({"optimizer_steps": None}, 9), ({}, None)]:
        assert timed_steps_per_batch(batch, steps) == 1.0
    d = make_diagnosis(1, batch=128, input_s=0.002, compute_s=0.1, exposed_s=0.0)
    p = run_parts(d, 128 / 0.204, 1, steps_per_batch=2.0)
    assert p.samples_per_step == 64.0 and p.per_device_batch_size == 128
    assert p.per_sample("compute") == pytest.approx(0.1 / 64)
    assert p.per_sample("compute") + p.per_sample("input") == pytest.approx(p.t_s)


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


def test_an_fsdp_calibration_is_never_taken_for_the_whole_communication() -> None:
    """FSDP's windows isolate the exposed reduce-scatter only (the all-gathers run in both
    kinds): a record without per-step waits keeps it as the cross-check it is, and its
    exposed communication is not recorded, with that reason; with per-step waits the
    steps carry it, as under DDP."""
    d = make_diagnosis(2, batch=128, input_s=0.002, compute_s=0.05, exposed_s=0.01)
    d["calibration"].update(exposed_comm_s=0.003, isolates="reduce_scatter")
    p = run_parts(d, 128 / 0.062, 2)
    assert (p.comm_step_s, p.comm_source) == (pytest.approx(0.01), "steps")
    assert p.calibration_comm_s == 0.003
    for row in d["ranks"]:
        del row["wait_s"], row["exposed_comm_s"]
    p = run_parts(d, 128 / 0.062, 2)
    assert math.isnan(p.comm_step_s) and p.comm_source == ""
    assert "isolate the exposed reduce-scatter only" in p.comm_reason
    assert p.calibration_comm_s == 0.003
    d["calibration"]["isolates"] = "all_reduce"  # DDP's, as records before the field
    assert run_parts(d, 128 / 0.062, 2).comm_step_s == 0.003


def test_under_fsdp_no_share_of_the_all_reduce_is_called_hidden() -> None:
    """The hidden share compares the exposed wait with the all-reduce the baseline predicts:
    under FSDP (a record with FSDP's baseline section) that all-reduce is not what a step
    communicates, so the share is not computed, and the reason says why; DDP keeps it."""
    d = make_diagnosis(2, batch=128, input_s=0.002, compute_s=0.05, exposed_s=0.01)
    ddp = run_parts(d, 128 / 0.062, 2)
    assert math.isfinite(ddp.hidden_share) and ddp.hidden_reason == ""
    d["fsdp_collectives"] = {"status": "measured", "sizes": []}
    fsdp = run_parts(d, 128 / 0.062, 2)
    assert math.isnan(fsdp.hidden_share) and "under FSDP" in fsdp.hidden_reason
    assert fsdp.comm_step_s == ddp.comm_step_s  # the exposed wait itself is unchanged


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

    from scalescope.job.diagnosis.cross_rank import step_wait_stats
    from scalescope.job.diagnosis.section import assemble

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


def test_an_overlap_slowdown_within_its_noise_is_folded_not_subtracted() -> None:
    """Pairs of 0.25, 0.11, 0.69 and 0.46 ms: mean 0.3775 ms, standard deviation 0.2532 ms,
    t(0.975, 3) = 3.182, so the 95% interval is 0.3775 -/+ 0.403 ms: it includes 0. The
    slowdown is noise: it stays inside compute, and the calibration's exposed all-reduce no
    longer has it subtracted (each pair's 1.0 ms plus its overlap: median 1.355 ms)."""
    d = with_overlap_pairs([1.0, 1.0, 1.0, 1.0], [0.25, 0.11, 0.69, 0.46])
    p = run_parts(d, 128 / 0.053, 2)
    assert math.isnan(p.overlap_step_s)
    assert p.overlap_note.startswith("within noise (0.38 ms [-0.025, 0.78] over 4 pairs)")
    assert p.compute_step_s == pytest.approx(0.05)  # nothing taken out
    assert p.calibration_comm_s == pytest.approx(0.001355)


def test_an_overlap_slowdown_beyond_its_noise_is_taken_out_of_compute() -> None:
    d = with_overlap_pairs([1.0, 1.0, 1.0], [30.0, 31.0, 29.0])
    p = run_parts(d, 128 / 0.053, 2)
    assert p.overlap_step_s == pytest.approx(0.030) and p.overlap_note == ""
    assert p.compute_step_s == pytest.approx(0.020)
    assert p.calibration_comm_s == pytest.approx(0.001)


@pytest.mark.parametrize("overlap_ms", [-4.0, 4.0])
def test_one_pair_of_windows_is_not_enough_to_tell(overlap_ms: float) -> None:
    """One pair gives no interval, so its overlap slowdown is not subtracted whatever its
    sign: a single -4 ms pair must not grow compute by 4 ms (50 ms stays 50 ms), nor a
    single +4 ms pair shrink it; the calibration's exposed all-reduce keeps the pair's
    overlap (1 + overlap ms)."""
    one = with_overlap_pairs([1.0], [overlap_ms])
    p = run_parts(one, 128 / 0.053, 2)
    assert math.isnan(p.overlap_step_s)
    assert p.compute_step_s == pytest.approx(0.050)
    assert p.overlap_note.startswith("one pair: not enough to tell")
    assert p.calibration_comm_s == pytest.approx((1.0 + overlap_ms) / 1e3)
