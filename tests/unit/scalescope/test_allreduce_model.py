"""The all-reduce's cost model (scalescope.allreduce_model), shared by the job and the
analysis: DDP's buckets, the latency + bandwidth fit and what it predicts for a step."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalescope.allreduce_model import ddp_bucket_bytes


@given(st.floats(1e3, 1e10), st.floats(1e5, 1e9))
def test_rebucketing_keeps_every_byte_and_a_small_first_bucket(total: float, cap: float) -> None:
    buckets = ddp_bucket_bytes(int(total), int(cap))
    assert sum(buckets) == pytest.approx(total, abs=len(buckets))
    assert buckets[0] <= min(cap, 1 << 20) + 1
    assert all(b <= cap + 1 for b in buckets)
