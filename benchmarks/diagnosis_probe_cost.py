"""What the diagnosis' timed-loop marks cost per step, measured where noise cannot hide it.

Whole runs on a 2-core machine vary by +-20% from run to run (see
``benchmarks/diagnosis_overhead.py``), more than the marks could cost. This benchmark keeps
two gloo DDP ranks alive and alternates blocks of steps with and without what the diagnosis
adds to every step of a multi-device job, in the same processes:

* a post-accumulate-grad hook on one parameter (the last gradient's mark), and
* the clock marks and sums of the step breakdown (fetch, call start, after backward).

It prints the median time per step of each and their ratio (with / without). Run on a GPU
node with ``--device cuda`` (NCCL, CUDA events as the marks).

    python benchmarks/diagnosis_probe_cost.py [--blocks 12] [--steps 200] [--width 512]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from scalescope.job.diagnosis.step_clock import clock_for as _clock_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    cuda = args.device == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(2, args.width), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    layers.append(nn.Linear(args.width, 2))
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(*layers).to(device),
        device_ids=[rank] if cuda else None,
        gradient_as_bucket_view=True,
    )
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    x = torch.randn(args.batch, 2, device=device)
    y = torch.randint(0, 2, (args.batch,), device=device)
    clock = _clock_for(device, ())
    state: dict[str, Any] = {"ready": None}
    first = next(model.parameters())  # the first layer's weight: its gradient comes last

    def step(marks: bool) -> None:
        if marks:
            start = clock.mark()
            clock.add("input_wait_s", start, clock.mark())
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if marks and state["ready"] is not None:
            clock.add("comm_wait_s", state["ready"], clock.mark())
            state["ready"] = None
        opt.step()

    def on_grad(_p: Any) -> None:
        state["ready"] = clock.mark()

    for _ in range(50):
        step(False)
    times: dict[str, list[float]] = {"without": [], "with": []}
    for block in range(args.blocks):
        on = block % 2 == 1
        handle = first.register_post_accumulate_grad_hook(on_grad) if on else None
        dist.barrier()
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step(on)
        if cuda:
            torch.cuda.synchronize(device)
        times["with" if on else "without"].append((time.perf_counter() - t0) / args.steps)
        clock.settle()
        if handle is not None:
            handle.remove()
    if rank == 0:
        w, wo = statistics.median(times["with"]), statistics.median(times["without"])
        print(
            f"{args.device}, width {args.width}, batch {args.batch}: {wo * 1e3:.3f} ms a step "
            f"without the marks, {w * 1e3:.3f} ms with; throughput with / without "
            f"{wo / w:.3f} (median of {args.blocks // 2} blocks of {args.steps} steps each)"
        )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    mp.spawn(_worker, args=(args, _free_port()), nprocs=2)


if __name__ == "__main__":
    main()
