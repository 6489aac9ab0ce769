"""The all-reduce baseline: the pure arithmetic of its sweep and its section, and the sweep
and DDP's buckets in a real one-rank gloo process group in this process (tests/integration
runs 2 and 3 ranks). The cost model it fits (scalescope.allreduce_model):
tests/unit/scalescope/test_allreduce_model.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from allreduce_model_helpers import model_time_s, sweep
from hypothesis import given
from hypothesis import strategies as st
from torch.nn.parallel import DistributedDataParallel

from scalescope.allreduce_model import (
    DDP_BUCKET_CAP_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    FLOAT32_BYTES,
    bucket_caps,
    bus_factor,
    busbw_at_gbps,
    estimate_bucket_bytes,
    fit_model,
    fit_time_s,
    float32_size,
    predicted_step_s,
    split_into_buckets,
)
from scalescope.config import DiagnosisConfig
from scalescope.job.diagnosis.allreduce import (
    ESTIMATED_FROM_PARAMETERS,
    SKIPPED_ONE_DEVICE,
    SWEEP_FLOOR_BYTES,
    _Sweep,
    allreduce_baseline,
    backend_name,
    ddp_bucket_caps,
    gradient_bytes,
    parameter_bytes,
    read_ddp_buckets,
    section,
    size_row,
    sweep_sizes,
)
from scalescope.job.diagnosis.section import BeforeTiming

# --- pure arithmetic ------------------------------------------------------------------------------


def test_sweep_sizes_double_from_4_kib_to_8_mib_or_the_gradient_size_with_it_among_them() -> None:
    floor = [4096 * 2**k for k in range(12)]  # 4 KiB .. 8 MiB
    assert floor[-1] == SWEEP_FLOOR_BYTES == 8 * 2**20
    assert sweep_sizes(300_000) == [*floor[:7], 300_000, *floor[7:]]
    assert sweep_sizes(65536) == floor  # a power of two: measured once
    # whole float32 elements: 300_001 bytes is 75_000 elements
    assert 300_000 in sweep_sizes(300_001) and 300_001 not in sweep_sizes(300_001)
    assert sweep_sizes(1000) == [1000, *floor]
    assert sweep_sizes(2) == [4, *floor]
    # Beyond the floor: doubling below the gradient size, which is the last.
    big = 100 * 2**20
    assert sweep_sizes(big) == [4096 * 2**k for k in range(15)] + [big]


@given(st.integers(min_value=1, max_value=10**11))
def test_sweep_sizes_are_ascending_and_reach_the_gradient_and_the_floor(nbytes: int) -> None:
    sizes = sweep_sizes(nbytes)
    assert sizes == sorted(set(sizes))
    assert float32_size(nbytes) in sizes
    assert sizes[-1] == max(SWEEP_FLOOR_BYTES, float32_size(nbytes))
    assert all(b % FLOAT32_BYTES == 0 for b in sizes)


def linears(n: int = 8, width: int = 1024) -> torch.nn.Sequential:
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(n)])


def test_estimated_buckets_take_whole_parameters_and_overshoot_their_caps() -> None:
    # Each Linear(1024, 1024) is 4_194_304 + 4_096 bytes. Backward order: the last layer
    # first; it alone passes 1 MiB; the 25 MiB bucket closes at the 7th layer, 29.4 MB.
    assert estimate_bucket_bytes(parameter_bytes(linears())) == [4_198_400, 29_388_800]
    # A bucket per dtype, each with its own first cap.
    mixed = [(600_000, "torch.float16"), (600_000, "torch.float32"), (600_000, "torch.float16")]
    assert sorted(estimate_bucket_bytes(mixed)) == [600_000, 1_200_000]
    assert estimate_bucket_bytes([]) == []
    assert estimate_bucket_bytes([(10, "f")] * 3, first_cap=20, cap=20) == [20, 10]


def test_a_tied_embedding_is_one_parameter_in_the_last_bucket() -> None:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = torch.nn.Embedding(5000, 256)  # 5.12 MB, shared with the head
            self.mlp = torch.nn.Linear(256, 256)
            self.head = torch.nn.Linear(256, 5000, bias=False)
            self.head.weight = self.wte.weight

    model = Tied()
    params = parameter_bytes(model)
    assert sum(b for b, _ in params) == gradient_bytes(model) == 5_120_000 + 263_168
    # Backward meets the embedding last (it is used first): it fills the bucket it joins.
    assert estimate_bucket_bytes(params) == [5_120_000 + 263_168]
    assert estimate_bucket_bytes(params, first_cap=2**18) == [263_168, 5_120_000]


def test_backend_is_the_one_carrying_the_device() -> None:
    assert backend_name("gloo", "cpu") == "gloo"
    assert backend_name("nccl", "cuda") == "nccl"
    assert backend_name("cpu:gloo,cuda:nccl", "cuda") == "nccl"
    assert backend_name("cpu:gloo,cuda:nccl", "cpu") == "gloo"


def test_size_row_formulas() -> None:
    row = size_row(8_000_000, 0.002, 4)
    assert row["algbw_gbps"] == pytest.approx(4.0)  # 8e6 B / 2 ms = 4e9 B/s
    assert row["busbw_gbps"] == pytest.approx(4.0 * 2 * 3 / 4)
    assert bus_factor(2) == 1.0
    assert bus_factor(8) == pytest.approx(1.75)


def measured_section(
    gradient: int, top: int, *, alpha: float = 1e-4, busbw: float = 2.0, world: int = 4
) -> dict[str, Any]:
    """The section of a sweep that measured 4 KiB .. 4 KiB * 2**top on an exact model."""
    rows = [size_row(n, model_time_s(alpha, busbw, world, n), world) for n in sweep(top)]
    fit = fit_model([(r["bytes"], r["time_s"]) for r in rows], world)
    return section(
        "measured",
        None,
        backend="gloo",
        world_size=world,
        gradient_bytes=gradient,
        sizes=rows,
        fit=fit,
        seconds=0.5,
        bucket_bytes=[gradient],
        bucket_source="estimated",
        bucket_reason="one bucket, for the test",
    )


def test_the_section_reports_busbw_at_the_largest_size_and_at_the_gradient_size() -> None:
    s = measured_section(65536, 11)  # a 64 KiB model, swept to 8 MiB
    assert s["busbw_gbps"] == s["sizes"][-1]["busbw_gbps"]
    row = next(r for r in s["sizes"] if r["bytes"] == 65536)
    assert s["busbw_at_gradient_gbps"] == row["busbw_gbps"]  # the measured row
    # Latency-bound at 64 KiB: far below the bandwidth the large messages reach.
    assert s["busbw_at_gradient_gbps"] < 0.5 * s["busbw_gbps"]
    # A gradient size the sweep stopped before: from the fitted model.
    stopped = measured_section(2**24, 8)
    t = fit_time_s(stopped["fit"], 2**24, 4)
    assert stopped["busbw_at_gradient_gbps"] == pytest.approx(2**24 / t * 1.5 / 1e9)
    assert busbw_at_gbps([], None, 4096, 2) is None


def test_the_section_keys() -> None:
    s = measured_section(65536, 11)
    assert list(s) == [
        "status",
        "reason",
        "backend",
        "world_size",
        "gradient_bytes",
        "sizes",
        "busbw_gbps",
        "busbw_at_gradient_gbps",
        "fit",
        "bucket_bytes",
        "bucket_source",
        "bucket_reason",
        "predicted_step_s",
        "seconds",
    ]
    assert list(s["fit"]) == [
        "alpha_s",
        "busbw_gbps",
        "rel_rms",
        "alpha_se_s",
        "busbw_se_gbps",
        "points",
        "note",
    ]
    assert s["fit"]["alpha_s"] == pytest.approx(1e-4)
    assert s["fit"]["busbw_gbps"] == pytest.approx(2.0)
    assert s["bucket_bytes"] == [65536] and s["bucket_source"] == "estimated"
    assert s["bucket_reason"] == "one bucket, for the test"
    assert s["predicted_step_s"] == pytest.approx(model_time_s(1e-4, 2.0, 4, 65536))
    off = section("off", "diagnosis.allreduce_baseline=false")
    assert list(off) == list(s)
    assert off["fit"] is None and off["bucket_bytes"] is None and off["predicted_step_s"] is None


def test_gradient_bytes_counts_trainable_parameters_once_in_their_dtype() -> None:
    lin = torch.nn.Linear(10, 4)  # 44 float32 parameters
    frozen = torch.nn.Linear(3, 3)
    frozen.requires_grad_(False)
    half = torch.nn.Linear(2, 2).half()  # 6 float16 parameters
    model = torch.nn.Sequential(lin, frozen, half, lin)  # lin shared: counted once
    assert gradient_bytes(model) == 44 * 4 + 6 * 2


def test_no_process_group_is_skipped_with_the_reason() -> None:
    assert not torch.distributed.is_initialized()
    s = allreduce_baseline(gradient_bytes=1000, device=torch.device("cpu"))
    assert s["status"] == "skipped"
    assert s["reason"] == SKIPPED_ONE_DEVICE == "1 device: nothing to all-reduce"
    assert s["sizes"] == [] and s["busbw_gbps"] is None and s["predicted_step_s"] is None
    assert s["fit"] is None and s["busbw_at_gradient_gbps"] is None


# --- a one-rank gloo process group in this process (the fixture: conftest.py) --------------------


class PretendPeer:
    """Makes the sweep see two ranks: its ops run on the one real rank; every gather answers
    with this rank's values and a peer's (``scale`` times this rank's time per op)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, scale: float, extra_elapsed_s: float):
        self.own: list[list[float]] = []
        self.ops: list[int] = []  # elements of each all-reduce, in order
        real_all_reduce = dist.all_reduce

        def all_reduce(t: torch.Tensor, *a: Any, **k: Any) -> Any:
            self.ops.append(t.numel())
            return real_all_reduce(t, *a, **k)

        def gather(_sweep: Any, values: list[float]) -> list[list[float]]:
            self.own.append(list(values))
            return [values, [values[0] * scale, values[1] + extra_elapsed_s]]

        monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 2)
        monkeypatch.setattr(dist, "all_reduce", all_reduce)
        monkeypatch.setattr(_Sweep, "gather", gather)


def test_each_size_is_timed_after_a_barrier_and_averaged_over_ranks(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    peer = PretendPeer(monkeypatch, scale=3.0, extra_elapsed_s=0.0)
    s = allreduce_baseline(gradient_bytes=65536, device=torch.device("cpu"), budget_s=30)
    assert s["status"] == "measured" and s["reason"] is None
    assert [r["bytes"] for r in s["sizes"]] == sweep_sizes(65536)
    # Two timed blocks a size (the warm-up op, then the ops the row reports): each row is
    # the mean of this rank's time per op and the peer's, three times as long.
    assert len(peer.own) == 2 * len(s["sizes"])
    for row, timed in zip(s["sizes"], peer.own[1::2], strict=True):
        assert row["time_s"] == pytest.approx((timed[0] + 3 * timed[0]) / 2)
    # The collectives: one MIN-reduce of the free memory, then per size a one-element
    # barrier before the warm-up op and one before the timed ops.
    assert peer.ops[0] == 1
    ops = peer.ops[1:]
    for nbytes in sweep_sizes(65536):
        elems = nbytes // 4
        assert ops[:2] == [1, elems]  # barrier, warm-up
        ops = ops[2:]
        assert ops[0] == 1  # barrier before the timed ops
        timed = 1
        while timed < len(ops) and ops[timed] == elems:
            timed += 1
        assert timed - 1 >= 2  # MIN_ITERS at least
        ops = ops[timed:]
    assert ops == []
    assert s["fit"]["points"] == len(s["sizes"])


def test_the_budget_is_decided_on_the_slowest_ranks_clock(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The peer has been at it 10 s longer: with a 5 s budget everyone stops after one size.
    PretendPeer(monkeypatch, scale=1.0, extra_elapsed_s=10.0)
    s = allreduce_baseline(gradient_bytes=2**20, device=torch.device("cpu"), budget_s=5)
    assert [r["bytes"] for r in s["sizes"]] == [4096]
    assert s["reason"].startswith("budget 5 s: stopped before 8192 B after 10")
    assert s["fit"]["alpha_s"] is None and s["predicted_step_s"] is None


# --- DDP's own buckets, read from a real DDP in the one-rank group --------------------------------


def train(ddp: DistributedDataParallel, steps: int, width: int = 1024) -> None:
    for _ in range(steps):
        ddp.zero_grad()
        ddp(torch.randn(2, width)).square().mean().backward()


def test_ddp_buckets_are_read_after_its_third_iteration(one_rank_group: None) -> None:
    ddp = DistributedDataParallel(linears())
    train(ddp, 2)
    buckets, why = read_ddp_buckets(ddp)
    assert buckets is None  # rebuilt in the 2nd iteration, logged from the 3rd
    assert why is not None and why.startswith("DDP had not logged its rebuilt buckets")
    train(ddp, 1)
    assert read_ddp_buckets(ddp) == ([4_198_400, 29_388_800], None)


class Detour(torch.nn.Module):
    """Registers big, small1, small2; runs small1, small2, big: backward meets big first."""

    def __init__(self) -> None:
        super().__init__()
        self.big = torch.nn.Linear(1024, 1024)  # 4_198_400 B
        self.small1 = torch.nn.Linear(1024, 8)  # 32_800 B
        self.small2 = torch.nn.Linear(8, 1024)  # 36_864 B

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.big(self.small2(self.small1(x)))  # type: ignore[no-any-return]


def test_ddp_buckets_follow_backwards_order_where_the_estimate_cannot(
    one_rank_group: None,
) -> None:
    model = Detour()
    assert estimate_bucket_bytes(parameter_bytes(model)) == [4_268_064]  # one bucket
    ddp = DistributedDataParallel(model)
    train(ddp, 3)
    assert read_ddp_buckets(ddp) == ([4_198_400, 69_664], None)  # big alone passes 1 MiB


def test_without_rebuilding_ddp_keeps_its_first_buckets(one_rank_group: None) -> None:
    ddp = DistributedDataParallel(linears(), find_unused_parameters=True)
    train(ddp, 3)
    buckets, why = read_ddp_buckets(ddp)
    assert why is None and buckets is not None
    assert sorted(buckets) == sorted([4_096, 29_388_800, 4_194_304])  # registration order
    assert ddp_bucket_caps(ddp) == (DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_CAP_BYTES)
    assert ddp_bucket_caps(DistributedDataParallel(linears(1), bucket_cap_mb=5)) == (
        5 * 2**20,
        5 * 2**20,
    )


@pytest.mark.parametrize("cap_mb", [None, 2, 5])
def test_the_bucket_rule_is_the_one_a_real_ddp_follows(
    one_rank_group: None, cap_mb: int | None
) -> None:
    """40 x Linear(256, 256), 263,168 B each, trained under DDP in this process: the caps the
    shared rule gives (bucket_caps) are the ones DDP took; with them, whole parameters make
    exactly DDP's buckets; and the byte split (the what-if's and the backtest's, which know
    no parameters) is DDP's to within one layer, its first bucket included: an explicit cap
    holds for the first bucket too, the default gives it 1 MiB."""
    model = linears(40, width=256)
    ddp = DistributedDataParallel(model, bucket_cap_mb=cap_mb)
    train(ddp, 3, width=256)
    built, why = read_ddp_buckets(ddp)
    assert why is None and built is not None
    assert ddp_bucket_caps(ddp) == bucket_caps("ddp", cap_mb)
    assert estimate_bucket_bytes(parameter_bytes(model), *bucket_caps("ddp", cap_mb)) == built
    layer = 263_168
    split = split_into_buckets(gradient_bytes(model), "ddp", cap_mb)
    assert split[-1] < layer or len(split) == len(built)  # a tail under a layer: DDP's last
    for ours, ddps in zip(split, built, strict=False):
        assert abs(ours - ddps) < layer, (split, built)
    first = 2**20 if cap_mb is None else cap_mb * 2**20
    assert first <= built[0] < first + layer


def test_ddp_buckets_that_cannot_be_read_give_a_reason_not_an_error(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert read_ddp_buckets(linears(1)) == (None, "not trained under DDP (Sequential)")
    ddp = DistributedDataParallel(linears(1))
    train(ddp, 3)

    def broken() -> dict[str, Any]:
        raise RuntimeError("logger gone")

    monkeypatch.setattr(ddp, "_get_ddp_logging_data", broken)
    assert read_ddp_buckets(ddp) == (None, "DDP's buckets not read: RuntimeError: logger gone")
    monkeypatch.setattr(ddp, "_get_ddp_logging_data", lambda: {"rebuilt_bucket_sizes": "12, x"})
    buckets, why = read_ddp_buckets(ddp)
    assert buckets is None and why is not None and "ValueError" in why


def before_timing_run(
    monkeypatch: pytest.MonkeyPatch, model: torch.nn.Module, wrapped: torch.nn.Module
) -> tuple[dict[str, Any], dict[str, Any]]:
    """BeforeTiming's baseline as two pretended ranks, three training steps, then the end of
    training: (the section before training, the section after)."""
    trainer = SimpleNamespace(strategy=SimpleNamespace(model=wrapped, root_device=cpu))
    before = BeforeTiming(DiagnosisConfig(allreduce_budget_s=2.0), local_rank=0, node="n")
    with monkeypatch.context() as m:
        PretendPeer(m, scale=1.0, extra_elapsed_s=0.0)
        before.on_train_start(trainer, model)  # type: ignore[arg-type]
    at_start = dict(before.allreduce)
    train(wrapped, 3)  # type: ignore[arg-type]
    before.on_train_end(trainer, model)  # type: ignore[arg-type]
    return at_start, before.allreduce


cpu = torch.device("cpu")


def test_the_section_takes_ddps_buckets_when_training_ends(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = Detour()
    at_start, s = before_timing_run(monkeypatch, model, DistributedDataParallel(model))
    assert at_start["status"] == "measured"
    assert at_start["bucket_bytes"] == [4_268_064] and at_start["bucket_source"] == "estimated"
    assert at_start["bucket_reason"].startswith("DDP's own buckets are read when training ends")
    assert s["bucket_bytes"] == [4_198_400, 69_664] and s["bucket_source"] == "ddp"
    assert s["bucket_reason"] is None
    assert s["predicted_step_s"] == pytest.approx(
        predicted_step_s(s["fit"], [4_198_400, 69_664], 2)
    )
    # Two buckets pay the latency twice: more than the one estimated bucket.
    assert s["predicted_step_s"] > at_start["predicted_step_s"]
    assert {k: v for k, v in s.items() if not k.startswith(("bucket", "predicted"))} == {
        k: v for k, v in at_start.items() if not k.startswith(("bucket", "predicted"))
    }


def test_the_estimate_stays_with_the_reason_when_ddp_cannot_be_read(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = linears(2)
    at_start, s = before_timing_run(monkeypatch, model, model)  # not wrapped in DDP
    assert s["bucket_source"] == "estimated"
    assert s["bucket_bytes"] == at_start["bucket_bytes"] == [4_198_400, 4_198_400]
    assert s["bucket_reason"] == f"not trained under DDP (Sequential); {ESTIMATED_FROM_PARAMETERS}"
    assert s["predicted_step_s"] == at_start["predicted_step_s"]
