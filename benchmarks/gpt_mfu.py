"""The ``gpt`` workload's MFU on one GPU: scalescope beside a plain PyTorch loop of the same module.

On one GPU (``srun --gpus=1 python benchmarks/gpt_mfu.py``)::

    python benchmarks/gpt_mfu.py [--preset base] [--batch 16] [--steps 30] [--modes eager,compiled]

For each mode (eager, and ``torch.compile``):

* ``plain``: the same ``GptModel`` in a bare loop: its fused AdamW, bf16 autocast, the tokens
  already on the GPU, ``--warmup`` steps (compiling happens there) then ``--steps`` timed
  steps between two CUDA events. MFU = FLOPs per sequence (the workload's formula, checked
  against FlopCounterMode by benchmarks/gpt_flops.py) x sequences per second / the device's
  datasheet peak (scalescope.job.diagnosis.hardware).
* ``scalescope``: ``python -m scalescope.train`` on the same preset, batch and precision
  (``trainer.compile`` for the compiled mode), two epochs of ``--steps`` steps each, the first
  the warm-up; its record's ``steady_mfu``.

Prints one table and the harness / plain ratio per mode, measured side by side in one run.
Numbers are printed, never asserted. Exit status 2, with one line and nothing measured, where
there is no CUDA GPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from train_runs import train_record

from scalescope.job.diagnosis.hardware import peak_flops
from scalescope.workloads import build_workload, validate_params


def plain_loop(preset: str, batch: int, steps: int, warmup: int, compiled: bool) -> float:
    """Sequences per second of a bare training loop over the workload's own module."""
    params = validate_params(
        "gpt", {"preset": preset, "train_sequences": batch, "val_sequences": 1}
    )
    model, dm = build_workload("gpt", params, batch_size=batch, seed=0)
    dm.setup("fit")
    model = model.cuda()
    x = dm.train_tokens[:batch, :-1].cuda()
    y = dm.train_tokens[:batch, 1:].cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.lr, fused=True)
    step_fn = torch.compile(model.forward) if compiled else model.forward

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        step()
    end.record()
    torch.cuda.synchronize()
    return batch * steps / (start.elapsed_time(end) / 1e3)


def harness(preset: str, batch: int, steps: int, compiled: bool, out: Path) -> float | None:
    """The same shapes under ``scalescope train``: its record's steady MFU."""
    record = train_record(
        [
            "workload.name=gpt",
            f"workload.preset={preset}",
            f"workload.train_sequences={batch * steps}",
            "workload.val_sequences=64",
            "trainer.accelerator=gpu",
            "trainer.devices=1",
            "trainer.precision=bf16-mixed",
            f"trainer.batch_size={batch}",
            "trainer.max_epochs=2",
            f"trainer.compile={str(compiled).lower()}",
            "tracking.mode=off",
        ],
        out,
    )
    return record.steady_mfu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="base")
    p.add_argument("--batch", type=int, default=16, help="sequences per step")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=8, help="untimed steps first (compiling)")
    p.add_argument("--modes", default="eager,compiled")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("gpt_mfu: no CUDA GPU visible: nothing measured", file=sys.stderr)
        return 2
    device = torch.cuda.get_device_name()
    peak = peak_flops(device, "bf16-mixed")
    params = validate_params("gpt", {"preset": args.preset})
    model, _ = build_workload("gpt", params, batch_size=args.batch, seed=0)
    flops = model.flops_per_sample()
    print(
        f"{device}, torch {torch.__version__}, gpt preset={args.preset} batch {args.batch} "
        f"bf16-mixed, {flops:.3e} FLOPs/sequence, peak {peak or float('nan'):.3e} FLOP/s"
    )
    print(f"{'mode':<9} {'plain MFU':>10} {'scalescope MFU':>15} {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            compiled = mode == "compiled"
            rate = plain_loop(args.preset, args.batch, args.steps, args.warmup, compiled)
            plain = rate * flops / peak if peak else float("nan")
            ours = harness(args.preset, args.batch, args.steps, compiled, Path(tmp) / mode)
            ratio = ours / plain if ours else float("nan")
            shown = f"{100 * ours:.1f}%" if ours else "-"
            print(f"{mode:<9} {100 * plain:>9.1f}% {shown:>15} {ratio:>5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
