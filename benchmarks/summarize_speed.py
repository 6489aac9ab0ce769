"""How fast is ``python -m analysis.summarize`` on a big results folder?

Generates realistic job logs in a temporary folder (default 10,000 files of about 100 kB:
Lightning warnings, NCCL INFO lines from every rank, srun ``N: `` prefixes, tqdm progress
bars written with carriage returns, the start event near the top and the result record
near the end; about 3 % of the jobs die without a result), then times, side by side in one
run:

* the real command (``--format json`` with every CSV, report and chart written),
* the same without charts,
* reading alone (``analysis.read.parse``), in this process vs. one worker process per CPU.

Prints wall time, files/s, MB/s and peak memory (``ru_maxrss`` of this process and of its
children, which include the command and its workers). Timings are printed, never asserted:
the machine is shared. The page cache is warm (the files were just written); say so when
quoting the figures.

    .venv/bin/python benchmarks/summarize_speed.py [--files 10000] [--size-kb 100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))  # the record factory

import record_factory  # noqa: E402

from scalescope.record import Identity, ResultRecord, StartEvent, encode  # noqa: E402

SHAPES = [(1, 1), (1, 2), (1, 4), (2, 4), (4, 4), (8, 4), (16, 4)]
FAILURES = [
    "slurmstepd: error: *** JOB {job} ON gpu-a01 CANCELLED AT 2025-03-01T10:00:17 DUE TO TIME "
    "LIMIT ***",
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
    "total capacity of 94.97 GiB of which 1.21 GiB is free.",
    "[Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=20585, "
    "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds "
    "before timing out.",
    "srun: error: gpu-a02: task 6: Exited with exit code 1",
]


def identity(job: int, shape: tuple[int, int], mode: str) -> Identity:
    return record_factory.identity(
        str(job),
        world=shape,
        scaling_mode=mode,
        precision="bf16-mixed",
        accelerator="gpu",
        config_name="spiral-gpu",
        global_batch_size=4096,
        weak_batch=64,
        sweep_id="bench",
        run_dir=f"runs/{job}.r0",
        started_at="2025-03-01T09:00:00+00:00",
    )


def result(ident: Identity, rng: random.Random) -> ResultRecord:
    world = ident.world_size
    ideal = 2000.0 * (0.03 + 0.97 / world) if ident.scaling_mode == "strong" else 2000.0 / world
    train = ideal * rng.gauss(1.0, 0.03)
    epochs, samples = 50, 800_000
    return record_factory.record(
        ident,
        epoch_times_s=[train / epochs] * epochs,
        train_samples=samples,
        val_samples=200_000,
        setup_time_s=40.0 + world,
        val_time_s=5.0,
        steady=False,
        train_time_s=train,
        steps=epochs * samples // ident.global_batch_size,
        job_time_s=45.0 + world + train,
        mean_epoch_time_excl_first_s=train / epochs,
        step_time_s=0.01,
        predicted_epoch_time_s=None,
        val_loss_final=0.1187 * rng.gauss(1.0, 0.005),
        val_acc_final=0.953,
        val_loss_best=0.118,
        val_acc_best=0.954,
        node_names=[f"gpu-a{i:03d}" for i in range(ident.nodes)],
        device_name="NVIDIA H200",
        peak_mem_gib=[1.2] * world,
        peak_host_rss_gib=[3.0] * world,
        model_flops_per_sample=16320.0,
        versions={"python": "3.11.9", "torch": "2.5.1", "lightning": "2.4.0"},
        config={"name": "spiral-gpu", "workload": {"name": "spiral", "num_samples": 1000000}},
        finished_at="2025-03-01T10:00:00+00:00",
    )


def noise_block(rng: random.Random, size: int) -> str:
    """About ``size`` bytes of what other ranks and libraries print."""
    lines: list[str] = []
    total = 0
    while total < size:
        rank = rng.randrange(16)
        kind = rng.random()
        if kind < 0.55:
            line = (
                f"{rank}: gpu-a{rank // 4:03d}:{4000 + rank}:{4100 + rank} [{rank % 4}] NCCL "
                f"INFO Channel {rng.randrange(32):02d}/32 : {rank}[{rank % 4}] -> "
                f"{(rank + 1) % 16}[{(rank + 1) % 4}] via P2P/NVLink/read"
            )
        elif kind < 0.75:
            line = (
                f"{rank}: /opt/conda/lib/python3.11/site-packages/lightning/pytorch/trainer/"
                "connectors/data_connector.py:425: The 'val_dataloader' does not have many "
                "workers which may be a bottleneck. Consider increasing the value of the "
                "`num_workers` argument"
            )
        elif kind < 0.93:
            line = f"{rank}: LOCAL_RANK: {rank % 4} - CUDA_VISIBLE_DEVICES: [0,1,2,3]"
        else:  # tqdm: one "line" of many carriage-return updates
            line = "\r".join(
                f"Epoch {rng.randrange(50)}: {p:3d}%|{'#' * (p // 10):10s}| {p}/100 "
                f"[00:{p:02d}<00:10, 9.1it/s, v_num=0]"
                for p in range(0, 101, 4)
            )
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines) + "\n"


def generate(folder: Path, files: int, size_kb: int, seed: int = 0) -> int:
    """Write the logs; returns the bytes written."""
    rng = random.Random(seed)
    variants = [noise_block(rng, size_kb * 1024 - 8 * 1024) for _ in range(16)]
    heads = [noise_block(rng, 2048) for _ in range(16)]
    written = 0
    for i in range(files):
        job = 100_000 + i
        sub = folder / f"sweep-{i // 1000:02d}"
        if i % 1000 == 0:
            sub.mkdir(parents=True)
        ident = identity(job, SHAPES[i % len(SHAPES)], "strong" if i % 3 else "weak")
        parts = [
            heads[i % 16],
            "0: " + encode(StartEvent(identity=ident)) + "\n",
            variants[(i * 7) % 16],
        ]
        if i % 33 == 5:
            parts.append(FAILURES[i % len(FAILURES)].format(job=job) + "\n")
        else:
            parts.append("0: " + encode(result(ident, rng)) + "\n")
            parts.append(heads[(i + 3) % 16][:800] + "\n")
        data = "".join(parts).encode()
        (sub / f"slurm-{job}.out").write_bytes(data)
        written += len(data)
    return written


def maxrss_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # kB on Linux


def timed_command(args: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "analysis.summarize", *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        raise SystemExit(f"summarize failed with exit status {proc.returncode}")
    return elapsed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--size-kb", type=int, default=100)
    p.add_argument("--keep", type=Path, help="generate here and keep the files")
    args = p.parse_args()

    root = args.keep or Path(tempfile.mkdtemp(prefix="summarize-speed-"))
    logs = root / "logs"
    try:
        print(
            f"machine: {platform.platform()}, {os.cpu_count()} CPU(s), Python "
            f"{platform.python_version()}"
        )
        t0 = time.perf_counter()
        size = generate(logs, args.files, args.size_kb)
        gen = time.perf_counter() - t0
        mb = size / 1e6
        print(f"generated {args.files:,} logs, {mb:,.0f} MB, in {gen:.1f} s (page cache now warm)")

        from analysis.read.parse import parse

        t0 = time.perf_counter()
        serial = parse([logs], jobs=1)
        t_serial = time.perf_counter() - t0
        rss_serial = maxrss_mib(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        parallel = parse([logs])
        t_parallel = time.perf_counter() - t0
        assert len(serial.runs) == len(parallel.runs)
        print(
            f"found {len(parallel.runs):,} runs, {len(parallel.failures):,} failed jobs, "
            f"{len(parallel.problems)} problems"
        )

        out = root / "summary"
        t_full = timed_command([str(logs), "--out", str(out), "--format", "json"])
        t_nochart = timed_command([str(logs), "--out", str(out), "--format", "json", "--no-charts"])
        rows = [
            ("summarize (json + CSV + report + charts)", t_full),
            ("summarize --no-charts", t_nochart),
            ("parse only, in this process", t_serial),
            (f"parse only, {os.cpu_count()} worker processes", t_parallel),
        ]
        print(f"\n{'what':48s} {'time (s)':>9s} {'files/s':>9s} {'MB/s':>7s}")
        for name, t in rows:
            print(f"{name:48s} {t:9.2f} {args.files / t:9,.0f} {mb / t:7,.0f}")
        print(f"\nparallel/serial parse time: {t_parallel / t_serial:.2f}")
        print(f"charts cost: {t_full - t_nochart:.2f} s")
        print(
            f"peak RSS: this process {maxrss_mib(resource.RUSAGE_SELF):,.0f} MiB "
            f"(after the serial parse: {rss_serial:,.0f} MiB); largest child (the command "
            f"or one of its workers) {maxrss_mib(resource.RUSAGE_CHILDREN):,.0f} MiB"
        )
        print("target: the full command under 10 s for 10,000 files of 100 kB")
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
