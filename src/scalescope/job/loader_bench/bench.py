"""Time a workload's input pipeline alone, and the training step it has to feed.

Library side of ``scalescope bench-data``: returns rows, prints nothing. For each loader
setting (workers, prefetch, batch size) it iterates the training loader of one rank holding
the whole data set (world size 1) and measures:

- ``time_to_first_batch_s``: from ``iter()`` (worker start-up included) to the first batch;
- ``samples_per_s``: samples of batches 2..N over the time from the first to the last batch
  (the steady rate, start-up excluded);
- ``batch_p50_s`` / ``batch_p95_s``: time between consecutive batches, 2..N;
- ``loader_cpu_cores``: CPU seconds of the worker processes (of the training process with 0
  workers) from ``iter()`` to the last batch, over that wall time (psutil): cores kept busy.

The step rate is measured once per batch size: forward, backward and optimizer step on a few
batches already on the device (uint8 as the loader gives them), after warm-up steps, with the
device synchronised before each clock read. A setting keeps up when its loader rate is at
least the step rate.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ... import workloads
from ...config import TrainConfig
from ...errors import ConfigError

Progress = Callable[[str, int, int], None]
"""(what, done, total) after each measured batch or step."""


@dataclass(frozen=True)
class LoaderRow:
    workers: int
    prefetch_factor: int | None
    batch_size: int
    batches: int
    samples_per_s: float
    time_to_first_batch_s: float
    batch_p50_s: float
    batch_p95_s: float
    loader_cpu_cores: float
    step_samples_per_s: float
    keeps_up: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_benchable(cfg: TrainConfig) -> None:
    """Refuse, before importing torch, a workload that has no DataLoader to time."""
    spec = workloads.REGISTRY.get(cfg.workload_name)
    if spec is None or not getattr(spec.params, "input_pipeline", False):
        raise ConfigError(
            f"workload.name: {cfg.workload_name!r} holds its data in memory and has no input "
            "pipeline to time; bench-data works for workloads fed by a DataLoader (resnet)"
        )


def grid(
    workers: Sequence[int], prefetch: Sequence[int], batch_sizes: Sequence[int]
) -> list[tuple[int, int | None, int]]:
    """(workers, prefetch, batch) settings; prefetch does not apply to 0 workers."""
    out: list[tuple[int, int | None, int]] = []
    for b in batch_sizes:
        for w in workers:
            for p in [None] if w == 0 else list(prefetch):
                out.append((w, p, b))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), ``q`` in [0, 100]."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _cpu_s(proc: Any) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def time_loader(loader: Any, batches: int, progress: Progress | None = None) -> dict[str, float]:
    """Iterate ``loader`` (restarting epochs as needed) for ``batches`` batches."""
    import psutil

    me = psutil.Process()
    before = {c.pid for c in me.children()}
    workers = getattr(loader, "num_workers", 0)
    cpu_main0 = _cpu_s(me)
    t0 = time.perf_counter()
    it = iter(loader)
    stamps: list[float] = []
    sizes: list[int] = []
    worker_procs: dict[int, Any] = {}
    while len(stamps) < batches:
        try:
            x, _ = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        stamps.append(time.perf_counter())
        sizes.append(int(x.shape[0]))
        if workers and not worker_procs:
            worker_procs = {c.pid: c for c in me.children() if c.pid not in before}
        if progress:
            progress("loader", len(stamps), batches)
    wall = stamps[-1] - t0
    if workers:
        cpu = 0.0
        for p in worker_procs.values():
            with contextlib.suppress(psutil.Error):  # a worker that has already exited
                cpu += _cpu_s(p)
    else:
        cpu = _cpu_s(me) - cpu_main0
    del it
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    steady = stamps[-1] - stamps[0]
    return {
        "samples_per_s": sum(sizes[1:]) / steady if steady > 0 else math.nan,
        "time_to_first_batch_s": stamps[0] - t0,
        "batch_p50_s": percentile(gaps, 50),
        "batch_p95_s": percentile(gaps, 95),
        "loader_cpu_cores": cpu / wall if wall > 0 else math.nan,
    }


def _device(cfg: TrainConfig) -> Any:
    import torch

    want = cfg.trainer.accelerator
    if want == "gpu" or (want == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def time_steps(
    model: Any,
    batches: list[Any],
    device: Any,
    *,
    precision: str,
    steps: int,
    warmup: int = 3,
    progress: Progress | None = None,
) -> float:
    """Samples/s of forward + backward + optimizer step on in-memory device batches."""
    import torch

    model = model.to(device).train()
    opt = model.configure_optimizers()
    data = [(x.to(device), y.to(device)) for x, y in batches]
    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    amp = precision != "32"

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step(i: int) -> int:
        x, y = data[i % len(data)]
        with torch.autocast(device.type, dtype=dtype, enabled=amp):
            loss = model.micro_batch_loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return int(x.shape[0])

    for i in range(warmup):  # first steps pay for allocator and kernel selection
        step(i)
    sync()
    t0 = time.perf_counter()
    samples = 0
    for i in range(steps):
        samples += step(i)
        if progress:
            progress("step", i + 1, steps)
    sync()
    return samples / (time.perf_counter() - t0)


def _threads(cfg: TrainConfig, device: Any) -> int:
    """As training uses them: 1 per CPU process unless set (see train._threads)."""
    import os

    setting = cfg.trainer.threads_per_process
    if setting != "auto":
        return int(setting)
    if os.environ.get("SLURM_CPUS_PER_TASK"):
        return max(1, int(os.environ["SLURM_CPUS_PER_TASK"]))
    return 1 if device.type == "cpu" else max(1, len(os.sched_getaffinity(0)))


def bench(
    cfg: TrainConfig,
    *,
    workers: Sequence[int],
    prefetch: Sequence[int],
    batch_sizes: Sequence[int],
    batches: int,
    step_batches: int = 20,
    progress: Callable[[str], Progress] | None = None,
) -> tuple[list[LoaderRow], dict[str, Any]]:
    """Every loader setting of the grid, timed; returns (rows, context)."""
    params = _check_bench(cfg, batch_sizes, batches)
    import torch

    from ...workloads import build_workload

    device = _device(cfg)
    torch.set_num_threads(_threads(cfg, device))
    torch.manual_seed(cfg.trainer.seed)
    settings = grid(workers, prefetch, batch_sizes)
    model, dm = build_workload(
        cfg.workload_name, params, batch_size=batch_sizes[0], seed=cfg.trainer.seed
    )
    shards = dm.open()
    pin = device.type == "cuda" if params.pin_memory == "auto" else bool(params.pin_memory)
    step_rates: dict[int, float] = {}
    rows: list[LoaderRow] = []
    for w, p, b in settings:
        label = f"workers {w}, prefetch {p if p is not None else '-'}, batch {b}"
        if b not in step_rates:
            step_rates[b] = _step_rate(cfg, model, dm, device, b, batches, step_batches, progress)
        loader = dm.loader(
            "train",
            b,
            num_workers=w,
            prefetch_factor=p,
            # persistent: one set of workers for all the epochs the batches span, so their
            # CPU time is read from processes that are still alive
            persistent_workers=w > 0,
            pin_memory=pin,
        )
        m = time_loader(loader, batches, progress(label) if progress else None)
        rows.append(
            LoaderRow(
                workers=w,
                prefetch_factor=p,
                batch_size=b,
                batches=batches,
                step_samples_per_s=step_rates[b],
                keeps_up=m["samples_per_s"] >= step_rates[b],
                **m,
            )
        )
    return rows, _context(cfg, device, pin, shards, params)


def _check_bench(cfg: TrainConfig, batch_sizes: Sequence[int], batches: int) -> Any:
    """The workload's params, once the workload, the batch count and sizes are checked."""
    check_benchable(cfg)
    if batches < 2:
        raise ConfigError(f"--batches: need at least 2 to time between batches, got {batches}")
    params = cfg.workload_params()
    for b in batch_sizes:
        if b > params.train_samples:
            raise ConfigError(
                f"--batch-size: {b} is more than the {params.train_samples} training samples"
            )
    return params


def _step_rate(
    cfg: TrainConfig,
    model: Any,
    dm: Any,
    device: Any,
    batch_size: int,
    batches: int,
    step_batches: int,
    progress: Callable[[str], Progress] | None,
) -> float:
    """The training step's samples/s at ``batch_size`` on a few batches held in memory."""
    in_memory = list(
        _take(dm.loader("train", batch_size, num_workers=0, pin_memory=False), min(4, batches))
    )
    return time_steps(
        model,
        in_memory,
        device,
        precision=cfg.trainer.precision,
        steps=step_batches,
        progress=progress(f"step rate, batch {batch_size}") if progress else None,
    )


def _context(cfg: TrainConfig, device: Any, pin: bool, shards: Any, params: Any) -> dict[str, Any]:
    """What the rows were measured with: the workload, the device, the data, torch."""
    import torch

    return {
        "workload": cfg.workload_name,
        "config_name": cfg.name,
        "device": str(device),
        "precision": cfg.trainer.precision,
        "pin_memory": pin,
        "threads_per_process": torch.get_num_threads(),
        "shards": str(shards.folder),
        "train_samples": params.train_samples,
        "workload_params": cfg.to_dict()["workload"],
        "torch": torch.__version__,
    }


def _take(loader: Any, n: int) -> list[Any]:
    out = []
    for batch in loader:
        out.append(batch)
        if len(out) == n:
            break
    return out
