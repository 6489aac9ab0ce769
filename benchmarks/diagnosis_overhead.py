"""What the diagnosis costs: steady-state throughput with it on against off.

Runs ``scalescope train`` (real processes, the real record) with ``diagnosis.enabled=true``
and ``false`` in turn, ``--pairs`` times, the order of each pair alternating so machine noise
and drift spread over both, and prints per workload the median steady-state samples/s of
each setting, the median of the per-pair ratios (on / off: 1.00 = free; the aim is >= 0.98),
and the seconds the diagnosis spent outside the timed region (calibration windows and the
all-reduce baseline, from the records). Timings are reported, never asserted.

    python benchmarks/diagnosis_overhead.py [--pairs 9] [--devices 2] [--epochs N]
        [--workloads gpt,comm-heavy,spiral] [key=value ...]

On a GPU node: ``--devices 8 --workloads gpt trainer.accelerator=gpu`` (add
``trainer.precision=bf16-mixed``). On a 2-core machine the spiral MLP's 4 ms steps are
dominated by scheduling noise between the two processes (single runs of one setting range
over +-20%); the compute-bound ``gpt`` steps resolve a few percent.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from pathlib import Path

from train_runs import train_record

WORKLOADS = {
    # name -> (train arguments, default epochs: enough steady-state steps that one run's
    # throughput is more than start-up noise on a 2-core machine)
    "spiral": (["--config", "configs/spiral.yaml"], 12),
    "comm-heavy": (["--config", "configs/diagnosis/comm_heavy.yaml"], 3),
    "gpt": (  # the quick start's compute-bound model, every step after the first 2 timed
        ["--config", "configs/gpt.yaml", "trainer.accelerator=cpu", "trainer.warmup_steps=2"],
        1,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=None, help="default: per workload")
    parser.add_argument("--workloads", default="gpt,comm-heavy,spiral")
    parser.add_argument("overrides", nargs="*", help="more train overrides (key=value)")
    args = parser.parse_args()
    names = args.workloads.split(",")
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"--workloads: unknown {unknown}; known: {', '.join(WORKLOADS)}")
    common = [f"trainer.devices={args.devices}", "tracking.mode=off", *args.overrides]
    print(
        f"diagnosis on/off, {args.devices} process(es), {args.pairs} pairs, "
        f"{platform.node()} ({platform.processor() or platform.machine()})"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rates: dict[bool, list[float]] = {True: [], False: []}
            ratios: list[float] = []
            outside: list[float] = []
            for i in range(args.pairs):
                order = (True, False) if i % 2 == 0 else (False, True)
                pair: dict[bool, float] = {}
                for on in order:
                    out = Path(tmp) / f"{name}-{i}-{on}"
                    config, epochs = WORKLOADS[name]
                    argv = [
                        *config,
                        f"trainer.max_epochs={args.epochs or epochs}",
                        *common,
                        f"diagnosis.enabled={str(on).lower()}",
                    ]
                    r = train_record(argv, out)
                    rate = r.steady_samples_per_s
                    if rate is None:
                        raise SystemExit(f"{name}: no steady state; raise --epochs")
                    pair[on] = rate
                    rates[on].append(rate)
                    if on and r.diagnosis:
                        cost = r.diagnosis.get("overhead_s") or {}
                        outside.append(sum(v for v in cost.values() if v))
                ratios.append(pair[True] / pair[False])
            on_med, off_med = statistics.median(rates[True]), statistics.median(rates[False])
            print(
                f"{name:12s} on {on_med:12,.0f} samples/s   off {off_med:12,.0f} samples/s   "
                f"on/off {statistics.median(ratios):.3f} (median of {len(ratios)} pairs; "
                f"range {min(ratios):.3f}-{max(ratios):.3f})   outside the timed region "
                f"{statistics.median(outside):.2f} s per run"
            )


if __name__ == "__main__":
    main()
