"""The ``gpt`` workload's FLOPs formula against ``torch.utils.flop_counter.FlopCounterMode``.

    python benchmarks/gpt_flops.py            # a few sizes, CPU, one training batch each

For each size: one forward + backward of a batch of sequences under FlopCounterMode, per
sequence, beside :meth:`GptModel.flops_per_sample`, and their ratio. Attention runs on the
math SDPA backend here: the CPU's fused attention kernel has no FlopCounterMode formula in
torch 2.x and would count as 0 (printed as the ``fused`` column, to show the size of that
gap); the math backend asks for the same full S x S products, as two counted batched matmuls.
"""

from __future__ import annotations

import argparse
import platform

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from scalescope.workloads import build_workload, validate_params

SIZES: dict[str, dict[str, object]] = {
    "tiny": {"preset": "tiny"},
    "quickstart": {"n_layers": 2, "d_model": 256, "n_heads": 4, "seq_len": 128, "vocab_size": 256},
    "mid": {"n_layers": 4, "d_model": 256, "n_heads": 4, "seq_len": 512, "vocab_size": 4096},
    "small, seq 128": {"preset": "small", "seq_len": 128},
    "base, 2 layers": {"preset": "base", "n_layers": 2},
}


def counted(params: object, batch: int, backend: SDPBackend | None) -> float:
    model, dm = build_workload("gpt", params, batch_size=batch, seed=0)
    dm.setup("fit")
    x, y = next(iter(dm._batches(dm.train_tokens, batch, shuffle=True)))
    with FlopCounterMode(display=False) as counter:
        if backend is None:
            loss = model.micro_batch_loss(x, y)
            loss.backward()
        else:
            with sdpa_kernel(backend):
                loss = model.micro_batch_loss(x, y)
                loss.backward()
    return counter.get_total_flops() / batch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1, help="sequences per measured batch")
    args = p.parse_args()
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, {platform.python_implementation()} "
        f"{platform.python_version()}, batch {args.batch}; FLOPs per sequence"
    )
    header = f"{'size':<16} {'params':>8} {'formula':>12} {'counted':>12} {'ratio':>7} {'fused':>7}"
    print(header)
    print("-" * len(header))
    for name, values in SIZES.items():
        params = validate_params("gpt", {**values, "train_sequences": 2, "val_sequences": 1})
        model, _ = build_workload("gpt", params, batch_size=args.batch, seed=0)
        formula = model.flops_per_sample()
        n_params = sum(t.numel() for t in model.parameters())
        math_count = counted(params, args.batch, SDPBackend.MATH)
        fused = counted(params, args.batch, None)
        print(
            f"{name:<16} {n_params / 1e6:>7.1f}M {formula:>12.4g} {math_count:>12.4g} "
            f"{math_count / formula:>7.4f} {fused / formula:>7.4f}"
        )


if __name__ == "__main__":
    main()
