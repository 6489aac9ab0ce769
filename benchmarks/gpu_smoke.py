"""GPU smoke check: the NVML sampler on this process's GPU, and CUDA events against the wall clock.

On one GPU. Run it on a GPU node before a sweep (``srun --gpus=1 python benchmarks/gpu_smoke.py``):

    python benchmarks/gpu_smoke.py [--seconds 3] [--warmup-seconds 1] [--interval-s 0.2]
        [--size 4096]

1. **Sampler.** Starts a :class:`scalescope.job.diagnosis.sampling.GpuSampler` on the PCI bus
   id of the current CUDA device (the way a job picks its own GPUs), runs the warm-up (the first
   matmuls bring cuBLAS's handle and workspace and the allocator's pool), marks the steady state,
   runs ``--seconds`` of matmuls, stops and prints the section the record would carry as JSON:
   ``warmup_samples`` > 0 and ``samples`` about ``seconds / interval_s``, utilisation near 100 %.
2. **Clocks.** The same matmuls timed two ways in one run, five rounds: a pair of
   ``torch.cuda.Event`` around them and ``time.perf_counter`` around them after a
   ``synchronize`` before and after. Events / wall should be just under 1 (the wall clock also
   holds the launch of the first kernel and the synchronize's return); far from it, the events
   or the host clock cannot be trusted on this node. Then ``torch.cuda._sleep`` spins a known
   number of SM cycles: its expected time at the SM clock NVML reads while it spins, against
   the events and the wall clock (clocks that move during the spin show as a ratio off 1).

Timings are printed, never asserted. Exit status: 0 when the section is ``sampled``; 1 when it
is not (its reason on the last line); 2, with one line on stderr and nothing measured, when
there is no CUDA GPU -- distinct from 0 so a batch script cannot take "nothing checked" for
"checked", and from 1, which is a problem found.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import threading
import time
from typing import Any

import torch

from scalescope.job.diagnosis.sampling import GpuSampler, cuda_pci_bus_ids_or_reason

NO_GPU_STATUS = 2


def no_gpu_reason() -> str | None:
    """Why this process has no CUDA GPU, in one line; None when it has one."""
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is built without CUDA"
    if not torch.cuda.is_available():
        return "no CUDA GPU visible (torch.cuda.is_available() is False)"
    return None


def matmuls(a: torch.Tensor, b: torch.Tensor, n: int) -> None:
    for _ in range(n):
        torch.mm(a, b)


def run_for(seconds: float, a: torch.Tensor, b: torch.Tensor, batch: int) -> int:
    """Matmuls for about ``seconds`` (a sync every ``batch``: the queue stays short, so the
    GPU's work ends with the loop); the number run."""
    done = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        matmuls(a, b, batch)
        torch.cuda.synchronize()
        done += batch
    return done


def sample(args: argparse.Namespace, a: torch.Tensor, b: torch.Tensor) -> dict[str, Any]:
    """The sampler over a warm-up and a steady stretch; the section, printed as JSON."""
    device = torch.cuda.current_device()
    bus_ids, unknown = cuda_pci_bus_ids_or_reason()
    bus = [bus_ids[device]] if bus_ids is not None else None
    print(f"PCI bus id of cuda:{device}: {bus[0] if bus else f'unknown ({unknown})'}")
    sampler = GpuSampler(
        interval_s=args.interval_s, pci_bus_ids=bus, node=platform.node(), unknown_reason=unknown
    ).start()
    run_for(args.warmup_seconds, a, b, batch=4)
    sampler.steady()
    began = time.perf_counter()
    done = run_for(args.seconds, a, b, batch=20)
    steady_s = time.perf_counter() - began
    section = sampler.stop()
    flops = 2 * args.size**3 * done
    print(f"steady: {done} matmuls in {steady_s:.2f} s, {flops / steady_s / 1e12:.1f} TFLOP/s")
    print(json.dumps(section, indent=2))
    return section


def clock_check(a: torch.Tensor, b: torch.Tensor, per_round_s: float = 0.5) -> None:
    """CUDA events against the wall clock, the same work, five rounds."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    matmuls(a, b, 10)
    torch.cuda.synchronize()
    n = max(10, int(10 * per_round_s / (time.perf_counter() - t0)))
    print(f"\nclock check: {n} matmuls a round, CUDA events against the wall clock")
    print("round  events (ms)  wall (ms)  events / wall")
    ratios = []
    for r in range(5):
        torch.cuda.synchronize()  # the clock starts on an idle device
        w0 = time.perf_counter()
        start.record()
        matmuls(a, b, n)
        end.record()
        torch.cuda.synchronize()  # and stops when the device is done
        wall_ms = (time.perf_counter() - w0) * 1e3
        event_ms = start.elapsed_time(end)
        ratios.append(event_ms / wall_ms)
        print(f"{r:5d}  {event_ms:11.2f}  {wall_ms:9.2f}  {ratios[-1]:13.4f}")
    print(f"median events / wall: {statistics.median(ratios):.4f}")
    sleep_check(start, end)


def sm_clock_mhz() -> float | None:
    """The current SM clock of the current device through NVML, or None."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            bus_ids, _ = cuda_pci_bus_ids_or_reason()
            if bus_ids is None:
                return None
            h = pynvml.nvmlDeviceGetHandleByPciBusId(bus_ids[torch.cuda.current_device()])
            return float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def sleep_check(start: torch.cuda.Event, end: torch.cuda.Event, target_s: float = 0.5) -> None:
    """``torch.cuda._sleep``: a known number of SM cycles, against the events and the wall."""
    if not hasattr(torch.cuda, "_sleep"):
        print("torch.cuda._sleep: not in this torch; spin check skipped")
        return
    idle_mhz = sm_clock_mhz()
    if idle_mhz is None:
        print("SM clock: NVML cannot read it; spin check skipped")
        return
    torch.cuda._sleep(1_000_000)  # the clock ramps up under load: let it before reading it
    cycles = int(target_s * idle_mhz * 1e6)
    torch.cuda.synchronize()
    w0 = time.perf_counter()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    read: list[float | None] = []
    # read while the spin runs (the launch returned at once): the clock the cycles count at
    reader = threading.Thread(target=lambda: read.append(sm_clock_mhz()))
    reader.start()
    torch.cuda.synchronize()
    wall_s = time.perf_counter() - w0
    reader.join()
    event_s = start.elapsed_time(end) / 1e3
    busy_mhz = read[0] if read and read[0] else idle_mhz
    expected_s = cycles / (busy_mhz * 1e6)
    print(
        f"\nspin of {cycles:,} SM cycles at {busy_mhz:.0f} MHz (read during the spin; "
        f"{idle_mhz:.0f} MHz before): expected {expected_s * 1e3:.1f} ms, "
        f"events {event_s * 1e3:.1f} ms, wall {wall_s * 1e3:.1f} ms"
    )
    print(f"events / expected: {event_s / expected_s:.4f}  events / wall: {event_s / wall_s:.4f}")


def header(args: argparse.Namespace) -> None:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = "unknown"
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        pynvml.nvmlShutdown()
    except Exception as exc:
        driver = f"unknown ({type(exc).__name__})"
    print(
        f"{platform.node()}, {props.name} ({props.total_memory / 2**30:.0f} GiB), driver {driver},"
        f" torch {torch.__version__}, CUDA {torch.version.cuda},"
        f" {datetime.datetime.now().isoformat(timespec='seconds')}"
    )
    flops = 2 * args.size**3
    print(
        f"matmul: {args.size} x {args.size} float32"
        f" (float32 matmul precision {torch.get_float32_matmul_precision()!r}),"
        f" {flops / 1e9:.1f} GFLOP each; warm-up {args.warmup_seconds:g} s, steady"
        f" {args.seconds:g} s, NVML every {args.interval_s:g} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="steady-state matmuls")
    parser.add_argument("--warmup-seconds", type=float, default=1.0)
    parser.add_argument("--interval-s", type=float, default=0.2, help="NVML sampling interval")
    parser.add_argument("--size", type=int, default=4096, help="square matrices' side")
    args = parser.parse_args()
    why = no_gpu_reason()
    if why is not None:
        print(f"gpu_smoke: {why}; nothing measured", file=sys.stderr)
        return NO_GPU_STATUS
    header(args)
    a = torch.randn(args.size, args.size, device="cuda")
    b = torch.randn(args.size, args.size, device="cuda")
    section = sample(args, a, b)
    clock_check(a, b)
    if section["status"] != "sampled":
        print(f"gpu_smoke: NVML section {section['status']}: {section['reason']}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
