"""Unknowns spanned, never assumed (analysis.compute.projection.scoring.PATTERNS): a method
whose communication the file does not know is drawn over one message after backward to DDP's
buckets, its centre between the two; a known method keeps its own pattern."""

from __future__ import annotations

import math

import numpy as np
from analysis_helpers import REPO

from analysis.compute.projection.scoring import (
    PATTERNS,
    _drawn_models,
    _predict,
    case_model,
    centre_carry,
    read_cases,
    unknown_pattern,
)

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
