"""Hybrid sharding (HSDP) in the step model (analysis.compute.projection.step_time.fsdp_comm),
worked by hand on the by-hand fields of test_fsdp_comm.py: two units of 1 GB, a 1 GB/s bus
within a node and a 0.25 GB/s one across nodes (a node's, every NIC together), no latency, 1.8 s
of compute a micro-batch.

At 4 ranks over 2 nodes in shard groups of 2 (a node's devices): each unit's all-gather and
reduce-scatter over the group moves 1 GB x 1/2 on the node's bus, 0.5 s; each rank then
all-reduces its gradient shard (0.5 GB) across the 2 replicas, 2 x 1/2 x 0.5 GB, and both ranks
of a node do so at once over the node's link, each with half of it: 4 s, what one all-reduce
of the whole unit across the replicas takes. Full sharding over the 4 ranks moves 1 GB x 3/4
on the slow bus per collective, 3 s."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from analysis_helpers import REPO
from hypothesis import given
from hypothesis import strategies as st
from projection_helpers import BUS, COMPUTE, GB
from projection_helpers import fsdp_model as _model

from analysis.compute.projection.project import HSDP_NO_MESH, series_term
from analysis.compute.projection.step_time.fsdp_comm import (
    FsdpStepModel,
    FsdpTerm,
    hybrid_times,
)
from analysis.compute.projection.step_time.step_model import Level, Network
from analysis.compute.projection.what_ifs import FULL, HYBRID, settings_of, under, what_ifs
from analysis.read.strategy import fsdp_sharding

SLOW = Level(alpha_s=0.0, busbw_gbps=0.25, at_world=2, source="inter, by hand")
CASES = REPO / "benchmarks" / "projection_cases.yaml"


def test_hybrid_gathers_within_the_node_and_all_reduces_the_shard_across_nodes() -> None:
    gathers, reduces = hybrid_times(BUS, SLOW, (GB, GB), 4, 2, sharing=2)
    assert gathers == pytest.approx([0.5, 0.5])
    assert reduces == pytest.approx([0.5 + 4.0, 0.5 + 4.0])
    # one shard group holding the world: no replicas, full sharding's times on the node
    gathers, reduces = hybrid_times(BUS, SLOW, (GB, GB), 2, 2)
    assert gathers == pytest.approx([0.5, 0.5]) and reduces == pytest.approx([0.5, 0.5])
    # the model says who shares: a node's 2 ranks across nodes, nobody within one node
    model = _model(shard_size=2)
    assert model.unit_times(4, 2, (GB, GB), 1.0)[1] == pytest.approx([4.5, 4.5])
    within = _model(shard_size=2, network=Network(BUS, BUS))
    assert within.unit_times(4, 1, (GB, GB), 1.0)[1] == pytest.approx([0.5 + 0.5, 0.5 + 0.5])


def test_a_shard_group_spanning_nodes_gathers_on_the_link_between_them() -> None:
    """Shard groups of 4 on nodes of 2 devices, at 8 ranks over 4 nodes: each group spans 2
    nodes, so its gathers and reduce-scatters cross the slow link (1 GB x 3/4 at 0.25 GB/s,
    3 s), and each rank's shard (0.25 GB) is all-reduced across 2 replicas with the node's 2
    ranks sharing its link (2 x 1/2 x 0.25 GB at 0.125 GB/s, 2 s). On nodes of 4 devices the
    groups stay on the node's bus (0.75 s), and the node's 4 ranks share its link for their
    shards' all-reduces (2 x 1/2 x 0.25 GB at 0.0625 GB/s, 4 s)."""
    model = _model(shard_size=4)
    gathers, reduces = model.unit_times(8, 4, (GB, GB), 1.0)
    assert gathers == pytest.approx([3.0, 3.0])
    assert reduces == pytest.approx([3.0 + 2.0, 3.0 + 2.0])
    # the same groups on nodes of 4 devices stay on the node's bus
    gathers, reduces = model.unit_times(8, 2, (GB, GB), 1.0)
    assert gathers == pytest.approx([0.75, 0.75])
    assert reduces == pytest.approx([0.75 + 4.0, 0.75 + 4.0])


def test_on_cpus_hybrid_exposes_its_gathers_reduce_scatters_and_shard_all_reduces() -> None:
    """Nothing hidden: per unit two gathers (0.5 s each) and a reduce (4.5 s), 11 s for two
    units, against full sharding's 6 collectives of 3 s (18 s). Under gloo a reduce-scatter
    is an all-reduce of the whole input (1 s at 2 ranks): 12 s. Within one node the two are
    the same."""
    hybrid = _model(overlap=False, shard_size=2)
    full = _model(overlap=False)
    assert hybrid.parts(4, 2)["exposed_comm"] == pytest.approx(11.0)
    assert full.parts(4, 2)["exposed_comm"] == pytest.approx(18.0)
    gloo = replace(hybrid, backend="gloo")
    assert gloo.parts(4, 2)["exposed_comm"] == pytest.approx(12.0)
    assert hybrid.parts(2, 1)["exposed_comm"] == pytest.approx(full.parts(2, 1)["exposed_comm"])
    # what carry = network grows with: every collective of the step, one after another
    assert hybrid.allreduce_total(4, 2, (GB, GB)) == pytest.approx(11.0)
    assert full.allreduce_total(4, 2, (GB, GB)) == pytest.approx(18.0)


def test_on_gpus_the_replicas_all_reduce_follows_each_reduce_scatter_on_the_channel() -> None:
    """The timeline of test_fsdp_comm.py with each unit's reduce the reduce-scatter and the
    shard's all-reduce: the forward as within a node (0.5 s gather, then 0.3 s of compute
    with the next gather hidden: 0.7 s), backward ending when the last reduce does."""
    from analysis.compute.projection.step_time.fsdp_comm import microbatch_exposed

    hybrid = _model(shard_size=2)
    expected = microbatch_exposed([0.5, 0.5], [4.5, 4.5], COMPUTE, overlap=True)
    assert hybrid.parts(4, 2)["exposed_comm"] == pytest.approx(expected)
    assert expected < _model().parts(4, 2)["exposed_comm"]


@given(
    st.floats(0.1, 100.0),
    st.floats(0.0, 1e-4),
    st.sampled_from([2, 4, 8, 16]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([2, 4, 16, 64]),
    st.floats(0.25, 4.0),
    st.lists(st.floats(1e3, 1e10), min_size=1, max_size=6),
)
def test_a_nodes_replica_all_reduces_take_what_one_of_its_part_of_the_unit_would(
    inter_gbps: float,
    alpha: float,
    shard: int,
    per_node: int,
    nodes: int,
    scatter: float,
    units: list[float],
) -> None:
    """Across nodes, the ranks of a node each all-reduce their own shard at once over the
    node's link: together, whatever the shard groups' size and the node's devices, they take
    what one all-reduce across the replicas of the unit's reduced bytes that the node holds
    would (the whole unit where a shard group fits in a node) at the node's bus bandwidth.
    Each unit's reduce is its reduce-scatter over the shard group (on the node's link, or
    between nodes where the group spans them), then that."""
    from analysis.compute.projection.step_time.step_model import collective_s
    from scalescope.collectives import FSDP_REDUCE_SCATTER, FSDP_REPLICA_ALL_REDUCE

    inter = Level(alpha_s=alpha, busbw_gbps=inter_gbps, at_world=2, source="inter")
    world = per_node * nodes
    if shard >= world or world % shard or (shard > per_node and shard % per_node):
        return
    model = _model(network=Network(BUS, inter), shard_size=shard, scatter_factor=scatter)
    _, reduces = model.unit_times(world, nodes, tuple(units), 1.0)
    held = min(shard, per_node) / shard  # of each unit, what one node holds
    scatter_level = inter if shard > per_node else BUS
    for u, got in zip(units, reduces, strict=True):
        own = collective_s(scatter_level, FSDP_REDUCE_SCATTER, u * scatter, shard)
        node = collective_s(inter, FSDP_REPLICA_ALL_REDUCE, u * scatter * held, world // shard)
        assert got == pytest.approx(own + node, rel=1e-9)


@given(
    st.floats(0.1, 100.0),
    st.floats(0.0, 1e-4),
    st.sampled_from([2, 4, 8]),
    st.sampled_from([2, 4, 16, 64]),
    st.booleans(),
    st.lists(st.floats(1e3, 1e10), min_size=1, max_size=6),
)
def test_hybrid_never_moves_more_than_full_sharding_where_the_node_costs_nothing(
    inter_gbps: float,
    alpha: float,
    shard: int,
    nodes: int,
    reshard: bool,
    units: list[float],
) -> None:
    """Where the node's link costs nothing beside the one between nodes and the units gather
    and reduce in one dtype, hybrid sharding's collectives of a step, one after another,
    take no longer than full sharding's at any number of replicas: it trades the world's
    gathers and reduce-scatters for one all-reduce of each unit across the replicas, whose
    (R - 1) / R twice never exceeds the world's (N - 1) / N twice (three times resharded).
    (With a node's link only as fast as the network's it is not so: the gathers within the
    node are then a cost of their own.)"""
    intra = Level(alpha_s=0.0, busbw_gbps=inter_gbps * 1e9, at_world=2, source="intra: free")
    inter = Level(alpha_s=alpha, busbw_gbps=inter_gbps, at_world=2, source="inter")
    base = _model(network=Network(intra, inter), reshard_after_forward=reshard)
    hybrid = replace(base, shard_size=shard)
    world = shard * nodes
    full_s = base.allreduce_total(world, nodes, tuple(units), 1)
    hybrid_s = hybrid.allreduce_total(world, nodes, tuple(units), 1)
    assert hybrid_s <= full_s * (1 + 1e-9)


def test_the_other_way_of_sharding_is_a_what_if() -> None:
    """A fully sharded series is asked what hybrid sharding (a node's devices a shard group)
    would give, a hybrid one what full sharding would: the CPU model of the first test."""
    full = _model(overlap=False, anchor_world=2, anchor_nodes=1)
    ifs = {w.name: w for w in what_ifs(full)}
    assert FULL not in ifs
    hybrid = under(full, ifs[HYBRID])
    assert isinstance(hybrid, FsdpStepModel) and hybrid.shard_size == 2
    kw = settings_of(full, ifs[HYBRID])
    assert hybrid.modelled_exposed(4, 2, kw.get("buckets", (GB, GB)), 1, 1.0, 1.0) == (
        pytest.approx(11.0)
    )
    back = {w.name: w for w in what_ifs(hybrid)}
    assert HYBRID not in back and under(hybrid, back[FULL]).shard_size is None


def _hsdp_rows(mesh: dict | None) -> pd.DataFrame:
    section = {"unit_bytes": [int(GB), int(GB)], "reshard_after_forward": True}
    if mesh is not None:
        section["mesh"] = mesh
    return pd.DataFrame([{"strategy": "hsdp", "accelerator": "cpu", "sharding": section}])


def test_an_hsdp_series_is_projected_in_its_recorded_shard_groups() -> None:
    class Group:
        rows = _hsdp_rows({"dims": ["replicate", "shard"], "shape": [2, 4]})

    term, why = series_term([Group()])
    assert why == "" and isinstance(term, FsdpTerm)
    assert term.shard_size == 4 and term.backend == "gloo" and not term.overlap
    got = fsdp_sharding(Group.rows)
    assert got is not None and got.shard_size == 4
    # the same records as a fully sharded series: no shard groups
    full = fsdp_sharding(Group.rows.assign(strategy="fsdp"))
    assert full is not None and full.shard_size is None


def test_an_hsdp_series_whose_records_name_no_mesh_is_not_projected_and_says_why() -> None:
    class Group:
        rows = _hsdp_rows(None)

    term, why = series_term([Group()])
    assert term is None and why == HSDP_NO_MESH and "sharding.mesh" in why


def test_a_sharded_series_is_told_where_hybrid_overtakes_full_sharding() -> None:
    """The projection fixture's CPU runs (1 to 3 processes on one node) as an FSDP series
    and as an HSDP one (shard groups of 3, a node's): each projected with the other way of
    sharding as a what-if at every node count, and the paragraph says from which node count
    hybrid is ahead (on gloo, hybrid's gathers stay on the node's link), in HSDP's words for
    the HSDP series."""
    from projection_helpers import FIXTURE

    from analysis.compute.projection.project import project
    from analysis.present.report.projection_text import findings
    from analysis.read.frame import load

    runs = load(FIXTURE)
    units = {"unit_bytes": [12_544, 49_664, 49_664], "reshard_after_forward": True}
    mesh = {"dims": ["replicate", "shard"], "shape": [1, 3]}
    fsdp = project(runs.assign(strategy="fsdp", sharding=[units] * len(runs)), [2, 4, 8], draws=40)
    hsdp_runs = runs.assign(strategy="hsdp", sharding=[{**units, "mesh": mesh}] * len(runs))
    hsdp = project(hsdp_runs, [2, 4, 8], draws=40)
    (sp,) = hsdp.series
    assert isinstance(sp.fit.model, FsdpStepModel) and sp.fit.model.shard_size == 3
    assert HYBRID in set(fsdp.table["what_if"]) and FULL in set(hsdp.table["what_if"])
    for result in (fsdp, hsdp):
        (text,) = findings(result)
        words = (
            "Full against hybrid sharding: hybrid (a shard group per node) is ahead from 2 nodes"
        )
        assert words in text["text"]
    (text,) = findings(hsdp)
    assert "HSDP's model, per wrapped unit (3 units" in text["text"]
    assert "in shard groups of 3 ranks" in text["text"]
    assert "exposed HSDP's gathers, reduce-scatters and shard all-reduces" in text["text"]
    # the hybrid series and the fully sharded one's hybrid what-if are the same model
    as_hybrid = fsdp.table[fsdp.table["what_if"] == HYBRID].set_index("nodes")["efficiency"]
    measured = hsdp.table[hsdp.table["what_if"] == "as measured"].set_index("nodes")["efficiency"]
    assert as_hybrid.to_dict() == pytest.approx(measured.to_dict(), abs=0.02)


# --- the case format: model.method hsdp, model.shard_size ---------------------------------------


def test_a_published_hsdp_case_is_read_projected_in_shard_groups_and_scored_with_fsdps(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    """The file's slowest FSDP case (a 1.4B-parameter minGPT on 8 A100s a node over a cloud
    network of 3.2 GB/s, 1 to 16 nodes) written as HSDP in shard groups of a node: read with
    its shard size (a node's where not given), projected with the shard groups' gathers on
    NVLink and each rank's all-reduce of its shard across nodes (together, the whole unit
    across the node's link once, where full sharding gathers it twice and reduce-scatters it),
    so above the same case fully sharded, and scored with FSDP's cases, apart from the
    all-reduce ones."""
    import yaml

    from analysis.compute.projection.published.backtest import backtest
    from analysis.compute.projection.published.scoring import case_model
    from analysis.read.cases import is_fsdp, read_cases

    doc = yaml.safe_load(CASES.read_text())
    raw = next(c for c in doc["cases"] if c["name"].startswith("ptdbench-gptxl"))
    hsdp = {**raw, "name": "as-hsdp", "model": {**raw["model"], "method": "hsdp"}}
    sized = {**hsdp, "name": "as-hsdp-4", "model": {**hsdp["model"], "shard_size": 4}}
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": [raw, hsdp, sized]}))
    full, hybrid, four = read_cases(str(path))
    assert (hybrid.method, hybrid.shard_size, four.shard_size) == ("hsdp", 8, 4)
    assert full.shard_size is None and is_fsdp(hybrid)
    model = case_model(hybrid)
    assert isinstance(model, FsdpStepModel) and model.shard_size == 8
    result = backtest([full, hybrid])
    assert not result["points"] and len(result["fsdp"]["points"]) == 2 * len(full.published)
    by = {(p["case"], p["nodes"]): p["predicted"] for p in result["fsdp"]["points"]}
    for p in full.published:
        assert by[("as-hsdp", p.nodes)] > by[(full.name, p.nodes)], p.nodes


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"method": "hsdp", "shard_size": 3}, "model.shard_size 3 neither divides"),
        ({"method": "hsdp", "shard_size": 0}, "model.shard_size must be an integer >= 1"),
        ({"method": "fsdp", "shard_size": 4}, "model.shard_size is for method hsdp only"),
        ({"method": "hsdp"}, "model.wrapped_blocks must be an integer >= 1 for method hsdp"),
    ],
)
def test_a_wrong_shard_size_is_one_line(tmp_path, model: dict, message: str) -> None:  # type: ignore[no-untyped-def]
    import yaml

    from analysis.read.cases import CaseError, read_cases

    blocks = {} if "wrapped_blocks" in message else {"wrapped_blocks": 4}
    case = {
        "name": "x",
        "hardware": {"devices_per_node": 8},
        "model": {"grad_bytes": 1e9, **blocks, **model},
        "per_device_batch": 8,
        "measured": [{"nodes": 1, "devices_per_node": 8, "throughput_per_device": 100}],
        "published": [
            {
                "nodes": 2,
                "devices_per_node": 8,
                "throughput_per_device": 90,
                "efficiency_vs_1node": 0.9,
            }
        ],
    }
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump({"cases": [case]}))
    with pytest.raises(CaseError, match=message):
        read_cases(str(path))
