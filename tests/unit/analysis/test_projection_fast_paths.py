"""The projection's inner loops, written for speed (the nested cross-validation asks for them
millions of times), give what the plain definitions give, to the bit: a percentile of the
finite draws of each row, a median, each bucket's all-reduce time, and DDP's bucket timeline.
Bit for bit, since the backtest's figures and the folds' choices are compared byte for byte."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from analysis.compute.projection.model_error import finite_percentiles
from analysis.compute.projection.scored import _median
from analysis.compute.projection.step_time.bucket_overlap import exposed_after_backward
from analysis.compute.projection.step_time.network import Level
from analysis.compute.projection.step_time.step_model import NETWORK_TERM, collective_times
from scalescope.collectives import link_bytes

CASES = Path(__file__).resolve().parents[3] / "benchmarks" / "projection_cases.yaml"
FINITE = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)
ODD = st.sampled_from([math.nan, math.inf, -math.inf])


@st.composite
def rows(draw: st.DrawFn, odd: bool) -> np.ndarray:
    n_rows = draw(st.integers(1, 5))
    n_cols = draw(st.integers(1, 12))
    values = draw(st.lists(FINITE, min_size=n_rows * n_cols, max_size=n_rows * n_cols))
    out = np.array(values, dtype=float).reshape(n_rows, n_cols)
    if odd:
        for _ in range(draw(st.integers(1, n_rows * n_cols))):
            out[draw(st.integers(0, n_rows - 1)), draw(st.integers(0, n_cols - 1))] = draw(ODD)
    return out


def _one_row_at_a_time(a: np.ndarray, q: float) -> np.ndarray:
    return np.array(
        [np.percentile(r[np.isfinite(r)], q) if np.isfinite(r).any() else math.nan for r in a]
    )


@settings(max_examples=150, deadline=None)
@given(st.booleans().flatmap(rows), st.lists(st.floats(0, 100), min_size=1, max_size=3))
def test_finite_percentiles_are_numpys_of_each_rows_finite_values(
    a: np.ndarray, qs: list[float]
) -> None:
    got = finite_percentiles(a, qs)
    for q, row in zip(qs, got, strict=True):
        assert np.array_equal(row, _one_row_at_a_time(a, q), equal_nan=True), (q, a)


@settings(max_examples=200, deadline=None)
@given(st.lists(FINITE, min_size=1, max_size=50))
@example([5e-324, 5e-324])  # halves first would round each to 0
def test_the_median_is_numpys(values: list[float]) -> None:
    a = np.array(values)
    assert _median(a) == float(np.median(a))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.floats(0, 1e10), min_size=1, max_size=20),
    st.integers(1, 256),
    st.floats(0, 1e-3),
    st.floats(0.01, 400),
    st.integers(1, 64),
    st.floats(0, 2),
)
def test_each_buckets_time_is_the_latency_and_its_bytes_over_the_bandwidth(
    sizes: list[float], world: int, alpha: float, busbw: float, at_world: int, factor: float
) -> None:
    level = Level(alpha_s=alpha, busbw_gbps=busbw, at_world=at_world, source="test")
    got = collective_times(level, NETWORK_TERM, sizes, world, factor)
    if world <= 1:
        assert got == [0.0] * len(sizes)
        return
    if not busbw * factor > 0:
        assert all(math.isnan(t) for t in got)
        return
    scale = math.log2(world) / math.log2(at_world) if at_world > 1 else 1.0
    want = [
        alpha * scale + link_bytes(NETWORK_TERM, b, world) / (busbw * factor * 1e9) for b in sizes
    ]
    assert got == want


def _timeline(times: list[float], sizes: list[float], backward: float, ready) -> float:  # type: ignore[no-untyped-def]
    """The bucket timeline as its docstring says it, a bucket at a time."""
    total = math.fsum(sizes)
    if not times or total <= 0:
        return 0.0
    end = done = 0.0
    for i, (t, nbytes) in enumerate(zip(times, sizes, strict=True)):
        done += nbytes
        share = ready[i] if ready is not None else done / total
        end = max(end, backward * min(1.0, share)) + t
    return max(0.0, end - backward)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 1e9), st.floats(0, 1.0), st.floats(0, 1.2)), min_size=1, max_size=30
    ),
    st.floats(0, 5.0),
    st.booleans(),
)
def test_the_bucket_timeline_is_the_one_a_bucket_at_a_time(
    buckets: list[tuple[float, float, float]], backward: float, recorded: bool
) -> None:
    sizes = [b for b, _, _ in buckets]
    times = [t for _, t, _ in buckets]
    ready = [r for _, _, r in buckets] if recorded else None
    got = exposed_after_backward(times, sizes, backward, ready)
    assert got == _timeline(times, sizes, backward, ready)


def test_a_step_model_with_new_fields_is_the_one_replace_makes() -> None:
    """Of every shipped case's model (DDP's and FSDP's): the same fields and type as
    ``dataclasses.replace`` gives, nothing cached of the old fields, an unknown field refused."""
    from analysis.compute.projection.published.scoring import case_model
    from analysis.read.cases import read_cases

    kinds = set()
    for case in read_cases(str(CASES)):
        model = case_model(case)
        _ = model.modelled_at_anchor  # cached on the old model
        changes = {"compute_per_sample_s": 2 * model.compute_per_sample_s, "anchor_world": 1}
        got = model.with_fields(**changes)
        want = dataclasses.replace(model, **changes)
        assert type(got) is type(want) and got == want
        assert "modelled_at_anchor" not in got.__dict__
        assert got.modelled_at_anchor == want.modelled_at_anchor or math.isnan(
            want.modelled_at_anchor
        )
        kinds.add(type(model).__name__)
        with pytest.raises(TypeError, match="no field 'nope'"):
            model.with_fields(nope=1)
    assert kinds == {"StepModel", "FsdpStepModel"}


def _one_pass(gathers: list[float], compute: list[float], scatters: list[float]) -> float:
    """FSDP's pass over the blocks as the module doc tells it, with ``max`` spelled out."""
    n = len(compute)
    done = [0.0] * n
    channel = done[0] = gathers[0]
    compute_end = 0.0
    for i in range(n):
        start = max(compute_end, done[i])
        if i + 1 < n and gathers[i + 1] != 0.0:
            channel = done[i + 1] = max(channel, start) + gathers[i + 1]
        compute_end = start + compute[i]
        if scatters[i] > 0:
            channel = max(channel, compute_end) + scatters[i]
    return max(compute_end, channel) - math.fsum(compute)


TIME = st.one_of(st.floats(0, 2.0), st.just(0.0), st.just(math.nan))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(TIME, st.floats(0, 2.0), TIME), min_size=1, max_size=12))
def test_fsdps_pass_over_the_blocks_is_the_one_max_gives(
    blocks: list[tuple[float, float, float]],
) -> None:
    from analysis.compute.projection.step_time.fsdp_comm import _phase

    gathers, compute, scatters = (list(x) for x in zip(*blocks, strict=True))
    got, want = _phase(gathers, compute, scatters), _one_pass(gathers, compute, scatters)
    assert got == want or (math.isnan(got) and math.isnan(want))
