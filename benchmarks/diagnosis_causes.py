"""Injected causes of a known size, attributed by the efficiency waterfall: the table in
docs/diagnosis.md.

For each cause (slow input, one slow rank, rotating stragglers, an all-reduce held back, a
communication hook that slows backward, a communication-heavy model) it trains the baseline on
one device and ``--repeats`` runs on ``--devices`` devices with real ``scalescope train``
processes, summarises them with the analysis package and prints, per cause: the lost points
(mean and the scaling table's interval), the part the cause should land in, the next largest
part, the unexplained remainder with its interval, and where a size was injected what was
recovered (the exposed all-reduce per step for the delay, the overlap slowdown for the burn).

    python benchmarks/diagnosis_causes.py [--devices 2] [--repeats 3] [--only delay,rotating]
        [key=value ...]

On this machine (CPU, gloo) it takes about 10 minutes at the defaults. On a GPU node the same
script checks the NCCL path: ``srun --gpus=2 python benchmarks/diagnosis_causes.py
trainer.accelerator=gpu`` (any further key=value goes to every run). Numbers are reported,
never asserted: the tests assert the attributions on the mean of repeats.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the analysis package, as from the repository root

from train_runs import train_record  # noqa: E402

from analysis.compute.waterfall import LABELS, waterfall  # noqa: E402
from analysis.read.frame import load_all  # noqa: E402
from scalescope.record import ResultRecord, encode  # noqa: E402

TINY = ["trainer.max_epochs=2", "workload.num_samples=2000", "trainer.batch_size=64"]
COMM_HEAVY = ["--config", "configs/diagnosis/comm_heavy.yaml", "workload.num_samples=600"]

CAUSES: dict[str, tuple[str, list[str], list[str], str]] = {
    # name -> (part it must land in, the shared arguments, the fault's arguments, recovered)
    "input": ("input", TINY, ["faults.input_sleep_s=0.2", "workload.num_samples=1000"], ""),
    "slow-rank": ("skew", TINY, ["faults.slow_rank=1", "faults.slow_rank_sleep_s=0.04"], ""),
    "rotating": ("jitter", TINY, ["faults.rotating_sleep_s=0.04"], ""),
    "delay": ("comm", TINY, ["faults.allreduce_delay_s=0.02"], "comm"),
    "overlap": ("overlap", COMM_HEAVY, ["faults.overlap_burn_s=0.015"], "overlap"),
    "comm-heavy": ("comm", COMM_HEAVY, [], ""),
}
"""The faults act only on several devices, except slow input: its baseline sleeps too."""


def _pts(mean: float, low: float, high: float) -> str:
    if not math.isfinite(mean):
        return "n/a"
    interval = f" [{low:.0f}, {high:.0f}]" if math.isfinite(low) and math.isfinite(high) else ""
    return f"{mean:.0f}{interval}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated cause names")
    parser.add_argument("overrides", nargs="*", help="more train overrides (key=value)")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CAUSES)
    unknown = sorted(set(names) - set(CAUSES))
    if unknown:
        raise SystemExit(f"--only: unknown cause(s) {', '.join(unknown)}; one of {list(CAUSES)}")
    print(f"# {platform.node()}, {args.devices} devices, {args.repeats} repeats each")
    print(
        "| cause | lost [95% CI] | attributed | next largest | unexplained [95% CI] | "
        "recovered per step |"
    )
    print("|---|---:|---|---|---:|---|")
    baselines: dict[tuple[str, ...], ResultRecord] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            part, shared, fault, recovered = CAUSES[name]
            folder = Path(tmp) / name
            folder.mkdir()
            quiet = ["tracking.mode=off", *args.overrides]
            if name == "input":
                train_record([*shared, *fault, *quiet], folder)
            else:
                key = tuple(shared)
                if key not in baselines:
                    baselines[key] = train_record(
                        [*shared, *quiet], Path(tmp) / f"base-{len(baselines)}"
                    )
                (folder / "slurm-baseline.out").write_text(encode(baselines[key]) + "\n")  # type: ignore[arg-type]
            for _ in range(args.repeats):
                train_record([*shared, *fault, *quiet, f"trainer.devices={args.devices}"], folder)
            wf = waterfall(load_all(folder).runs)
            (row,) = [r for _, r in wf.table.iterrows() if not r["is_baseline"]]
            parts = {
                c: row[f"{c}_pts_mean"]
                for c in LABELS
                if c != "remainder" and math.isfinite(row[f"{c}_pts_mean"])
            }
            ranked = sorted(parts, key=lambda c: -parts[c])
            nxt = next((c for c in ranked if c != part), None)
            got = ""
            if recovered:
                values = [getattr(p, f"{recovered}_step_s") for _, w, _, p, _ in wf.runs if w > 1]
                got = ", ".join(f"{1e3 * v:.1f}" for v in values) + " ms"
                got += f" (mean {1e3 * statistics.mean(values):.1f})"
            lost = _pts(*(row[f"lost_pts_{k}"] for k in ("mean", "ci_low", "ci_high")))
            rest = _pts(*(row[f"remainder_pts_{k}"] for k in ("mean", "ci_low", "ci_high")))
            print(
                f"| {name} | {lost} | {LABELS[part]} {parts.get(part, math.nan):.0f}"
                f" | {LABELS[nxt] if nxt else '-'} {parts[nxt] if nxt else math.nan:.0f}"
                f" | {rest} | {got} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
