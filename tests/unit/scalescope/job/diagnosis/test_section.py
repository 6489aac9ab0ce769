"""The record's diagnosis section rank 0 assembles from every rank's gathered part."""

from __future__ import annotations

import types
from typing import Any

import pytest
from diagnosis_helpers import windows

from scalescope.job.diagnosis.cross_rank import combine_calibration
from scalescope.job.diagnosis.sampling import NO_STEADY_STATE, GpuStats, nvml_section, reason_table
from scalescope.job.diagnosis.section import BeforeTiming, assemble, merge_nvml

BUS_B = "00000000:3B:00.0"  # a GPU of the job, as CUDA spells its bus id


def _part(rank: int, node: str, own: float, comm: float, **over: Any) -> dict[str, Any]:
    step = own + comm
    d = {
        "clock": "wall",
        "step_time_s": step,
        "input_wait_s": 0.001,
        "comm_wait_s": comm,
        "compute_s": own - 0.001,
        # of the communication wait, 1 ms is the all-reduce; the rest is waiting for others
        "step_waits": {
            "steps": 100,
            "exposed_s": 0.001,
            "exposed_se_s": 1e-5,
            "wait_s": comm - 0.001,
            "wait_se_s": 1e-5,
        },
    }
    d.update(over)
    return {"node": node, "local_rank": rank % 2, "peak_dev": None, "rss": 0.4, "diagnosis": d}


def _assemble(parts: list[dict[str, Any]], calibration: Any = None) -> dict[str, Any]:
    if calibration is None:
        calibration = combine_calibration([windows(r) for r in range(len(parts))])
    return assemble(
        per_rank=parts,
        steady_steps=100,
        per_device_batch_size=32,
        allreduce={"status": "measured", "seconds": 0.2},
        nvml={"status": "unavailable", "reason": "CPU run: no GPU to sample"},
        calibration=calibration,
        calibration_steps=8,
    )


def test_the_slowest_and_the_typical_rank_and_the_skew() -> None:
    # Rank 2 needs 30 ms on its own, the others 10-11 ms: the others wait for it.
    parts = [
        _part(0, "n1", 0.010, 0.021),
        _part(1, "n1", 0.011, 0.020),
        _part(2, "n2", 0.030, 0.001),
        _part(3, "n2", 0.0105, 0.0205),
    ]
    d = _assemble(parts)
    assert d["status"] == "recorded"
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3]
    assert d["slowest_rank"] == 2 and d["slowest_node"] == "n2"
    assert d["typical_rank"] == 3  # lower median of 10, 10.5, 11, 30 ms
    assert d["rank_skew"] == pytest.approx((0.030 - 0.0105) / 0.0105)
    cal = d["calibration"]
    assert cal["fwd_bwd_s"] == pytest.approx(0.013)  # the slowest rank's no_sync pass
    assert cal["fwd_bwd_sync_s"] == pytest.approx(0.0155)  # median of the synced ones
    assert cal["exposed_comm_s"] == pytest.approx(0.0025)
    assert d["overhead_s"] == {"calibration": 0.5, "allreduce_baseline": 0.2}


def test_two_ranks_count_one_slow_rank_whole_as_skew() -> None:
    d = _assemble([_part(0, "a", 0.010, 0.011), _part(1, "b", 0.020, 0.001)])
    assert d["typical_rank"] == 0 and d["slowest_rank"] == 1
    assert d["rank_skew"] == pytest.approx(1.0)


def test_a_rank_without_figures_leaves_skew_unknown_and_calibration_says_why() -> None:
    late = _part(1, "b", 0.010, 0.01)
    for key in ("step_time_s", "input_wait_s", "comm_wait_s", "compute_s"):
        del late["diagnosis"][key]
    skipped = {"status": "skipped", "reason": "training stopped"}
    d = _assemble([_part(0, "a", 0.010, 0.011), late], combine_calibration([windows(0), skipped]))
    assert d["slowest_rank"] is None and d["rank_skew"] is None  # unknown, not 0
    assert d["calibration"]["status"] == "skipped"
    assert d["calibration"]["exposed_comm_s"] is None
    assert d["calibration"]["reason"] == "training stopped"


def test_nvml_sections_of_several_nodes_merge() -> None:
    gpu = {"node": "n1", "index": 0, "util_mean_pct": 90.0}
    sampled = {"status": "sampled", "reason": None, "interval_s": 1.0, "gpus": [gpu]}
    other = {**sampled, "gpus": [{**gpu, "node": "n2"}]}
    merged = merge_nvml([sampled, None, other, None])
    assert merged["status"] == "sampled"
    assert [g["node"] for g in merged["gpus"]] == ["n1", "n2"]
    none = merge_nvml([{"status": "unavailable", "reason": "no driver", "interval_s": 1.0}])
    assert none["status"] == "unavailable" and none["gpus"] is None
    assert none["reason"] == "no driver"


def test_each_ranks_wait_for_others_and_the_exposed_all_reduce() -> None:
    d = _assemble([_part(0, "a", 0.010, 0.011), _part(1, "b", 0.020, 0.001)])
    fast, slow = d["ranks"]
    assert fast["wait_s"] == pytest.approx(0.010) and fast["exposed_comm_s"] == pytest.approx(0.001)
    assert slow["wait_s"] == pytest.approx(0.0) and slow["exposed_comm_s"] == pytest.approx(0.001)
    assert d["step_waits"]["exposed_s"] == 0.001 and d["step_waits"]["steps"] == 100


def test_one_device_waits_for_nobody() -> None:
    part = _part(0, "a", 0.010, 0.0)
    del part["diagnosis"]["step_waits"]
    skipped = {"status": "skipped", "reason": "1 device: nothing to all-reduce"}
    (row,) = _assemble([part], skipped)["ranks"]
    assert (row["wait_s"], row["exposed_comm_s"]) == (0.0, 0.0)


# --- NVML: the nodes' sections merged, and the sampler's steady mark --------------------------


def test_merging_the_nodes_keeps_the_warmup_count_and_the_throttle_shares() -> None:
    import pynvml

    def node_section(node: str, masks: list[int]) -> dict[str, Any]:
        s = GpuStats(node=node, index=0, name="NVIDIA H100")
        s.count_warmup()
        for mask in masks:
            s.add(util_pct=90.0, mem_used_bytes=2**30, power_w=500.0, throttle_mask=mask)
        return nvml_section("sampled", None, 1.0, [s.summary(reason_table(pynvml))])

    hw = pynvml.nvmlClocksThrottleReasonHwSlowdown
    n1, n2 = node_section("n1", [hw, hw, hw, 0]), node_section("n2", [0, 0])
    never = nvml_section("unavailable", NO_STEADY_STATE, 1.0)
    merged = merge_nvml([n1, None, n2, never])
    assert merged["status"] == "sampled"
    assert merged["gpus"] == n1["gpus"] + n2["gpus"]  # every field of every row, as sampled
    g1, g2 = merged["gpus"]
    assert (g1["warmup_samples"], g1["samples"]) == (1, 4)
    assert g1["throttle_share"] == {"HwSlowdown": 0.75} and g2["throttle_share"] == {}


# --- the diagnosis callback marks the steady state -----------------------------------------------


class StubSampler:
    """What BeforeTiming does to its sampler, in order."""

    def __init__(self, **kw: Any) -> None:
        self.kw = kw
        self.calls: list[str] = []

    def start(self) -> StubSampler:
        self.calls.append("start")
        return self

    def steady(self) -> None:
        self.calls.append("steady")

    def stop(self) -> dict[str, Any]:
        self.calls.append("stop")
        return {"status": "sampled", "reason": None, "interval_s": 1.0, "gpus": []}


def gpu_fit_start(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> tuple[Any, StubSampler]:
    """A BeforeTiming (local rank 0, a CUDA device) past ``on_fit_start``, with a stub
    sampler; ``kw`` goes to BeforeTiming."""
    import torch

    from scalescope import config
    from scalescope.job.diagnosis import sampling

    monkeypatch.setattr(sampling, "GpuSampler", StubSampler)
    monkeypatch.setattr(sampling, "cuda_pci_bus_ids_or_reason", lambda: ([BUS_B], None))
    before = BeforeTiming(config.DiagnosisConfig(), local_rank=0, node="n1", **kw)
    trainer = types.SimpleNamespace(
        strategy=types.SimpleNamespace(root_device=torch.device("cuda", 0))
    )
    before.on_fit_start(trainer, None)  # type: ignore[arg-type]
    assert isinstance(before._sampler, StubSampler)
    assert before._sampler.kw["pci_bus_ids"] == [BUS_B]
    return before, before._sampler


def test_before_timing_marks_the_steady_state_once_the_warmup_has_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scalescope.job.clocks.timing import Timings

    t = Timings(process_start_unix=0.0)
    before, sampler = gpu_fit_start(monkeypatch, timings=t)
    for i in range(3):
        before.on_train_batch_end(None, None, None, None, i)  # type: ignore[arg-type]
    assert sampler.calls == ["start"]
    t.warmup_steps = 3  # what the TimingCallback sets, after this callback at that batch end
    for i in range(3, 6):
        before.on_train_batch_end(None, None, None, None, i)  # type: ignore[arg-type]
    assert sampler.calls == ["start", "steady"]  # once, at the first batch end to see it
    before.stop_sampler()
    assert sampler.calls == ["start", "steady", "stop"]
    assert before.nvml is not None and before.nvml["status"] == "sampled"


def test_before_timing_without_timings_counts_every_sample(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before, sampler = gpu_fit_start(monkeypatch)  # the constructor as it was
    before.on_train_batch_end(None, None, None, None, 0)  # type: ignore[arg-type]
    assert sampler.calls == ["steady", "start"]


def test_before_timing_passes_on_why_the_jobs_gpus_are_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from scalescope import config
    from scalescope.job.diagnosis import sampling

    monkeypatch.setattr(sampling, "GpuSampler", StubSampler)
    why = "torch.cuda.is_available() is False"
    monkeypatch.setattr(sampling, "cuda_pci_bus_ids_or_reason", lambda: (None, why))
    before = BeforeTiming(config.DiagnosisConfig(), local_rank=0, node="n1")
    trainer = types.SimpleNamespace(
        strategy=types.SimpleNamespace(root_device=torch.device("cuda"))
    )
    before.on_fit_start(trainer, None)  # type: ignore[arg-type]
    assert before._sampler.kw["pci_bus_ids"] is None
    assert before._sampler.kw["unknown_reason"] == why
