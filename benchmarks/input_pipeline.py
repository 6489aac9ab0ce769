"""Input pipeline in numbers: the resnet workload trained with 0 and with N loader workers.

Runs ``scalescope train`` (real processes, the real record) for each worker count in turn,
``--rounds`` times, interleaved round by round so machine noise spreads over all settings,
and prints the median steady-state samples/s of each with its ratio to the first setting.
The image shards are built before the first round (one untimed run would otherwise pay for
it). Timings are reported, never asserted.

    python benchmarks/input_pipeline.py [--workers 0,8] [--preset small] [--epochs 3]
        [--batch-size 256] [--rounds 1] [--cache-dir DIR] [key=value ...]

On a GPU node the defaults show whether 8 workers keep the GPU fed where the training process
alone cannot; on a 2-core CPU machine use ``--workers 0,2 --preset tiny``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
from pathlib import Path

from train_runs import train_record

from scalescope.config import load_train_config
from scalescope.record import ResultRecord
from scalescope.workloads.resnet import image_spec
from scalescope.workloads.shards import open_shards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="0,8")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cache-dir", default=None, help="default: the workload's default")
    parser.add_argument("overrides", nargs="*", help="more train overrides (key=value)")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    common = [
        "workload.name=resnet",
        f"workload.preset={args.preset}",
        f"trainer.max_epochs={args.epochs}",
        f"trainer.batch_size={args.batch_size}",
        "tracking.mode='off'",
        *([f"workload.cache_dir={args.cache_dir}"] if args.cache_dir else []),
        *args.overrides,
    ]
    params = load_train_config(None, common).workload_params()
    open_shards(image_spec(params), params.resolved_cache_dir)  # built once, untimed

    rates: dict[int, list[float]] = {w: [] for w in workers}
    last: dict[int, ResultRecord] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for w in workers:
                rec = train_record([*common, f"workload.num_workers={w}"], Path(tmp) / f"{r}-{w}")
                rate = rec.steady_samples_per_s or rec.samples_per_s
                rates[w].append(rate)
                last[w] = rec
                print(f"round {r + 1}: {w} workers: {rate:,.0f} samples/s", flush=True)

    any_rec = next(iter(last.values()))
    print()
    print(
        f"resnet {args.preset}, batch {args.batch_size}, {args.epochs} epochs, "
        f"{args.rounds} round(s); device {any_rec.device_name} ({any_rec.identity.accelerator}), "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"torch {any_rec.versions.get('torch')}"
    )
    base = statistics.median(rates[workers[0]])
    print(f"{'workers':>8} {'samples/s':>12} {'ratio':>7} {'val loss':>9} {'MFU':>6}")
    for w in workers:
        med = statistics.median(rates[w])
        rec = last[w]
        mfu = f"{rec.steady_mfu:.1%}" if rec.steady_mfu is not None else "-"
        loss = f"{rec.val_loss_final:.4f}" if rec.val_loss_final is not None else "-"
        print(f"{w:>8} {med:>12,.0f} {med / base:>6.2f}x {loss:>9} {mfu:>6}")


if __name__ == "__main__":
    main()
