"""Unknowns spanned, never assumed (analysis.compute.projection.scoring.PATTERNS, SCALINGS): a
method whose communication the file does not know is drawn over one message after backward to
DDP's buckets, a scaling mode the source does not settle over strong and weak, each centred
between its ends; a known method or mode keeps its own."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from analysis_helpers import REPO

from analysis.compute.projection.scoring import (
    PATTERNS,
    SCALINGS,
    _drawn_models,
    _predict,
    case_model,
    centre_carry,
    read_cases,
    unknown_pattern,
    unknown_scaling,
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
    models, _ = _drawn_models(ps, 60, np.random.default_rng(0))
    drawn = [len(m.bucket_bytes) for m in models]
    assert min(drawn) == 1 and max(drawn) > 1


def test_a_known_method_keeps_its_own_buckets() -> None:
    cases = _cases()
    ddp = cases["pytorch-ddp-resnet50-dgx1"]
    assert not unknown_pattern(ddp)
    models, _ = _drawn_models(ddp, 30, np.random.default_rng(0))
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
    models, _ = _drawn_models(bart, 60, np.random.default_rng(0))
    assert {m.scaling_mode for m in models} == set(SCALINGS)


def test_a_known_scaling_mode_is_kept_and_an_unknown_word_refused(tmp_path: Path) -> None:
    ddp = _cases()["pytorch-ddp-resnet50-dgx1"]
    assert not unknown_scaling(ddp)
    models, _ = _drawn_models(ddp, 30, np.random.default_rng(0))
    assert {m.scaling_mode for m in models} == {ddp.scaling}
    text = CASES.read_text().replace("scaling: unknown", "scaling: sometimes", 1)
    bad = tmp_path / "cases.yaml"
    bad.write_text(text)
    with pytest.raises(CaseError, match="scaling must be weak, strong or unknown, got 'sometimes'"):
        read_cases(str(bad))
