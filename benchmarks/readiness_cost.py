"""What timing every gradient costs a backward (``scalescope.job.diagnosis.bucket_ready``): the
job does it in its first 4 steady steps, inside the steady state, so the cost must be negligible.

In one process, blocks of backwards of a model with many small parameters (where the hooks
weigh most) alternate with and without the readiness timer (its hooks, its clock marks and
its own accounting, as the job runs them); it prints the fastest backward of each and the
cost per parameter per step. ``--device cuda``: the marks are CUDA events, as on a GPU.

    python benchmarks/readiness_cost.py [--params 400] [--blocks 30] [--steps 20]
"""

from __future__ import annotations

import argparse
import platform
import time

import torch
from torch import nn

from scalescope.job.diagnosis.bucket_ready import ReadinessTimer
from scalescope.job.diagnosis.step_clock import clock_for


def _fastest(model: nn.Module, x: torch.Tensor, steps: int, timer: ReadinessTimer | None) -> float:
    best = float("inf")
    for _ in range(steps):
        loss = model(x).sum()
        if x.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        if timer is not None:
            timer.raw.clear()  # never done: time every backward of the block
            timer.backward_starts()
        loss.backward()
        if timer is not None:
            timer.backward_ends()
        if x.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=400, help="trainable parameters")
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20, help="backwards per block")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(args.params // 2)]).to(device)
    x = torch.randn(4, 8, device=device)
    clock = clock_for(device, ())
    off, on = [], []
    for _ in range(args.blocks):
        off.append(_fastest(model, x, args.steps, None))
        timer = ReadinessTimer(clock, list(model.parameters()), steps=args.steps + 1)
        on.append(_fastest(model, x, args.steps, timer))
        timer.close()
    without, with_ = min(off), min(on)
    n = len(list(model.parameters()))
    print(f"{platform.node()} {device} torch {torch.__version__}: {n} parameters")
    print(
        f"backward {1e3 * without:.3f} ms, timed {1e3 * with_:.3f} ms (x{with_ / without:.3f}): "
        f"{1e6 * (with_ - without) / n:.2f} us a parameter and step"
    )


if __name__ == "__main__":
    main()
