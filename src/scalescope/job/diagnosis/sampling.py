"""GPU sampling through NVML: one sampler per node, in a background thread, bounded memory.

Local rank 0 of each node starts a :class:`GpuSampler` for the node's GPUs of this job, picked
by PCI bus id: where the job's GPUs cannot be identified, it samples none (status
``"unavailable"``, the reason says why) rather than every GPU NVML sees, which would include
other jobs' GPUs on a shared node. About once per ``interval_s`` it reads, per GPU, the
utilisation (% of time a kernel ran), the memory used, the power draw and the clock event
("throttle") reasons.

Only the steady state counts. The warm-up's samples (allocator growth, cuDNN autotuning,
the all-reduce baseline before training) would drag the figures away from what the headline
throughput measures, so they are counted as ``warmup_samples`` and left out of every figure
below: :meth:`GpuSampler.steady` marks where the steady state starts (the diagnosis calls it
once the training's warm-up has ended), and a sample counts when its reading began after the
mark. NVML's utilisation covers the GPU's last sample period (1/6 s to 1 s, by product), so
the first steady sample may reach back up to that far before the mark. Without a mark there
is no steady state and no figure: status ``"unavailable"``, reason ``NO_STEADY_STATE``.

:meth:`GpuSampler.stop` returns the record's ``diagnosis.nvml`` section, per GPU:

* ``samples`` / ``warmup_samples`` -- samples in the steady state (the figures' basis) and
  before it;
* ``util_mean_pct`` -- mean utilisation (a running sum: exact whatever the run length);
* ``util_p5_pct`` -- 5th percentile of the utilisation samples (the slow stretches), from a
  seeded reservoir sample of at most 4096 values (exact up to 4096 samples);
* ``mem_used_max_gib`` -- the most memory used in any steady sample (every process on the
  GPU);
* ``power_mean_w`` -- mean power draw, null where the GPU does not report it;
* ``throttle_reasons`` -- every clock event reason seen in any steady sample, by NVML's own
  names;
* ``throttle_share`` -- per reason seen, the share of the steady samples (of those that
  reported the reasons) in which it was set: ``{"HwSlowdown": 0.75}`` is a GPU slowed in 3
  samples of 4, where the list alone cannot tell a blip from a whole run. Null where the GPU
  reports no reasons; ``{}`` where it reported none set.

With no steady sample to take them from, the figures are null (never 0) and the list of
reasons is empty.

Sampling never fails a job: no ``pynvml``, no driver, a GPU that vanishes mid-run -- each ends
as status ``"unavailable"`` with a one-line reason, and :meth:`GpuSampler.stop` returns within
about 2 s whatever NVML does. The aggregation (:class:`GpuStats`) is pure and needs no GPU.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

RESERVOIR_SIZE = 4096
STOP_TIMEOUT_S = 2.0
NO_STEADY_STATE = "no steady state: training ended within the warm-up"
# NVML names clock event reasons nvmlClocksEventReason<Name> (drivers >= 535) and, before that,
# nvmlClocksThrottleReason<Name>; the bits are the same. Aggregates, not reasons:
_NOT_REASONS = {"All", "None", "Unknown"}
_REASON_PREFIXES = ("nvmlClocksEventReason", "nvmlClocksThrottleReason")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted values, interpolated linearly (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def reason_table(nvml: Any) -> dict[int, str]:
    """Bit -> name of each clock event reason the NVML bindings define (one name per bit)."""
    table: dict[int, str] = {}
    for prefix in _REASON_PREFIXES:
        for attr in sorted(dir(nvml)):
            name = attr[len(prefix) :]
            if not attr.startswith(prefix) or name in _NOT_REASONS:
                continue
            bit = getattr(nvml, attr)
            if isinstance(bit, int) and bit > 0 and bit & (bit - 1) == 0:
                table.setdefault(bit, name)
    return table


def throttle_names(mask: int, table: Mapping[int, str]) -> list[str]:
    """Names of the reasons set in ``mask``, in bit order; an unnamed bit as ``bit0x...``."""
    return [reason_name(bit, table) for bit in bits_of(mask)]


def reason_name(bit: int, table: Mapping[int, str]) -> str:
    return table.get(bit, f"bit{bit:#x}")


def bits_of(mask: int) -> list[int]:
    """The set bits of ``mask``, lowest first."""
    bits = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            bits.append(bit)
        bit <<= 1
    return bits


class GpuStats:
    """Running aggregates of one GPU's samples, in memory that does not grow with the run."""

    def __init__(
        self,
        *,
        node: str,
        index: int,
        name: str,
        reservoir_size: int = RESERVOIR_SIZE,
        seed: int = 0,
    ) -> None:
        self.node = node
        self.index = index
        self.name = name
        self.samples = 0
        self.warmup_samples = 0
        self.util_samples = 0
        self.util_sum = 0.0
        self.mem_used_max_bytes = 0.0
        self.power_samples = 0
        self.power_sum_w = 0.0
        self.throttle_mask = 0
        self.throttle_samples = 0  # samples that reported the reasons
        self.throttle_counts: dict[int, int] = {}  # bit -> samples in which it was set
        self.reservoir: list[float] = []
        self.reservoir_size = reservoir_size
        self._rng = random.Random(seed)

    def add(
        self,
        *,
        util_pct: float | None,
        mem_used_bytes: float,
        power_w: float | None,
        throttle_mask: int | None,
    ) -> None:
        """One steady-state sample; ``None`` for a reading the GPU does not support."""
        self.samples += 1
        self.mem_used_max_bytes = max(self.mem_used_max_bytes, mem_used_bytes)
        if throttle_mask is not None:
            self.throttle_samples += 1
            self.throttle_mask |= throttle_mask
            for bit in bits_of(throttle_mask):  # at most 64 keys, whatever the run length
                self.throttle_counts[bit] = self.throttle_counts.get(bit, 0) + 1
        if power_w is not None:
            self.power_samples += 1
            self.power_sum_w += power_w
        if util_pct is None:
            return
        self.util_samples += 1
        self.util_sum += util_pct
        # Reservoir sampling (Algorithm R): every sample so far is in the buffer with the same
        # probability, so its percentiles estimate the whole run's.
        if len(self.reservoir) < self.reservoir_size:
            self.reservoir.append(util_pct)
        else:
            slot = self._rng.randrange(self.util_samples)
            if slot < self.reservoir_size:
                self.reservoir[slot] = util_pct

    def count_warmup(self) -> None:
        """A sample taken before the steady state: counted, left out of every aggregate."""
        self.warmup_samples += 1

    def summary(self, reasons: Mapping[int, str]) -> dict[str, Any]:
        """This GPU's row of the ``nvml`` section."""
        has_util = self.util_samples > 0
        return {
            "node": self.node,
            "index": self.index,
            "name": self.name,
            "samples": self.samples,
            "warmup_samples": self.warmup_samples,
            "util_mean_pct": self.util_sum / self.util_samples if has_util else None,
            "util_p5_pct": percentile(sorted(self.reservoir), 0.05) if has_util else None,
            "mem_used_max_gib": self.mem_used_max_bytes / 2**30 if self.samples else None,
            "power_mean_w": (self.power_sum_w / self.power_samples if self.power_samples else None),
            "throttle_reasons": throttle_names(self.throttle_mask, reasons),
            "throttle_share": (
                {
                    reason_name(bit, reasons): self.throttle_counts[bit] / self.throttle_samples
                    for bit in sorted(self.throttle_counts)
                }
                if self.throttle_samples
                else None
            ),
        }


def nvml_section(
    status: str, reason: str | None, interval_s: float, gpus: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The record's ``diagnosis.nvml`` section."""
    return {"status": status, "reason": reason, "interval_s": interval_s, "gpus": gpus or []}


def off_section(reason: str, interval_s: float = 1.0) -> dict[str, Any]:
    """The section when sampling is switched off, e.g. ``"diagnosis.enabled=false"``."""
    return nvml_section("off", reason, interval_s)


def parse_bus_id(bus_id: str) -> tuple[int, int, int, int]:
    """``"00000000:3B:00.0"``, ``"0000:3b:00.0"`` or ``"3B:00.0"`` -> (domain, bus, device, fn)."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    try:
        domain, bus, rest = parts
        dev, fn = rest.split(".") if "." in rest else (rest, "0")
        return int(domain, 16), int(bus, 16), int(dev, 16), int(fn, 16)
    except ValueError:
        raise ValueError(
            f"PCI bus id {bus_id!r}: expected domain:bus:device.function in hex"
        ) from None


def cuda_pci_bus_ids() -> list[str] | None:
    """PCI bus ids of the CUDA devices this process sees, in CUDA order; None if unknown
    (:func:`cuda_pci_bus_ids_or_reason` says why).

    NVML numbers every GPU on the node and ignores CUDA_VISIBLE_DEVICES; the bus id is how a
    sampler picks this job's GPUs.
    """
    return cuda_pci_bus_ids_or_reason()[0]


def cuda_pci_bus_ids_or_reason() -> tuple[list[str] | None, str | None]:
    """(the bus ids, None), or (None, a one-line reason why this process cannot know them)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None, "torch.cuda.is_available() is False"
        ids = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            keys = ("domain", "bus", "device")
            missing = [f"pci_{k}_id" for k in keys if not hasattr(p, f"pci_{k}_id")]
            if missing:
                return None, f"torch {torch.__version__}'s device properties lack {missing[0]}"
            domain, bus, dev = (getattr(p, f"pci_{k}_id") for k in keys)
            ids.append(f"{domain:08X}:{bus:02X}:{dev:02X}.0")
        return ids, None
    except Exception as exc:
        return None, f"reading the CUDA devices' bus ids failed: {_describe(exc)}"


def _describe(exc: BaseException) -> str:
    """One line for an NVML (or any) error."""
    kind = type(exc).__name__
    if kind == "NVMLError_LibraryNotFound":
        return "NVML library not found (no NVIDIA driver)"
    if kind == "NVMLError_DriverNotLoaded":
        return "NVIDIA driver not loaded"
    text = " ".join(str(exc).split())
    return f"{kind}: {text}" if text else kind


class GpuSampler:
    """Samples this node's GPUs in a daemon thread; ``stop()`` returns the ``nvml`` section.

    Samples count towards the figures only from :meth:`steady` on; those before it are
    counted as ``warmup_samples`` and left out."""

    def __init__(
        self,
        interval_s: float = 1.0,
        pci_bus_ids: list[str] | None = None,
        node: str = "",
        *,
        unknown_reason: str | None = None,
    ) -> None:
        """``pci_bus_ids``: the job's GPUs (see :func:`cuda_pci_bus_ids`). None means they
        could not be identified, and ``unknown_reason`` may say why: the sampler then samples
        nothing (status ``unavailable``) rather than every GPU on the node, other jobs' too."""
        self.interval_s = interval_s
        self.pci_bus_ids = pci_bus_ids
        self.node = node
        self.unknown_reason = unknown_reason
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stats: list[GpuStats] = []
        self._reasons: dict[int, str] = {}
        self._failure: str | None = None
        self._steady_at: float | None = None  # time.monotonic() of the steady mark

    def start(self) -> GpuSampler:
        """Start sampling in the background; returns at once (NVML starts in the thread)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="scalescope-nvml", daemon=True)
            self._thread.start()
        return self

    def steady(self) -> None:
        """Mark the start of the steady state (e.g. the training's warm-up has ended).

        From any thread, at any time (before :meth:`start` too: then every sample counts);
        the first mark counts, later calls change nothing. A sample is steady when its reading
        began at or after the mark: one under way at the mark counts as warm-up, so no
        reading taken before the mark ever enters the figures."""
        now = time.monotonic()
        with self._lock:
            if self._steady_at is None:
                self._steady_at = now

    def stop(self) -> dict[str, Any]:
        """Stop sampling; the ``nvml`` section. Never raises; returns within about 2 s."""
        try:
            return self._stop_and_summarise()
        except Exception as exc:  # sampling never fails a job
            return nvml_section("unavailable", _describe(exc), self.interval_s)

    def _stop_and_summarise(self) -> dict[str, Any]:
        if self._thread is None:
            return nvml_section("unavailable", "sampler never started", self.interval_s)
        stopped = time.monotonic()
        self._stop.set()
        self._thread.join(STOP_TIMEOUT_S)
        with self._lock:
            failure = self._failure
            steady_at = self._steady_at
            gpus = [s.summary(self._reasons) for s in self._stats]
        if self._thread.is_alive() and failure is None:
            failure = f"NVML did not answer within {STOP_TIMEOUT_S:g} s"
        if failure is None and steady_at is None:
            failure = NO_STEADY_STATE
        if failure is None and not any(g["samples"] for g in gpus):
            failure = "no sample taken"
            if any(g["warmup_samples"] for g in gpus):
                steady_s = max(0.0, stopped - steady_at) if steady_at is not None else 0.0
                failure = (
                    f"no sample taken in the steady state ({steady_s:.3g} s long,"
                    f" one sample every {self.interval_s:g} s)"
                )
        if failure is not None:
            return nvml_section("unavailable", failure, self.interval_s, gpus)
        return nvml_section("sampled", None, self.interval_s, gpus)

    def _fail(self, reason: str) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = reason

    def _run(self) -> None:
        if self.pci_bus_ids is None:
            # NVML would show every GPU on the node, other jobs' too: none of them is ours to
            # report, and a neighbour's idle or busy GPU would pass for this job's.
            why = f": {self.unknown_reason}" if self.unknown_reason else ""
            self._fail(f"the job's GPUs could not be identified{why}; none sampled")
            return
        bus_ids = self.pci_bus_ids
        if not bus_ids:
            self._fail("the job has no GPU to sample (an empty list of PCI bus ids)")
            return
        try:
            import pynvml
        except ImportError:
            self._fail("nvidia-ml-py is not installed (import pynvml failed)")
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            self._fail(_describe(exc))
            return
        try:
            self._sample_until_stopped(pynvml, bus_ids)
        except Exception as exc:
            self._fail(_describe(exc))
        finally:
            with contextlib.suppress(Exception):
                pynvml.nvmlShutdown()

    def _open(self, nvml: Any, bus_ids: list[str]) -> list[tuple[Any, GpuStats]]:
        by_bus = {}
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            bus = nvml.nvmlDeviceGetPciInfo(h).busId
            bus = bus.decode() if isinstance(bus, bytes) else bus
            by_bus[parse_bus_id(bus)] = h
        handles = []
        for pos, bus_id in enumerate(bus_ids):
            h = by_bus.get(parse_bus_id(bus_id))
            if h is None:
                raise LookupError(f"no NVML device has PCI bus id {bus_id}")
            handles.append((pos, h))
        opened = []
        for index, h in handles:
            name = nvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            stats = GpuStats(node=self.node, index=index, name=name, seed=index)
            opened.append((h, stats))
        return opened

    def _sample_until_stopped(self, nvml: Any, bus_ids: list[str]) -> None:
        opened = self._open(nvml, bus_ids)
        with self._lock:
            self._reasons = reason_table(nvml)
            self._stats = [s for _h, s in opened]
        reasons_of = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        while True:
            began = time.monotonic()
            readings = []
            for h, stats in opened:
                try:
                    readings.append((stats, self._read(nvml, h, reasons_of)))
                except nvml.NVMLError as exc:
                    taken = stats.samples + stats.warmup_samples
                    self._fail(
                        f"GPU {stats.index} stopped answering after {taken} samples:"
                        f" {_describe(exc)}"
                    )
                    return
            with self._lock:
                # Compared with when the reading began, not when it ended: a mark that lands
                # mid-reading leaves that sample in the warm-up.
                steady = self._steady_at is not None and self._steady_at <= began
                for stats, reading in readings:
                    if steady:
                        stats.add(**reading)
                    else:
                        stats.count_warmup()
            if self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began))):
                return

    @staticmethod
    def _read(nvml: Any, handle: Any, reasons_of: Any) -> dict[str, Any]:
        def optional(fn: Any) -> Any:
            try:
                return fn(handle)
            except nvml.NVMLError_NotSupported:
                return None

        util = optional(nvml.nvmlDeviceGetUtilizationRates)
        power_mw = optional(nvml.nvmlDeviceGetPowerUsage)
        mask = optional(reasons_of)
        return {
            "util_pct": float(util.gpu) if util is not None else None,
            "mem_used_bytes": float(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            "power_w": power_mw / 1e3 if power_mw is not None else None,
            "throttle_mask": int(mask) if mask is not None else None,
        }
