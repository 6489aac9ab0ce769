"""FSDP's communication in the step model (analysis.compute.projection.step_time.fsdp_comm), worked
by hand: two blocks of 1 GB at 2 ranks on a 1 GB/s bus with no latency, so that every all-gather and
reduce-scatter takes 1 GB x (2 - 1) / 2 / 1 GB/s = 0.5 s, and a micro-batch's compute of 1.8 s
is 0.3 s of forward and 0.6 s of backward per block."""

from __future__ import annotations

import pytest

from analysis.compute.projection.step_time.fsdp_comm import (
    FsdpStepModel,
    block_bytes,
    microbatch_exposed,
    step_exposed,
)
from analysis.compute.projection.step_time.step_model import Level, Network, collective_s
from scalescope.collectives import FSDP_ALL_GATHER, FSDP_REDUCE_SCATTER

BUS = Level(alpha_s=0.0, busbw_gbps=1.0, at_world=2, source="by hand")
GB = 1e9
COMPUTE = 1.8  # forward 0.6 (0.3 a block), backward 1.2 (0.6 a block)


def test_each_collective_moves_n_minus_1_over_n_of_its_bytes() -> None:
    assert collective_s(BUS, FSDP_ALL_GATHER, GB, 2) == pytest.approx(0.5)
    assert collective_s(BUS, FSDP_REDUCE_SCATTER, GB, 4) == pytest.approx(0.75)
    assert collective_s(BUS, FSDP_ALL_GATHER, GB, 1) == 0.0


def test_on_cpus_nothing_is_hidden() -> None:
    """Forward: 2 gathers; backward: 2 gathers and 2 reduce-scatters: 6 x 0.5 s."""
    got = microbatch_exposed([0.5, 0.5], [0.5, 0.5], COMPUTE, overlap=False)
    assert got == pytest.approx(3.0)
    # without resharding, backward gathers nothing: 2 gathers and 2 reduce-scatters
    kept = microbatch_exposed(
        [0.5, 0.5], [0.5, 0.5], COMPUTE, overlap=False, reshard_after_forward=False
    )
    assert kept == pytest.approx(2.0)


def test_on_gpus_the_next_blocks_gather_hides_behind_this_blocks_compute() -> None:
    """Forward: gather 0 (0-0.5), block 0 (0.5-0.8) beside gather 1 (0.5-1.0), block 1
    (1.0-1.3): 1.3 - 0.6 = 0.7 s exposed. Backward, last block first: gather (0-0.5), block
    (0.5-1.1) beside the next gather (0.5-1.0), its reduce-scatter (1.1-1.6) beside the next
    block (1.1-1.7), the last reduce-scatter (1.7-2.2): 2.2 - 1.2 = 1.0 s exposed."""
    got = microbatch_exposed([0.5, 0.5], [0.5, 0.5], COMPUTE, overlap=True)
    assert got == pytest.approx(1.7)
    # without resharding: backward's reduce-scatters only, the last one exposed (0.5 s)
    kept = microbatch_exposed(
        [0.5, 0.5], [0.5, 0.5], COMPUTE, overlap=True, reshard_after_forward=False
    )
    assert kept == pytest.approx(1.2)


def test_with_long_compute_only_the_first_gather_and_the_last_reduce_scatter_show() -> None:
    """Each block computes far longer than a collective: forward waits for block 0's gather,
    backward for its first gather and its last reduce-scatter."""
    got = microbatch_exposed([0.5, 0.5], [0.5, 0.5], 100.0, overlap=True)
    assert got == pytest.approx(0.5 + 0.5 + 0.5)


def test_accumulation_gathers_every_micro_batch_and_reduce_scatters_once() -> None:
    """k = 2 on the CPU: 2 micro-batches of 4 gathers each, 2 reduce-scatters once."""
    got = step_exposed(BUS, (GB, GB), 2, 2 * COMPUTE, 2, overlap=False)
    assert got == pytest.approx(2 * 4 * 0.5 + 2 * 0.5)


def _model(**kw: object) -> FsdpStepModel:
    slow = Level(alpha_s=0.0, busbw_gbps=0.25, at_world=2, source="inter, by hand")
    fields = dict(
        per_device_batch=1.0,
        accumulate=1,
        compute_fixed_s=0.0,
        compute_per_sample_s=COMPUTE,
        input_per_sample_s=0.0,
        overlap_s=0.0,
        other_s=0.0,
        sigma_share=0.0,
        bucket_bytes=block_bytes(2 * GB, 2),
        network=Network(BUS, slow),
        anchor_world=2,
        anchor_nodes=1,
        exposed_offset_s=0.0,
        baseline_step_s=COMPUTE,
        baseline_batch=1.0,
        baseline_world=1,
        scaling_mode="weak",
    )
    return FsdpStepModel(**{**fields, **kw})  # type: ignore[arg-type]


def test_the_step_model_takes_fsdps_communication_at_each_level_of_the_network() -> None:
    """Within a node the intra-node bus (1 GB/s): 1.7 s exposed as worked above; across
    nodes the inter-node one (0.25 GB/s: each collective 2 s)."""
    gpu = _model()
    assert block_bytes(2 * GB, 2) == (GB, GB)
    assert gpu.parts(2, 1)["exposed_comm"] == pytest.approx(1.7)
    inter = microbatch_exposed([2.0, 2.0], [2.0, 2.0], COMPUTE, overlap=True)
    assert gpu.parts(2, 2)["exposed_comm"] == pytest.approx(inter)
    assert inter > 1.7
    cpu = _model(overlap=False)
    assert cpu.parts(2, 1)["exposed_comm"] == pytest.approx(3.0)
    assert gpu.parts(1, 1)["exposed_comm"] == 0.0


def test_carrying_with_the_network_grows_with_every_collective_of_the_step() -> None:
    """allreduce_total, what carry = network scales with, is FSDP's: 4 gathers and 2
    reduce-scatters at 0.5 s per step (3 s), without resharding 2 and 2 (2 s); with 2
    micro-batches each gathers, the reduce-scatters once (4 + 4 + 2 at 0.5 s)."""
    assert _model(accumulate=2).allreduce_total(2, 1, (GB, GB)) == pytest.approx(5.0)
    assert _model().allreduce_total(2, 1, (GB, GB)) == pytest.approx(3.0)
    assert _model(reshard_after_forward=False).allreduce_total(2, 1, (GB, GB)) == pytest.approx(2.0)


def test_the_hidden_share_runs_from_the_cpus_none_to_the_timelines_all() -> None:
    """hidden_share 1: the timeline's 1.7 s; 0: every collective exposed (3 s); between, in
    proportion (0.5: 1.7 + 0.5 x 1.3 = 2.35 s)."""
    assert _model(hidden_share=1.0).parts(2, 1)["exposed_comm"] == pytest.approx(1.7)
    assert _model(hidden_share=0.0).parts(2, 1)["exposed_comm"] == pytest.approx(3.0)
    assert _model(hidden_share=0.5).parts(2, 1)["exposed_comm"] == pytest.approx(2.35)


def test_the_backtest_draws_how_much_an_fsdp_case_hides() -> None:
    """An FSDP case's draws span the hidden share's band: its least efficient draw at 4
    ranks is below the centre's (all hidden), which stays at the band's top."""
    from analysis.compute.projection.scoring import FSDP_HIDDEN_BAND, case_model, prepare
    from analysis.read.cases import Case, Point

    case = Case(
        name="hand",
        devices_per_node=4,
        grad_bytes=4e9,
        bucket_mb=None,
        scaling="weak",
        per_device_batch=1.0,
        grad_accum=1,
        intra_busbw_gbps=1.0,
        inter_busbw_gbps=None,
        measured=(Point(1, 1, 1.0),),
        published=(Point(1, 4, 0.5, efficiency_vs_1gpu=0.5),),
        method="fsdp",
        wrapped_blocks=4,
    )
    assert FSDP_HIDDEN_BAND == (0.0, 1.0)
    top = case_model(case).efficiency(4, 1)[0]
    none = case_model(case, hidden=0.0).efficiency(4, 1)[0]
    assert none < top
    (scored,) = prepare([case], draws=60)
    assert scored.centre == pytest.approx(top)
    assert min(scored.base) < top - 0.5 * (top - none)
