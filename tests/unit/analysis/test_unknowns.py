"""Unknowns spanned, never assumed (analysis.compute.projection.published.unknowns): a method
whose communication the file does not know is drawn over one message after backward to DDP's
buckets, a scaling mode the source does not settle over strong and weak, a gradient sync under
accumulation it does not state over once a step and every micro-batch, each centred between its
ends; a known method, mode or sync keeps its own."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from analysis_helpers import REPO

from analysis.compute.projection.published.scoring import (
    CARRIES,
    _drawn_models,
    _predict,
    case_model,
    centre_carry,
    read_cases,
)
from analysis.compute.projection.published.unknowns import (
    PATTERNS,
    SCALINGS,
    SYNCS,
    unknown_pattern,
    unknown_scaling,
    unknown_sync,
    unknowns,
)
from analysis.read.cases import CaseError

CASES = REPO / "benchmarks" / "projection_cases.yaml"


def _cases():  # type: ignore[no-untyped-def]
    return {c.name: c for c in read_cases(str(CASES))}


def test_an_unknown_pattern_is_spanned_and_centred_between_its_ends() -> None:
    # an open source: TensorFlow's parameter servers, whose messages the file does not know
    ps = _cases()["ebug-tf-inceptionv3-pizdaint-p100"]
    assert unknown_pattern(ps)
    point = max(ps.published, key=lambda p: p.nodes)
    ends = []
    for pattern in PATTERNS:
        got = sorted(
            _predict(case_model(ps, carry=c, pattern=pattern), point, None)
            for c in ("one-time", "network", "stragglers")
        )
        ends.append(got[1])
    one, ddp = ends
    assert one < ddp  # overlapping buckets hide what one message after backward cannot
    carry, centre = centre_carry(ps, point)
    assert centre == math.sqrt(one * ddp)
    assert "between one message and DDP's buckets" in carry
    # the draws take both ends: the interval spans them
    models, *_ = _drawn_models(ps, 60, np.random.default_rng(0))
    drawn = [len(m.bucket_bytes) for m in models]
    assert min(drawn) == 1 and max(drawn) > 1


def test_a_known_method_keeps_its_own_buckets() -> None:
    cases = _cases()
    ddp = cases["pytorch-ddp-resnet50-dgx1"]
    assert not unknown_pattern(ddp)
    models, *_ = _drawn_models(ddp, 30, np.random.default_rng(0))
    assert len({m.bucket_bytes for m in models}) == 1
    carry, _ = centre_carry(ddp, ddp.published[0])
    assert "between" not in carry


def test_an_unknown_scaling_mode_is_spanned_and_centred_between_its_ends() -> None:
    # an open source: BART's tables print throughput without the accumulation behind it
    bart = _cases()["dle-pyt-bart-large-pretrain-phase1-dgxa100-bf16"]
    assert unknown_scaling(bart) and not unknown_pattern(bart)
    assert any("scaling mode" in text for text in unknowns(bart))
    point = max(bart.published, key=lambda p: p.nodes)
    carries = ("one-time", "network", "stragglers")
    ends = {}
    for mode in SCALINGS:
        models = [case_model(bart, carry=c, scaling=mode) for c in carries]
        assert {m.scaling_mode for m in models} == {mode}
        ends[mode] = sorted(_predict(m, point, None) for m in models)
    # a fixed global batch leaves each rank less to hide its all-reduce behind at 40 nodes
    assert ends["strong"][0] < ends["weak"][0]
    carry, centre = centre_carry(bart, point)
    assert centre == pytest.approx(math.sqrt(ends["strong"][1] * ends["weak"][1]), rel=1e-12)
    assert "scaling between a fixed global batch and a fixed per-device one" in carry
    models, *_ = _drawn_models(bart, 60, np.random.default_rng(0))
    assert {m.scaling_mode for m in models} == set(SCALINGS)


def test_a_known_scaling_mode_is_kept_and_an_unknown_word_refused(tmp_path: Path) -> None:
    ddp = _cases()["pytorch-ddp-resnet50-dgx1"]
    assert not unknown_scaling(ddp)
    models, *_ = _drawn_models(ddp, 30, np.random.default_rng(0))
    assert {m.scaling_mode for m in models} == {ddp.scaling}
    text = CASES.read_text().replace("scaling: unknown", "scaling: sometimes", 1)
    bad = tmp_path / "cases.yaml"
    bad.write_text(text)
    with pytest.raises(CaseError, match="scaling must be weak, strong or unknown, got 'sometimes'"):
        read_cases(str(bad))


def test_an_unknown_gradient_sync_is_spanned_and_centred_between_its_ends() -> None:
    """oumi's HSDP run accumulates 16 micro-batches through a trainer whose sync under
    accumulation the source does not state: its draws take once a step and every micro-batch.
    At the band's slow end (1% of the node's link) with nothing hidden, the replicas'
    all-reduces cost 3.5 points synced once a step and 32 synced on all 16 micro-batches."""
    hsdp = _cases()["oumi-llama2b-hsdp-gcp-a100"]
    assert unknown_sync(hsdp) and not unknown_pattern(hsdp) and not unknown_scaling(hsdp)
    assert any("once a step to every micro-batch" in text for text in unknowns(hsdp))
    point = max(hsdp.published, key=lambda p: p.nodes)
    ends = {}
    for sync in SYNCS:
        models = [case_model(hsdp, carry=c, sync=sync) for c in CARRIES]
        assert {m.sync_every_micro_batch for m in models} == {sync == "micro-batch"}
        ends[sync] = sorted(_predict(m, point, None) for m in models)
        slow = case_model(hsdp, sync=sync, band_u=0.0, hidden=0.0)
        ends[f"{sync}, slow"] = _predict(slow, point, None)
    assert ends["micro-batch, slow"] < ends["step, slow"] - 0.2
    carry, centre = centre_carry(hsdp, point)
    assert centre == pytest.approx(math.sqrt(ends["step"][1] * ends["micro-batch"][1]), rel=1e-12)
    assert "gradient sync between once a step and every micro-batch" in carry
    models, *_ = _drawn_models(hsdp, 60, np.random.default_rng(0))
    assert {m.sync_every_micro_batch for m in models} == {False, True}


def test_a_stated_gradient_sync_is_kept_and_an_unknown_word_refused(tmp_path: Path) -> None:
    """VectorLM states its sync (no_sync on 3 of 4 micro-batches): every draw keeps it. A
    case that does not accumulate has nothing to span, whatever it says."""
    cases = _cases()
    vectorlm = cases["vectorlm-llama3-8b-fsdp-seq2048-a100"]
    assert vectorlm.grad_accum > 1 and vectorlm.grad_sync == "step"
    assert not unknown_sync(vectorlm)
    models, *_ = _drawn_models(vectorlm, 30, np.random.default_rng(0))
    assert {m.sync_every_micro_batch for m in models} == {False}
    single = replace(cases["pytorch-ddp-resnet50-dgx1"], grad_sync="unknown")
    assert single.grad_accum == 1 and not unknown_sync(single)
    text = CASES.read_text().replace("grad_sync: unknown", "grad_sync: sometimes", 1)
    bad = tmp_path / "cases.yaml"
    bad.write_text(text)
    with pytest.raises(
        CaseError, match="grad_sync must be step, micro-batch or unknown, got 'sometimes'"
    ):
        read_cases(str(bad))


def test_ddp_syncing_every_micro_batch_all_reduces_on_each() -> None:
    """NVIDIA's TF1 BERT all-reduces once a step over 128 micro-batches (its
    post-accumulation all-reduce); read as syncing every micro-batch, the step model's exposed
    all-reduce and the total carry = network scales with are 128 times as long, and the
    efficiency at its largest scale lower."""
    bert = _cases()["dle-tf1-bert-large-phase1-dgxa100-40g-amp"]
    once = case_model(bert)
    every = case_model(replace(bert, grad_sync="micro-batch"))
    assert every.sync_every_micro_batch and not once.sync_every_micro_batch
    k, b = bert.grad_accum, bert.per_device_batch
    world = 2 * bert.devices_per_node
    exposed = [m.modelled_exposed(world, 2, m.bucket_bytes, k, 1.0, b) for m in (once, every)]
    assert exposed[0] > 0 and exposed[1] == pytest.approx(k * exposed[0], rel=1e-9)
    totals = [m.allreduce_total(world, 2, m.bucket_bytes, k) for m in (once, every)]
    assert totals[1] == pytest.approx(k * totals[0], rel=1e-9)
    point = max(bert.published, key=lambda p: p.nodes)
    assert _predict(every, point, None) < _predict(once, point, None)
