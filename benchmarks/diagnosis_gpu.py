"""The diagnosis on one GPU: NVML sampling and the step-time breakdown, resnet fed by 0 and
by N loader workers.

Runs ``scalescope train`` on one GPU (real processes, the real record) for each worker count,
and prints from each record the input wait, compute and step time per step (the typical
rank), the steady-state samples/s, and what the NVML sampler saw: mean and 5th-percentile GPU
utilisation, peak memory used, mean power and the throttle reasons. With too few workers the
GPU idles while the loader decodes: input wait up, utilisation down.

    python benchmarks/diagnosis_gpu.py [--workers 0,8] [--preset small] [--epochs 3]
        [key=value ...]

Run it on a GPU node (``srun --gpus=1 --cpus-per-task=16 python benchmarks/diagnosis_gpu.py``).
Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
from pathlib import Path
from typing import Any

from train_runs import train_record


def _ms(value: Any) -> str:
    return f"{value * 1e3:8.2f}" if isinstance(value, (int, float)) else "     n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,8")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="more train overrides (key=value)")
    args = parser.parse_args()
    common = [
        "--config",
        "configs/resnet.yaml",
        f"workload.preset={args.preset}",
        f"trainer.max_epochs={args.epochs}",
        "trainer.devices=1",
        "trainer.accelerator=gpu",
        "tracking.mode=off",
        *args.overrides,
    ]
    print(f"resnet ({args.preset}) on 1 GPU, {platform.node()}")
    print(
        "workers  input wait (ms/step)  compute (ms/step)  step (ms)  samples/s  "
        "GPU util mean/p5 (%)  mem max (GiB)  power (W)  throttle"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for w in (int(x) for x in args.workers.split(",")):
            r = train_record([*common, f"workload.num_workers={w}"], Path(tmp) / f"w{w}")
            d = r.diagnosis or {}
            ranks = d.get("ranks") or [{}]
            rank = ranks[d.get("typical_rank") or 0]
            nvml = d.get("nvml") or {}
            gpus = nvml.get("gpus") or []
            if gpus:
                g = gpus[0]
                device = (
                    f"{g.get('util_mean_pct')}/{g.get('util_p5_pct')}  "
                    f"{g.get('mem_used_max_gib')}  {g.get('power_mean_w')}  "
                    f"{','.join(g.get('throttle_reasons') or []) or '-'}"
                )
            else:
                device = f"NVML {nvml.get('status')}: {nvml.get('reason')}"
            rate = r.steady_samples_per_s or r.samples_per_s
            print(
                f"{w:7d}  {_ms(rank.get('input_wait_s'))}  {_ms(rank.get('compute_s'))}  "
                f"{_ms(rank.get('step_time_s'))}  {rate:10,.0f}  {device}"
            )


if __name__ == "__main__":
    main()
