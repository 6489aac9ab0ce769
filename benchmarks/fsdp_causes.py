"""FSDP's injected causes, measured side by side: gpt tiny under ``trainer.strategy: fsdp`` on
``--devices`` CPU processes (gloo), ``--repeats`` runs each of

* no fault (FSDP's own all-gathers and reduce-scatters: on CPUs they run on the training
  thread, so all of them are exposed);
* ``faults.allgather_delay_s`` (each optimizer step's first all-gather held back);
* ``faults.reducescatter_delay_s`` (each step's first reduce-scatter held back, the same
  ``--delay-ms``);
* ``faults.slow_rank`` sleeping ``--sleep-ms`` each step on one rank;

and prints, from each run's record through the analysis' run parts, the exposed communication
and the skew per step (mean over the repeats), and what each fault added to each against the
runs without one: the delays should land in communication, the slow rank in skew.

    python benchmarks/fsdp_causes.py [--devices 2] [--repeats 3] [--delay-ms 20] [--sleep-ms 40]

Figures are printed, never asserted (the tests assert 100 ms effects over repeats).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the analysis package, as from the repository root

from train_runs import train_record  # noqa: E402

from analysis.compute.run_parts import run_parts  # noqa: E402

GPT_TINY = [
    "workload.name=gpt",
    "workload.preset=tiny",
    "workload.train_sequences=256",
    "workload.val_sequences=64",
    "trainer.batch_size=32",
    "trainer.max_epochs=2",
    "trainer.warmup_steps=2",
    "trainer.accelerator=cpu",
    "trainer.strategy=fsdp",
    "tracking.mode=off",
]


def _parts(argv: list[str], out: Path, devices: int) -> tuple[float, float]:
    """(exposed communication, skew) per optimizer step of one run, in seconds."""
    r = train_record([*GPT_TINY, f"trainer.devices={devices}", *argv], out)
    p = run_parts(r.diagnosis, r.steady_samples_per_s_per_device, devices)
    return p.comm_step_s, p.skew_step_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--sleep-ms", type=float, default=40.0)
    args = parser.parse_args()
    cases = {
        "none": [],
        f"all-gather delay {args.delay_ms:g} ms": [
            f"faults.allgather_delay_s={args.delay_ms / 1e3}"
        ],
        f"reduce-scatter delay {args.delay_ms:g} ms": [
            f"faults.reducescatter_delay_s={args.delay_ms / 1e3}"
        ],
        f"slow rank {args.sleep_ms:g} ms": [
            "faults.slow_rank=1",
            f"faults.slow_rank_sleep_s={args.sleep_ms / 1e3}",
        ],
    }
    print(f"# {platform.node()}, gpt tiny under FSDP, {args.devices} devices, {args.repeats} each")
    print("| runs | exposed comm (ms/step) | skew (ms/step) | comm added | skew added |")
    print("|---|---:|---:|---:|---:|")
    means: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, argv) in enumerate(cases.items()):
            got = [_parts(argv, Path(tmp) / f"{i}-{k}", args.devices) for k in range(args.repeats)]
            comm = statistics.mean(c for c, _ in got)
            skew = statistics.mean(s for _, s in got)
            means[name] = (comm, skew)
            base_comm, base_skew = means["none"]
            print(
                f"| {name} | {1e3 * comm:.1f} | {1e3 * skew:.1f} | "
                f"{1e3 * (comm - base_comm):+.1f} | {1e3 * (skew - base_skew):+.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
