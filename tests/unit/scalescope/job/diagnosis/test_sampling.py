"""The NVML sampler: its pure aggregation, its failure modes, and a real GPU where there is one."""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalescope.job.diagnosis.sampling import (
    RESERVOIR_SIZE,
    GpuSampler,
    GpuStats,
    cuda_pci_bus_ids,
    cuda_pci_bus_ids_or_reason,
    off_section,
    parse_bus_id,
    percentile,
    reason_table,
    throttle_names,
)

BUS_A, BUS_B = "00000000:1A:00.0", "00000000:3B:00.0"  # the stand-in NVML's two GPUs


def nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


# --- aggregation ----------------------------------------------------------------------------------


def stats_of(utils: list[float], **kw: Any) -> GpuStats:
    s = GpuStats(node="n1", index=0, name="GPU", **kw)
    for u in utils:
        s.add(util_pct=u, mem_used_bytes=0.0, power_w=None, throttle_mask=0)
    return s


def test_summary_means_p5_max_power_and_reasons() -> None:
    import pynvml

    s = GpuStats(node="node7", index=3, name="NVIDIA H100")
    s.add(util_pct=100.0, mem_used_bytes=2 * 2**30, power_w=300.0, throttle_mask=0)
    s.add(util_pct=50.0, mem_used_bytes=6 * 2**30, power_w=None, throttle_mask=0x4)
    s.add(util_pct=0.0, mem_used_bytes=4 * 2**30, power_w=100.0, throttle_mask=0x1)
    row = s.summary(reason_table(pynvml))
    assert row == {
        "node": "node7",
        "index": 3,
        "name": "NVIDIA H100",
        "samples": 3,
        "warmup_samples": 0,
        "util_mean_pct": pytest.approx(50.0),
        "util_p5_pct": pytest.approx(float(np.percentile([0.0, 50.0, 100.0], 5))),
        "mem_used_max_gib": pytest.approx(6.0),
        "power_mean_w": pytest.approx(200.0),  # over the samples that reported power
        "throttle_reasons": ["GpuIdle", "SwPowerCap"],
        "throttle_share": {"GpuIdle": pytest.approx(1 / 3), "SwPowerCap": pytest.approx(1 / 3)},
    }


def test_unsupported_readings_are_null_never_zero() -> None:
    s = GpuStats(node="", index=0, name="GPU")
    s.add(util_pct=None, mem_used_bytes=1.0, power_w=None, throttle_mask=0)
    row = s.summary({})
    assert row["samples"] == 1
    assert row["util_mean_pct"] is None and row["util_p5_pct"] is None
    assert row["power_mean_w"] is None
    assert row["throttle_reasons"] == [] and row["throttle_share"] == {}  # reported: none set
    s.add(util_pct=None, mem_used_bytes=1.0, power_w=None, throttle_mask=None)
    assert s.summary({})["throttle_share"] == {}  # a sample without them changes no share
    silent = GpuStats(node="", index=0, name="GPU")
    silent.add(util_pct=50.0, mem_used_bytes=1.0, power_w=None, throttle_mask=None)
    row = silent.summary({})
    assert row["throttle_reasons"] == [] and row["throttle_share"] is None  # never reported


def test_throttle_share_is_the_fraction_of_samples_with_each_reason() -> None:
    import pynvml

    hw, sw = pynvml.nvmlClocksThrottleReasonHwSlowdown, pynvml.nvmlClocksThrottleReasonSwPowerCap
    s = GpuStats(node="n1", index=0, name="GPU")
    for mask in (hw, hw | sw, 0, hw):
        s.add(util_pct=90.0, mem_used_bytes=0.0, power_w=None, throttle_mask=mask)
    row = s.summary(reason_table(pynvml))
    assert row["throttle_reasons"] == ["SwPowerCap", "HwSlowdown"]  # bit order, as the list
    assert row["throttle_share"] == {"SwPowerCap": 0.25, "HwSlowdown": 0.75}
    # the warm-up's samples are in neither the shares nor their denominator
    s.count_warmup()
    assert s.summary(reason_table(pynvml))["throttle_share"] == row["throttle_share"]


@given(st.lists(st.integers(min_value=0, max_value=0x1FF), min_size=1, max_size=200))
def test_throttle_shares_count_each_bit(masks: list[int]) -> None:
    s = GpuStats(node="", index=0, name="GPU")
    for mask in masks:
        s.add(util_pct=None, mem_used_bytes=0.0, power_w=None, throttle_mask=mask)
    row = s.summary({})
    assert list(row["throttle_share"]) == row["throttle_reasons"]
    for bit in range(9):
        name = f"bit{1 << bit:#x}"
        count = sum(1 for m in masks if m & (1 << bit))
        assert row["throttle_share"].get(name, 0.0) == count / len(masks)
        assert 0.0 < row["throttle_share"].get(name, 1.0) <= 1.0


def test_reason_names_come_from_the_nvml_bindings() -> None:
    import pynvml

    table = reason_table(pynvml)
    assert table[pynvml.nvmlClocksThrottleReasonGpuIdle] == "GpuIdle"
    assert table[pynvml.nvmlClocksThrottleReasonHwThermalSlowdown] == "HwThermalSlowdown"
    assert table[0x2] == "ApplicationsClocksSetting"  # one name per bit (UserDefinedClocks too)
    assert 0 not in table and pynvml.nvmlClocksThrottleReasonAll not in table
    assert throttle_names(0x4 | 0x40 | 0x1000, table) == [
        "SwPowerCap",
        "HwThermalSlowdown",
        "bit0x1000",
    ]
    assert throttle_names(0, table) == []


def test_p5_is_not_bounded_by_the_mean() -> None:
    # Why the property tests bound p5 by the median and not by the mean: 4 idle samples in 100
    # put the 5th percentile above the mean.
    s = stats_of([0.0] * 4 + [100.0] * 96).summary({})
    assert s["util_p5_pct"] == 100.0 > s["util_mean_pct"] == 96.0


@given(st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=300))
def test_p5_and_mean_lie_within_the_samples(utils: list[float]) -> None:
    row = stats_of(utils).summary({})
    lo, hi = min(utils), max(utils)
    assert lo <= row["util_p5_pct"] <= hi
    assert lo - 1e-9 <= row["util_mean_pct"] <= hi + 1e-9
    # up to the reservoir's size p5 is exact, and below the median
    assert row["util_p5_pct"] == pytest.approx(float(np.percentile(utils, 5)))
    assert row["util_p5_pct"] <= float(np.median(utils)) + 1e-9


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=50),
    st.integers(min_value=RESERVOIR_SIZE + 1, max_value=3 * RESERVOIR_SIZE),
)
def test_beyond_the_reservoir_p5_stays_within_the_samples(pattern: list[float], n: int) -> None:
    utils = [pattern[i % len(pattern)] for i in range(n)]
    s = stats_of(utils)
    row = s.summary({})
    assert len(s.reservoir) == RESERVOIR_SIZE
    assert min(utils) <= row["util_p5_pct"] <= max(utils)
    assert row["util_mean_pct"] == pytest.approx(sum(utils) / n)


def test_memory_is_bounded_for_100k_samples_and_p5_stays_accurate() -> None:
    rng = np.random.default_rng(0)
    utils = rng.uniform(0, 100, size=100_000).tolist()
    s = stats_of(utils, seed=1)
    assert s.samples == 100_000
    assert len(s.reservoir) == RESERVOIR_SIZE
    row = s.summary({})
    assert row["util_mean_pct"] == pytest.approx(float(np.mean(utils)))
    # a seeded 4096-value reservoir of U(0, 100): the 5th percentile within about a point
    assert row["util_p5_pct"] == pytest.approx(float(np.percentile(utils, 5)), abs=1.5)


def test_percentile_matches_numpy() -> None:
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for q in (0.0, 0.05, 0.5, 0.95, 1.0):
        assert percentile(sorted(values), q) == pytest.approx(float(np.percentile(values, 100 * q)))


def test_bus_ids_compare_across_nvml_and_cuda_spellings() -> None:
    assert parse_bus_id("00000000:3B:00.0") == parse_bus_id("0000:3b:00.0") == (0, 0x3B, 0, 0)
    assert parse_bus_id("3B:00.0") == (0, 0x3B, 0, 0)
    with pytest.raises(ValueError, match="'nonsense'"):
        parse_bus_id("nonsense")


# --- the sampler without a GPU --------------------------------------------------------------------


@pytest.mark.skipif(nvml_works(), reason="NVML works on this machine: nothing is unavailable")
def test_without_nvml_the_section_is_unavailable_with_the_reason() -> None:
    sampler = GpuSampler(interval_s=0.05, pci_bus_ids=[BUS_B], node="n1").start()
    time.sleep(0.2)
    section = sampler.stop()
    assert section["status"] == "unavailable"
    assert section["reason"] == "NVML library not found (no NVIDIA driver)"
    assert section["gpus"] == [] and section["interval_s"] == 0.05
    assert sampler._thread is not None and not sampler._thread.is_alive()


def test_without_the_bindings_the_section_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    section = GpuSampler(interval_s=0.05, pci_bus_ids=[BUS_B]).start().stop()
    assert section["status"] == "unavailable"
    assert "nvidia-ml-py is not installed" in section["reason"]


def test_without_the_jobs_bus_ids_no_gpu_is_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    # NVML works and sees two GPUs, but which are the job's is unknown: neither is sampled.
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    unknown = "torch.cuda.is_available() is False"
    sampler = GpuSampler(interval_s=0.01, unknown_reason=unknown).start()
    time.sleep(0.1)
    section = sampler.stop()
    assert section == {
        "status": "unavailable",
        "reason": f"the job's GPUs could not be identified: {unknown}; none sampled",
        "interval_s": 0.01,
        "gpus": [],
    }
    # without a known cause the reason still names what is missing, on one line
    section = GpuSampler(interval_s=0.01).start().stop()
    assert section["reason"] == "the job's GPUs could not be identified; none sampled"
    empty = GpuSampler(interval_s=0.01, pci_bus_ids=[]).start().stop()
    assert empty["status"] == "unavailable" and empty["gpus"] == []
    assert empty["reason"] == "the job has no GPU to sample (an empty list of PCI bus ids)"


def test_bus_ids_or_the_reason_they_are_unknown() -> None:
    import torch

    ids, why = cuda_pci_bus_ids_or_reason()
    if torch.cuda.is_available():
        assert why is None and ids is not None and len(ids) == torch.cuda.device_count()
    else:
        assert (ids, why) == (None, "torch.cuda.is_available() is False")
    assert cuda_pci_bus_ids() == ids


def test_stop_never_raises_even_unstarted_or_twice() -> None:
    sampler = GpuSampler()
    assert sampler.stop() == {
        "status": "unavailable",
        "reason": "sampler never started",
        "interval_s": 1.0,
        "gpus": [],
    }
    sampler.start()
    first = sampler.stop()
    assert sampler.stop()["status"] == first["status"]


def test_off_section() -> None:
    assert off_section("diagnosis.enabled=false") == {
        "status": "off",
        "reason": "diagnosis.enabled=false",
        "interval_s": 1.0,
        "gpus": [],
    }


# --- the sampling loop against a stand-in NVML ----------------------------------------------------
# NVML cannot be made to lose a GPU or hang on this machine; a stand-in module with the bindings'
# names drives the real thread, selection and error handling.


def fake_nvml(
    *,
    lose_after: int | None = None,
    hang: threading.Event | None = None,
    warming: threading.Event | None = None,
    on_read: Callable[[int], None] | None = None,
) -> Any:
    """Two GPUs, A (index 0) and B. While ``warming`` is set, B reads as in a warm-up (5 %
    busy, 8 GiB used, HwSlowdown); ``on_read(n)`` runs at the start of the n-th reading (a
    sweep of the two GPUs is two readings); ``reads`` counts them."""
    import pynvml

    nv = types.ModuleType("pynvml")
    nv.NVMLError = pynvml.NVMLError
    nv.NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    for name in dir(pynvml):
        if name.startswith(("nvmlClocksEventReason", "nvmlClocksThrottleReason")):
            setattr(nv, name, getattr(pynvml, name))
    gpus = [(BUS_A, "NVIDIA A"), (BUS_B, "NVIDIA B")]
    reads = [0]

    nv.nvmlInit = lambda: None
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: len(gpus)
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpus[h][0].encode())
    nv.nvmlDeviceGetName = lambda h: gpus[h][1]

    def util(h: int) -> Any:
        reads[0] += 1
        if on_read is not None:
            on_read(reads[0])
        if warming is not None and warming.is_set() and h == 1:
            return types.SimpleNamespace(gpu=5.0)
        if lose_after is not None and reads[0] > lose_after:
            raise pynvml.NVMLError_GpuIsLost()
        if hang is not None and reads[0] > 2:
            hang.wait(30)
        return types.SimpleNamespace(gpu=80.0 if h == 1 else 20.0)

    def power(h: int) -> int:
        if h == 0:
            raise pynvml.NVMLError_NotSupported()
        return 250_000  # mW

    nv.nvmlDeviceGetUtilizationRates = util
    nv.nvmlDeviceGetPowerUsage = power

    def mem(h: int) -> Any:
        warm = warming is not None and warming.is_set() and h == 1
        return types.SimpleNamespace(used=2**30 * (8 if warm else h + 1))

    def mask(h: int) -> int:
        if warming is not None and warming.is_set() and h == 1:
            return 0x8  # HwSlowdown
        return 0x4 if h == 1 else 0  # SwPowerCap

    nv.nvmlDeviceGetMemoryInfo = mem
    nv.nvmlDeviceGetCurrentClocksEventReasons = mask
    nv.reads = reads
    return nv


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s:g} s for {what}"
        time.sleep(0.002)


def test_the_loop_samples_the_selected_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    sampler = GpuSampler(interval_s=0.01, pci_bus_ids=["3b:00.0"], node="n2")
    sampler.steady()  # before start: every sample counts
    sampler.start()
    time.sleep(0.2)
    section = sampler.stop()
    assert section["status"] == "sampled" and section["reason"] is None
    [gpu] = section["gpus"]
    assert (gpu["node"], gpu["index"], gpu["name"]) == ("n2", 0, "NVIDIA B")
    assert gpu["samples"] >= 2
    assert gpu["util_mean_pct"] == 80.0 and gpu["util_p5_pct"] == 80.0
    assert gpu["mem_used_max_gib"] == 2.0 and gpu["power_mean_w"] == 250.0
    assert gpu["throttle_reasons"] == ["SwPowerCap"]
    assert gpu["throttle_share"] == {"SwPowerCap": 1.0}
    assert gpu["warmup_samples"] == 0


def test_both_gpus_in_the_jobs_order_and_unsupported_power(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    sampler = GpuSampler(interval_s=0.01, pci_bus_ids=[BUS_A, BUS_B])
    sampler.steady()
    sampler.start()
    time.sleep(0.1)
    gpus = sampler.stop()["gpus"]
    assert [g["name"] for g in gpus] == ["NVIDIA A", "NVIDIA B"]
    assert gpus[0]["power_mean_w"] is None and gpus[1]["power_mean_w"] == 250.0


def test_an_unknown_bus_id_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml())
    section = GpuSampler(interval_s=0.01, pci_bus_ids=["00000000:99:00.0"]).start().stop()
    assert section["status"] == "unavailable"
    assert "no NVML device has PCI bus id 00000000:99:00.0" in section["reason"]


def test_a_gpu_lost_mid_run_is_unavailable_and_keeps_what_was_sampled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(lose_after=6))
    sampler = GpuSampler(interval_s=0.01, pci_bus_ids=[BUS_A, BUS_B])
    sampler.steady()
    sampler.start()
    time.sleep(0.2)
    section = sampler.stop()
    assert section["status"] == "unavailable"
    assert section["reason"].startswith(
        "GPU 0 stopped answering after 3 samples: NVMLError_GpuIsLost"
    )
    assert "\n" not in section["reason"]
    assert [g["samples"] for g in section["gpus"]] == [3, 3]


def test_a_hung_nvml_call_does_not_hold_up_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(hang=release))
    sampler = GpuSampler(interval_s=0.01, pci_bus_ids=[BUS_A, BUS_B])
    sampler.steady()
    sampler.start()
    time.sleep(0.1)
    try:
        section = sampler.stop()
        assert section["status"] == "unavailable"
        assert section["reason"] == "NVML did not answer within 2 s"
        assert [g["samples"] for g in section["gpus"]] == [1, 1]
    finally:
        release.set()


# --- the steady-state window ---------------------------------------------------------------------


def test_samples_before_the_steady_mark_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    warming = threading.Event()
    warming.set()
    nv = fake_nvml(warming=warming)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    sampler = GpuSampler(interval_s=0.005, pci_bus_ids=[BUS_B], node="n1").start()
    wait_until(lambda: nv.reads[0] >= 3, "3 warm-up samples")
    # The GPU leaves its warm-up before the mark, so every reading that began after the mark
    # sees steady values; readings before it (of either kind) must not count.
    warming.clear()
    sampler.steady()
    at_mark = nv.reads[0]
    wait_until(lambda: nv.reads[0] >= at_mark + 3, "3 more samples")
    section = sampler.stop()
    assert section["status"] == "sampled" and section["reason"] is None
    [gpu] = section["gpus"]
    assert gpu["warmup_samples"] >= 3
    assert gpu["samples"] >= 2  # at most one reading was under way at the mark
    assert gpu["samples"] + gpu["warmup_samples"] == nv.reads[0]
    # none of the warm-up's 5 %, 8 GiB or HwSlowdown made it into the figures
    assert gpu["util_mean_pct"] == 80.0 and gpu["util_p5_pct"] == 80.0
    assert gpu["mem_used_max_gib"] == 2.0
    assert gpu["throttle_reasons"] == ["SwPowerCap"]
    assert gpu["throttle_share"] == {"SwPowerCap": 1.0}


def test_a_reading_under_way_at_the_mark_counts_as_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    entered, release = threading.Event(), threading.Event()

    def on_read(n: int) -> None:
        if n == 3:  # the second sweep, its first GPU: held mid-reading
            entered.set()
            release.wait(10)

    nv = fake_nvml(on_read=on_read)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    sampler = GpuSampler(interval_s=0.005, pci_bus_ids=[BUS_A, BUS_B]).start()
    assert entered.wait(10)
    sampler.steady()
    release.set()
    wait_until(lambda: nv.reads[0] >= 8, "two more sweeps")
    gpus = sampler.stop()["gpus"]
    # sweep 1 and the sweep under way at the mark, for both GPUs alike: never split
    assert [g["warmup_samples"] for g in gpus] == [2, 2]
    assert gpus[0]["samples"] == gpus[1]["samples"] >= 2


def test_the_steady_mark_is_thread_safe_and_the_first_one_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nv = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    sampler = GpuSampler(interval_s=0.002, pci_bus_ids=[BUS_A, BUS_B]).start()
    wait_until(lambda: nv.reads[0] >= 4, "2 sweeps")
    # Eight threads mark at once while the sampling thread reads: one mark, taken under the
    # lock the sampling thread classifies each sweep under.
    go = threading.Barrier(8)

    def mark() -> None:
        go.wait()
        sampler.steady()

    marks = [threading.Thread(target=mark) for _ in range(8)]
    for t in marks:
        t.start()
    for t in marks:
        t.join(10)
    first = sampler._steady_at
    assert first is not None
    at_marks = nv.reads[0]
    wait_until(lambda: nv.reads[0] >= at_marks + 6, "3 more sweeps")
    sampler.steady()  # a late second call moves nothing
    assert sampler._steady_at == first
    section = sampler.stop()
    a, b = section["gpus"]
    assert section["status"] == "sampled", section["reason"]
    assert (a["samples"], a["warmup_samples"]) == (b["samples"], b["warmup_samples"])
    assert a["warmup_samples"] >= 2 and a["samples"] >= 2


def test_a_run_that_never_reaches_the_steady_state_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nv = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    sampler = GpuSampler(interval_s=0.005, pci_bus_ids=[BUS_B], node="n1").start()
    wait_until(lambda: nv.reads[0] >= 3, "3 samples")
    section = sampler.stop()
    assert section["status"] == "unavailable"
    assert section["reason"] == "no steady state: training ended within the warm-up"
    [gpu] = section["gpus"]
    assert gpu["samples"] == 0 and gpu["warmup_samples"] >= 3
    # no figure from the warm-up, not even a zero
    for key in ("util_mean_pct", "util_p5_pct", "mem_used_max_gib", "power_mean_w"):
        assert gpu[key] is None, key
    assert gpu["throttle_reasons"] == [] and gpu["throttle_share"] is None


def test_a_steady_state_shorter_than_one_interval_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nv = fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    sampler = GpuSampler(interval_s=30.0, pci_bus_ids=[BUS_B]).start()
    wait_until(lambda: nv.reads[0] >= 1, "the first sample")
    sampler.steady()
    section = sampler.stop()  # the thread waits out its 30 s interval: stop() wakes it
    assert section["status"] == "unavailable"
    assert section["reason"].startswith("no sample taken in the steady state (")
    assert section["reason"].endswith(" s long, one sample every 30 s)")
    assert [(g["samples"], g["warmup_samples"]) for g in section["gpus"]] == [(0, 1)]


# --- a real GPU -----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_samples_a_real_gpu_under_load() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    bus_ids = cuda_pci_bus_ids()
    assert bus_ids is not None and len(bus_ids) == torch.cuda.device_count()
    sampler = GpuSampler(interval_s=0.2, pci_bus_ids=bus_ids, node="gpu-node").start()
    a = torch.randn(4096, 4096, device="cuda")
    (a @ a).sum().item()  # the warm-up: cuBLAS's handle and workspace, the allocator
    sampler.steady()
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    section = sampler.stop()
    assert section["status"] == "sampled", section["reason"]
    assert len(section["gpus"]) == torch.cuda.device_count()
    gpu = section["gpus"][0]
    assert gpu["name"] == torch.cuda.get_device_name(0)
    assert gpu["samples"] >= 3
    assert gpu["util_mean_pct"] > 0 and 0 <= gpu["util_p5_pct"] <= 100
    assert gpu["mem_used_max_gib"] > 0
    assert gpu["power_mean_w"] is None or gpu["power_mean_w"] > 0
    assert all(isinstance(r, str) for r in gpu["throttle_reasons"])
    share = gpu["throttle_share"]
    assert share is None or (
        list(share) == gpu["throttle_reasons"] and all(0 < v <= 1 for v in share.values())
    )
    assert gpu["warmup_samples"] >= 0
