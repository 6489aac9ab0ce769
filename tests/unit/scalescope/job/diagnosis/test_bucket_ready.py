"""When each of DDP's buckets became ready in backward (scalescope.job.diagnosis.bucket_ready): the
mapping of parameters to buckets on hand-built timings, and a real DDP in a one-rank gloo
group in this process (an in-memory store: no port, no process)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from scalescope.job.diagnosis.bucket_ready import (
    ReadinessTimer,
    bucket_offsets,
    parse_bucket_indices,
    split_by_sizes,
    summary,
)
from scalescope.job.diagnosis.section import assemble
from scalescope.job.diagnosis.step_clock import Clock


def test_a_bucket_is_ready_when_its_last_parameter_is() -> None:
    # parameters 0-3, their gradients at 10, 2, 30 ms and (3) none in this step
    marks = [0.010, 0.002, 0.030, None]
    assert bucket_offsets(marks, [[1, 0], [2]]) == [0.010, 0.030]
    assert bucket_offsets(marks, [[0, 1, 2]]) == [0.030]
    # a parameter without a gradient (unused) is marked ready by DDP with the first one
    assert bucket_offsets(marks, [[3], [1, 2]]) == [0.002, 0.030]


def test_the_first_backwards_order_is_cut_at_ddps_bucket_sizes() -> None:
    nbytes = [10, 20, 30, 40]
    order = [3, 2, 1, 0]  # the last registered first, as backward meets them
    assert split_by_sizes(order, nbytes, [70, 30]) == [[3, 2], [1, 0]]
    assert split_by_sizes(order, nbytes, [40, 60]) == [[3], [2, 1, 0]]
    assert split_by_sizes(order, nbytes, [60, 40]) is None  # no whole parameters make 60
    assert split_by_sizes(order, nbytes, [70]) is None  # parameters left over
    assert split_by_sizes(order, nbytes, [70, 30, 5]) is None  # a bucket left empty


def test_ddps_logged_indices_are_read_and_anything_else_is_not() -> None:
    assert parse_bucket_indices("5 4, 3 2 0 1") == [[5, 4], [3, 2, 0, 1]]
    assert parse_bucket_indices("0") == [[0]]
    for bad in (None, "", "a b", "1,,2", 3):
        assert parse_bucket_indices(bad) is None


def test_the_shares_are_each_steps_offset_over_its_backward_medianed() -> None:
    steps = [(0.100, [0.010, 0.100]), (0.200, [0.040, 0.200]), (0.100, [0.060, 0.100])]
    s = summary(steps, [9_000, 1_000], "ddp", 1e-4)
    assert s["ready_share"] == pytest.approx([0.2, 1.0])  # 0.1, 0.2, 0.6 -> 0.2
    assert s["steps"] == 3 and s["backward_s"] == [0.100, 0.200, 0.100]
    assert s["ready_s"][1] == [0.040, 0.200] and s["status"] == "recorded"


# --- a real DDP ------------------------------------------------------------------------------


class LateBig(torch.nn.Module):
    """Registers big first, but runs it last: backward produces big's gradients first, and
    the small layers' later, after the sleep in the middle of backward."""

    def __init__(self) -> None:
        super().__init__()
        self.big = torch.nn.Linear(512, 1024)  # 2_101_248 B: alone past the 1 MiB first cap
        self.small = torch.nn.Linear(512, 512)  # 1_050_624 B

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.big(_Sleep.apply(self.small(x)))  # type: ignore[no-any-return]


class _Sleep(torch.autograd.Function):
    """Identity forward; its backward sleeps 100 ms: between big's gradients and small's."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        time.sleep(0.100)
        return g


def _step(ddp: DistributedDataParallel, timer: ReadinessTimer | None = None) -> None:
    ddp.zero_grad()
    loss = ddp(torch.randn(2, 512)).square().mean()
    if timer is not None:
        timer.backward_starts()
    loss.backward()
    if timer is not None:
        timer.backward_ends()


def test_a_real_ddp_maps_its_parameters_and_times_its_buckets(one_rank_group: None) -> None:
    model = LateBig()
    ddp = DistributedDataParallel(model)
    params = [p for p in model.parameters() if p.requires_grad]  # big.w, big.b, small.w, small.b
    for _ in range(3):  # DDP rebuilds its buckets in the 2nd iteration, logs them from the 3rd
        _step(ddp)
    timer = ReadinessTimer(Clock(), params, steps=2)
    for _ in range(3):  # the third is not timed, and the hooks are gone by then
        _step(ddp, timer)
    assert len(timer.raw) == 2 and timer.done and not timer._hooks
    part = timer.result(ddp, first_order=[1, 0, 3, 2])
    assert part["status"] == "recorded" and part["mapped_by"] == "ddp"
    assert part["bucket_bytes"] == [2_101_248, 1_050_624]  # big's bucket sent first
    for backward, (big, small) in zip(part["backward_s"], part["ready_s"], strict=True):
        assert small >= 0.100 and small == backward and big < 0.5 * backward
    assert part["ready_share"][0] < 0.5 and part["ready_share"][1] == 1.0
    assert 0 < part["overhead_s"] < 0.01
    # parameters listed in another order than DDP's: its indices do not name them, so their
    # bytes do not make its buckets; the first backward's order (in this numbering) does
    other = [model.small.weight, model.small.bias, model.big.weight, model.big.bias]
    timer = ReadinessTimer(Clock(), other, steps=1)
    _step(ddp, timer)
    part = timer.result(ddp, first_order=[3, 2, 1, 0])
    assert part["mapped_by"] == "gradient order" and part["ready_share"][0] < 0.5


def test_the_first_backwards_order_stands_in_where_ddp_logs_no_indices(
    one_rank_group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = LateBig()
    ddp = DistributedDataParallel(model)
    for _ in range(3):
        _step(ddp)
    real = ddp._get_ddp_logging_data

    def without_indices() -> dict[str, Any]:
        data = dict(real())
        data.pop("rebuilt_per_bucket_param_indices", None)
        return data

    monkeypatch.setattr(ddp, "_get_ddp_logging_data", without_indices)
    timer = ReadinessTimer(Clock(), list(model.parameters()), steps=1)
    _step(ddp, timer)
    part = timer.result(ddp, first_order=[1, 0, 3, 2])
    assert part["mapped_by"] == "gradient order" and part["ready_share"][0] < 0.5
    # an order that does not add up to DDP's buckets records nothing, and says why
    wrong = ReadinessTimer(Clock(), list(model.parameters()), steps=1)
    _step(ddp, wrong)
    got = wrong.result(ddp, first_order=[3, 2, 1, 0])
    assert got["status"] == "not recorded" and "do not add up" in got["reason"]


def test_the_section_is_the_typical_ranks_or_says_why_not() -> None:
    def part(rank: int, own: float, ready: dict[str, Any] | None) -> dict[str, Any]:
        d = {
            "clock": "wall",
            "step_time_s": own + 0.001,
            "input_wait_s": 0.0,
            "comm_wait_s": 0.001,
            "compute_s": own,
        }
        if ready is not None:
            d["bucket_ready"] = ready
        return {"node": "n", "local_rank": rank, "peak_dev": None, "rss": 0.1, "diagnosis": d}

    def section(parts: list[dict[str, Any]]) -> dict[str, Any]:
        return assemble(
            per_rank=parts,
            steady_steps=10,
            per_device_batch_size=8,
            allreduce={"status": "measured"},
            nvml={"status": "unavailable"},
            calibration={"status": "skipped"},
            calibration_steps=8,
        )["bucket_ready"]

    mine = [summary([(0.1, [r / 100, 0.1])], [8, 4], "ddp", 0.0) for r in range(3)]
    got = section([part(0, 0.030, mine[0]), part(1, 0.020, mine[1]), part(2, 0.010, mine[2])])
    assert got["rank"] == 1 and got["ready_share"] == pytest.approx([0.1, 1.0])  # typical: 1
    one = section([part(0, 0.010, None)])
    assert one["status"] == "not recorded" and one["reason"].startswith("1 device")
    why = {"status": "not recorded", "reason": "DDP's buckets not read: X"}
    assert section([part(0, 0.01, why), part(1, 0.02, why)])["reason"] == why["reason"]
