"""FSDP's communication in the step model (analysis.compute.projection.step_time.fsdp_comm), worked
by hand: two blocks of 1 GB at 2 ranks on a 1 GB/s bus with no latency, so that every all-gather and
reduce-scatter takes 1 GB x (2 - 1) / 2 / 1 GB/s = 0.5 s, and a micro-batch's compute of 1.8 s
is 0.3 s of forward and 0.6 s of backward per block."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from projection_helpers import BUS, COMPUTE, GB
from projection_helpers import fsdp_model as _model

from analysis.compute.projection.step_time.fsdp_comm import (
    FsdpStepModel,
    block_bytes,
    microbatch_exposed,
    timeline_exposed,
)
from analysis.compute.projection.step_time.step_model import collective_s
from scalescope.collectives import FSDP_ALL_GATHER, FSDP_REDUCE_SCATTER


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
    cpu = _model(overlap=False, accumulate=2)
    got = cpu.modelled_exposed(2, 1, (GB, GB), 2, 1.0, cpu.per_device_batch)
    assert got == pytest.approx(2 * 4 * 0.5 + 2 * 0.5)


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
    from analysis.compute.projection.published.scoring import FSDP_HIDDEN_BAND, case_model, prepare
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


# --- the root unit, gloo's reduce-scatter, the target's accumulation, the backward order -------


def _sharding(units: tuple[float, ...], *, reshard: bool = True) -> object:
    from analysis.read.strategy import FsdpSharding

    return FsdpSharding(
        unit_bytes=tuple(int(u) for u in units),
        reshard_after_forward=reshard,
        param_dtype=None,
        reduce_dtype=None,
    )


def _built(units: tuple[float, ...], *, gpu: bool, reshard: bool = True) -> FsdpStepModel:
    """The step model a sweep's series of ``units`` (root first, as the record holds them)
    gets from its term, on the by-hand fields of :func:`_model`."""
    from dataclasses import asdict

    from analysis.compute.projection.step_time.fsdp_comm import FsdpTerm

    term = FsdpTerm.of(_sharding(units, reshard=reshard), gpu=gpu)  # type: ignore[arg-type]
    own = {"reshard_after_forward", "overlap", "hidden_share", "scatter_factor", "param_dtype"}
    own |= {"root_first", "backend", "shard_size"}
    fields = {k: v for k, v in asdict(_model()).items() if k not in own}
    fields["network"] = _model().network
    model = term.build(**{**fields, "bucket_bytes": tuple(float(u) for u in units)})
    assert isinstance(model, FsdpStepModel)
    return model


def test_the_root_unit_is_not_gathered_again_before_backward() -> None:
    """FSDP2 leaves the root gathered after forward (its post_forward_mesh_info is None), so
    backward gathers every unit but the root. A root of 2 GB (1 s a collective at 2 ranks on
    1 GB/s) and a block of 1 GB (0.5 s), on GPUs. Forward: root gather 0-1.0, root compute
    1.0-1.3 beside the block's gather 1.0-1.5, block compute 1.5-1.8: 1.8 - 0.6 = 1.2 s.
    Backward, the block first: its gather 0-0.5, its compute 0.5-1.1, its reduce-scatter
    1.1-1.6, the root's compute 1.1-1.7 (nothing to gather), its reduce-scatter 1.7-2.7:
    2.7 - 1.2 = 1.5 s. Gathering the root again would run 0.5-1.5 and hold the root's
    compute to 1.5-2.1, its reduce-scatter to 2.1-3.1: 1.9 s."""
    model = _built((2 * GB, GB), gpu=True)
    assert model.parts(2, 1)["exposed_comm"] == pytest.approx(1.2 + 1.5)
    assert model.root_first  # type: ignore[attr-defined]
    # every collective of the step, one after another: 2 forward gathers (1.5 s), the
    # block's backward gather (0.5 s), 2 reduce-scatters (1.5 s)
    assert model.allreduce_total(2, 1, model.bucket_bytes) == pytest.approx(3.5)
    # the what-if of reshard_after_forward off saves the block's backward gather only
    cpu = replace(model, overlap=False)
    kept = replace(cpu, reshard_after_forward=False)
    saved = cpu.parts(2, 1)["exposed_comm"] - kept.parts(2, 1)["exposed_comm"]
    assert saved == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("wrapped", "unit_bytes", "root_first", "kept"),
    [
        (["", "0", "1"], [int(2 * GB), int(GB), int(GB)], True, 3),
        # every parameter in a block (a wrap rule on a plain MLP): the root's unit is empty
        (["", "0", "1"], [0, int(GB), int(GB)], False, 2),
        # a module that sharded its blocks alone: the first unit is a block
        (["0", "1"], [int(GB), int(GB)], False, 2),
    ],
)
def test_the_root_is_the_first_unit_only_where_it_gathers_bytes_of_its_own(
    wrapped: list[str], unit_bytes: list[int], root_first: bool, kept: int
) -> None:
    """The record names its units, the root as ""; its empty units are left out. Where the
    root held nothing, the first unit left is a block, gathered again before backward like
    the rest: at 2 ranks on 1 GB/s, two blocks of 1 GB expose 4 gathers and 2 reduce-scatters
    (3 s) on CPUs, not 3 gathers (2.5 s)."""
    import pandas as pd

    from analysis.compute.projection.step_time.fsdp_comm import FsdpTerm
    from analysis.read.strategy import fsdp_sharding

    section = {"wrapped": wrapped, "unit_bytes": unit_bytes, "reshard_after_forward": True}
    got = fsdp_sharding(pd.DataFrame([{"strategy": "fsdp", "sharding": section}]))
    assert got is not None and got.unit_bytes is not None
    assert (got.root_first, len(got.unit_bytes)) == (root_first, kept)
    assert FsdpTerm.of(got, gpu=False).root_first is root_first
    if kept == 2:
        model = replace(_model(overlap=False), root_first=root_first)
        assert model.allreduce_total(2, 1, (GB, GB)) == pytest.approx(3.0)


def test_a_unit_with_nothing_to_gather_waits_for_nothing() -> None:
    """The root (0.1 s a collective) and blocks of 0.1 and 1 s, 0.2 s of forward and 0.4 s
    of backward each, on GPUs. Forward: 0.9 s exposed (gathers 0-0.1, 0.1-0.2, 0.3-1.3, the
    last block computing at 1.3-1.5). Backward: block 2 gathers at 0-1.0, computes at
    1.0-1.4 beside block 1's gather (1.0-1.1), reduce-scatters at 1.4-2.4; block 1 computes
    at 1.4-1.8 and reduce-scatters at 2.4-2.5; the root, gathered since forward, computes
    at 1.8-2.2, not behind block 2's reduce-scatter on the channel (2.4-2.8), and
    reduce-scatters at 2.5-2.6: 2.6 - 1.2 = 1.4 s."""
    units = [0.1, 0.1, 1.0]
    got = microbatch_exposed(units, units, COMPUTE, overlap=True, root_first=True)
    assert got == pytest.approx(0.9 + 1.4)


def test_a_published_cases_even_blocks_have_no_root() -> None:
    """block_bytes splits a case's parameters over its blocks: none of them is the root, and
    every one gathers again before backward (4 gathers, 2 reduce-scatters at 0.5 s)."""
    model = _model()
    assert not model.root_first  # type: ignore[attr-defined]
    assert model.allreduce_total(2, 1, (GB, GB)) == pytest.approx(3.0)


def test_gloo_reduce_scatters_as_a_full_all_reduce() -> None:
    """ProcessGroupGloo::reduce_scatter_tensor_coalesced clones the input, all-reduces it
    and copies one chunk: on a CPU series a reduce-scatter of 1 GB at 4 ranks on 1 GB/s
    moves 2 x 3/4 GB over the busiest link (1.5 s), not 3/4 GB. Without resharding, two
    units: 2 forward gathers (0.75 s each) and 2 reduce-scatters (1.5 s each), 4.5 s."""
    cpu = _built((GB, GB), gpu=False, reshard=False)
    assert cpu.parts(4, 1)["exposed_comm"] == pytest.approx(2 * 0.75 + 2 * 1.5)
    assert cpu.allreduce_total(4, 1, cpu.bucket_bytes) == pytest.approx(4.5)
    gpu = _built((GB, GB), gpu=True, reshard=False)
    assert gpu.allreduce_total(4, 1, gpu.bucket_bytes) == pytest.approx(4 * 0.75)
    assert cpu.backend == "gloo"  # type: ignore[attr-defined]
    from scalescope.collectives import as_run_by

    assert collective_s(BUS, as_run_by(FSDP_REDUCE_SCATTER, "gloo"), GB, 4) == pytest.approx(1.5)
    assert as_run_by(FSDP_REDUCE_SCATTER, "nccl") is FSDP_REDUCE_SCATTER
    assert as_run_by(FSDP_ALL_GATHER, "gloo") is FSDP_ALL_GATHER


def test_carrying_with_the_network_takes_the_targets_accumulation() -> None:
    """Strong scaling from 4 micro-batches at 2 ranks to 2 at 4 ranks: what carry = network
    scales with is every collective of the step at each, 4 x 4 gathers + 2 reduce-scatters
    at 0.5 s (9 s) then, 2 x 4 gathers + 2 at 0.75 s (7.5 s) now: 1 s of other becomes
    7.5 / 9 s (at the anchor's 4 micro-batches it would be 13.5 / 9 s)."""
    model = _model(accumulate=4, per_device_batch=4.0, carry="network", other_s=1.0)
    got = model.parts(4, 1, batch=2.0, k=2)["other"]
    assert got == pytest.approx(7.5 / 9.0)
    assert model.allreduce_total(2, 1, (GB, GB), 4) == pytest.approx(9.0)
    assert model.allreduce_total(4, 1, (GB, GB), 2) == pytest.approx(7.5)


def test_backward_meets_unequal_units_last_first() -> None:
    """A small unit (0.1 s a collective) before a larger one (1 s), 0.3 s of forward and 0.6 s
    of backward compute each, on GPUs. Kept gathered from forward to backward: forward
    gathers 0 at 0-0.1, computes 0 at 0.1-0.4 beside gather 1 at 0.1-1.1, computes 1 at
    1.1-1.4 (0.8 s exposed); backward computes 1 at 0-0.6, reduce-scatters it at 0.6-1.6
    beside computing 0 at 0.6-1.2, then reduce-scatters 0 at 1.6-1.7 (0.5 s exposed): 1.3 s.
    Backward in forward order would end on the large unit's reduce-scatter (1.2-2.2): 1.8 s.
    Gathered again before backward, units of 0.2 and 1 s with reduce-scatters of twice
    that (bf16 gathers, fp32 reductions): forward gathers 0 at 0-0.2, computes 0 at 0.2-0.5
    beside gather 1 at 0.2-1.2, computes 1 at 1.2-1.5 (0.9 s); backward gathers 1 at 0-1.0,
    computes it at 1.0-1.6 beside gather 0 at 1.0-1.2, reduce-scatters 1 at 1.6-3.6 beside
    computing 0 at 1.6-2.2, reduce-scatters 0 at 3.6-4.0 (2.8 s): 3.7 s (forward order:
    3.5 s)."""
    units = [0.1, 1.0]
    kept = microbatch_exposed(units, units, COMPUTE, overlap=True, reshard_after_forward=False)
    assert kept == pytest.approx(0.8 + 0.5)
    units = [0.2, 1.0]
    twice = microbatch_exposed(units, [2 * u for u in units], COMPUTE, overlap=True)
    assert twice == pytest.approx(0.9 + 2.8)


def test_a_case_syncing_every_micro_batch_reduce_scatters_on_each() -> None:
    """k = 2 on the CPU, every micro-batch syncing (a published case's ``grad_sync:
    micro-batch``): 2 micro-batches of 4 gathers and 2 reduce-scatters each, 12 x 0.5 s,
    where syncing once a step exposes 10 x 0.5 s; what carry = network scales with counts
    the reduce-scatters twice as well (8 + 4 at 0.5 s). With one micro-batch the two are
    the same step."""
    once = _model(overlap=False, accumulate=2)
    every = replace(once, sync_every_micro_batch=True)
    assert every.modelled_exposed(2, 1, (GB, GB), 2, 1.0, 4.0) == pytest.approx(12 * 0.5)
    assert once.modelled_exposed(2, 1, (GB, GB), 2, 1.0, 4.0) == pytest.approx(10 * 0.5)
    assert every.allreduce_total(2, 1, (GB, GB)) == pytest.approx(6.0)
    assert once.allreduce_total(2, 1, (GB, GB)) == pytest.approx(5.0)
    single = replace(every, accumulate=1)
    assert single.modelled_exposed(2, 1, (GB, GB), 1, 1.0, 2.0) == pytest.approx(
        replace(single, sync_every_micro_batch=False).modelled_exposed(2, 1, (GB, GB), 1, 1.0, 2.0)
    )


_seconds = st.lists(st.floats(0.0, 2.0), min_size=1, max_size=5)


@given(
    gathers=_seconds,
    scatters=_seconds,
    compute=st.floats(0.01, 10.0),
    k=st.integers(1, 8),
    overlap=st.booleans(),
    reshard=st.booleans(),
)
def test_syncing_more_micro_batches_never_exposes_less(
    gathers: list[float],
    scatters: list[float],
    compute: float,
    k: int,
    overlap: bool,
    reshard: bool,
) -> None:
    """Whatever the units' times: a step whose every micro-batch syncs exposes k times one
    syncing micro-batch, a step syncing once exposes no more than that, and one micro-batch
    is the same step either way."""
    n = min(len(gathers), len(scatters))
    g, s = gathers[:n], scatters[:n]
    kw = {"overlap": overlap, "reshard_after_forward": reshard}
    once = timeline_exposed(g, s, compute, k, syncs=1, **kw)
    every = timeline_exposed(g, s, compute, k, syncs=k, **kw)
    one_syncing = microbatch_exposed(g, s, compute / k, sync=True, **kw)
    assert every == pytest.approx(k * one_syncing, rel=1e-9, abs=1e-12)
    assert once <= every + 1e-9
    if k == 1:
        assert once == every
