"""What ``trainer.compile`` costs and gains: eager against compiled, run by run.

Runs ``scalescope train`` (real processes, the real record) eager and with each listed
``torch.compile`` backend in turn, ``--repeats`` rounds (the order rotating each round), and
prints per setting the median steady-state samples/s, its ratio to eager, and the compile
seconds the record split into warm-up and steady state. Timings are reported, never asserted.

    python benchmarks/compile_cost.py [--repeats 3] [--devices 1] [--backends inductor,aot_eager]
        [--config configs/gpt.yaml] [key=value ...]

On a GPU node: ``--devices 8 trainer.accelerator=gpu trainer.precision=bf16-mixed``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from pathlib import Path

from train_runs import train_record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--backends", default="inductor,aot_eager")
    parser.add_argument("--config", default="configs/gpt.yaml")
    parser.add_argument("overrides", nargs="*", help="more train overrides (key=value)")
    args = parser.parse_args()
    settings = ["eager", *args.backends.split(",")]
    common = [
        "--config",
        args.config,
        f"trainer.devices={args.devices}",
        "tracking.mode=off",
        "diagnosis.enabled=false",
        *args.overrides,
    ]
    print(
        f"compile cost, {args.config}, {args.devices} process(es), {args.repeats} rounds, "
        f"{platform.node()} ({platform.processor() or platform.machine()})"
    )
    rates: dict[str, list[float]] = {s: [] for s in settings}
    warm: dict[str, list[float]] = {s: [] for s in settings}
    steady: dict[str, list[float]] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            order = settings[i % len(settings) :] + settings[: i % len(settings)]
            for setting in order:
                extra = (
                    []
                    if setting == "eager"
                    else ["trainer.compile=true", f"trainer.compile_backend={setting}"]
                )
                r = train_record([*common, *extra], Path(tmp) / f"{setting}-{i}")
                if r.steady_samples_per_s is None:
                    raise SystemExit(f"{setting}: no steady state; train longer")
                rates[setting].append(r.steady_samples_per_s)
                c = r.compile or {}
                warm[setting].append(c.get("warmup_s") or 0.0)
                steady[setting].append(c.get("steady_s") or 0.0)
    eager = statistics.median(rates["eager"])
    for setting in settings:
        rate = statistics.median(rates[setting])
        print(
            f"{setting:10s} {rate:12,.1f} samples/s   x{rate / eager:.3f} of eager   compile "
            f"{statistics.median(warm[setting]):6.2f} s in the warm-up, "
            f"{statistics.median(steady[setting]):.2f} s in the steady state (medians)"
        )


if __name__ == "__main__":
    main()
