"""All-reduce baseline on this allocation: an nccl-tests-like table from scalescope's own sweep.

The same measurement ``scalescope train`` records at the start of a multi-device job
(``scalescope.job.diagnosis.allreduce.allreduce_baseline``): float32 all-reduces from 4 KiB
doubling up to
the gradient size or 8 MiB, whichever is larger (the gradient size among them), each size timed
after a barrier and averaged over ranks as nccl-tests does; algbw = bytes / time and
busbw = algbw * 2(n-1)/n in GB/s (1e9 B/s). Then the latency + bandwidth model fitted to the
sweep, t(n) = alpha + n * 2(n-1)/n / busbw, with its error, and the predicted all-reduce time
of one step's gradients: the fitted model summed over the buckets (``--bucket-bytes``, e.g. the
``bucket_bytes`` a job recorded; by default the gradient split at DDP's 1 MiB / 25 MiB caps).
Only rank 0 prints.

Three ways to run it:

    # N local processes, spawned by the script (GPUs: one per process, NCCL; else CPU, gloo)
    python benchmarks/allreduce.py --nproc 8 --gradient-bytes 1G

    # torchrun, one node or several
    torchrun --nproc-per-node 8 benchmarks/allreduce.py --gradient-bytes 1G

    # srun inside an allocation: ranks from SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID
    export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
    srun --ntasks-per-node 8 --gpus-per-node 8 python benchmarks/allreduce.py --gradient-bytes 1G

Sizes take K/M/G suffixes (KiB, MiB, GiB), bucket lists too: ``--bucket-bytes 4198400,29388800``
or ``1M,25M,7M``. ``--device``/``--backend`` override the automatic
choice, e.g. ``--device cuda --backend gloo`` runs gloo over CUDA tensors (several processes may
then share one GPU, which NCCL refuses).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from scalescope.allreduce_model import fit_time_s
from scalescope.job.diagnosis.allreduce import allreduce_baseline
from scalescope.job.run.topology import master_port_for

SUFFIXES = {"K": 2**10, "M": 2**20, "G": 2**30}


def parse_bytes(text: str) -> int:
    """``"4096"``, ``"64K"``, ``"25M"``, ``"1.5G"`` -> bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = SUFFIXES.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in SUFFIXES else t
    try:
        value = int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected bytes like 4096, 64K, 25M, 1G"
        ) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be positive")
    return value


def parse_bucket_bytes(text: str) -> list[int]:
    """``"4198400,29388800"`` or ``"1M,25M"`` -> bytes per bucket."""
    return [parse_bytes(part) for part in text.split(",") if part.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gradient-bytes", type=parse_bytes, default=parse_bytes("256M"))
    ap.add_argument("--budget-s", type=float, default=10.0)
    ap.add_argument(
        "--bucket-bytes",
        type=parse_bucket_bytes,
        default=None,
        help="comma-separated bucket sizes to predict (default: the gradient at DDP's caps)",
    )
    ap.add_argument("--nproc", type=int, default=None, help="spawn N local processes")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="process group timeout")
    args = ap.parse_args()
    if args.nproc is not None:
        if args.nproc < 1:
            sys.exit(f"--nproc {args.nproc}: must be at least 1")
        port = _free_port()
        mp.spawn(_spawned, args=(args, port), nprocs=args.nproc, join=True)
        return
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
        _from_slurm(os.environ)
    if "RANK" not in os.environ:
        sys.exit(
            "no ranks: run with --nproc N, under torchrun, or under srun"
            " (RANK / SLURM_PROCID not set)"
        )
    run(args)


def _spawned(local_rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(
        RANK=str(local_rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(args.nproc),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    run(args)


def _from_slurm(env: Any) -> None:
    if "MASTER_ADDR" not in env:
        sys.exit(
            "MASTER_ADDR not set: export MASTER_ADDR="
            '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1) before srun'
        )
    env["RANK"] = env["SLURM_PROCID"]
    env["WORLD_SIZE"] = env["SLURM_NTASKS"]
    env["LOCAL_RANK"] = env.get("SLURM_LOCALID", "0")
    env.setdefault("MASTER_PORT", str(master_port_for(env.get("SLURM_JOB_ID", "0"))))


def run(args: argparse.Namespace) -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        section = allreduce_baseline(
            gradient_bytes=args.gradient_bytes,
            device=device,
            budget_s=args.budget_s,
            bucket_bytes=args.bucket_bytes,
            bucket_reason="given with --bucket-bytes" if args.bucket_bytes else None,
        )
        # where the ranks ran: --network refuses a table from one host (the link within a node)
        hosts: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(hosts, socket.gethostname())
        if dist.get_rank() == 0:
            print(format_table(section, device, args, list(dict.fromkeys(hosts))))
    finally:
        dist.destroy_process_group()


def format_table(
    s: dict[str, Any], device: torch.device, args: argparse.Namespace, hosts: list[str]
) -> str:
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    lines = [
        f"# all-reduce baseline  {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"# host {socket.gethostname()}, {where or platform.machine()}, torch {torch.__version__}",
        f"# backend {s['backend']}, {s['world_size']} ranks, float32,"
        f" gradient {s['gradient_bytes']} B, budget {args.budget_s:g} s",
        f"# hosts {', '.join(hosts)}",
    ]
    if s["status"] != "measured":
        lines.append(f"# {s['status']}: {s['reason']}")
        return "\n".join(lines)
    lines.append(f"#{'size (B)':>13} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}")
    for r in s["sizes"]:
        lines.append(
            f"{r['bytes']:>14} {r['time_s'] * 1e6:>12.1f} {r['algbw_gbps']:>13.3f}"
            f" {r['busbw_gbps']:>13.3f}"
        )
    if s["reason"]:
        lines.append(f"# stopped early: {s['reason']}")
    lines.append(
        f"# busbw at the largest size ({s['sizes'][-1]['bytes']} B): {s['busbw_gbps']:.3f} GB/s;"
        f" at the gradient size: {_gbps(s['busbw_at_gradient_gbps'])}"
    )
    lines += format_fit(s["fit"])
    lines += format_buckets(s)
    lines.append(f"# sweep wall-clock: {s['seconds']:.2f} s")
    return "\n".join(lines)


def format_fit(fit: dict[str, Any]) -> list[str]:
    """The fitted model and its error."""
    head = (
        "# fit t(n) = alpha + n * 2(n-1)/n / busbw (least squares on relative residuals,"
        f" {fit['points']} sizes)"
    )
    if fit["alpha_s"] is None:
        return [f"{head}: none, {fit['note']}"]
    lines = [
        f"{head}:",
        f"#   alpha {fit['alpha_s'] * 1e6:.1f} us{_se(fit['alpha_se_s'], 1e6, 'us')},"
        f" busbw {_gbps(fit['busbw_gbps'])}{_se(fit['busbw_se_gbps'], 1, 'GB/s')},"
        f" relative RMS residual {fit['rel_rms']:.1%}",
    ]
    if fit["note"]:
        lines.append(f"#   {fit['note']}")
    return lines


def format_buckets(s: dict[str, Any]) -> list[str]:
    """The buckets, each one's time on the fitted model, and their sum."""
    buckets = s["bucket_bytes"] or []
    why = f": {s['bucket_reason']}" if s["bucket_reason"] else ""
    lines = [f"# buckets ({s['bucket_source']}){why}"]
    if s["predicted_step_s"] is None:
        lines.append(f"#   {', '.join(str(b) for b in buckets)} B")
        lines.append("# predicted all-reduce time of one step (DDP buckets): none, no fitted model")
        return lines
    for b in buckets:
        lines.append(f"#   {b:>14} B  {fit_time_s(s['fit'], b, s['world_size']) * 1e3:>10.3f} ms")
    lines.append(
        "# predicted all-reduce time of one step (DDP buckets):"
        f" {s['predicted_step_s'] * 1e3:.3f} ms"
    )
    return lines


def _gbps(value: float | None) -> str:
    return f"{value:.3f} GB/s" if value is not None else "none"


def _se(value: float | None, scale: float, unit: str) -> str:
    return f" (± {value * scale:.3g} {unit})" if value is not None else ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    main()
