"""The one place tests, fixtures and benchmarks build result records.

``identity`` makes a run's identity from its shape (nodes x devices per node, the batch it
holds, strong or weak) and ``record`` a finished run's record from its epochs, deriving every
figure the trainer derives the way the trainer does (steps from the samples and the batch,
throughput from the training time, the steady state from the epochs after the first). Any
field can still be set: a caller that needs a figure the derivation would not give (a rounded
log, an inconsistent record on purpose) names it.

The helpers built on it only choose a starting point: ``analysis_helpers.make_result`` a CPU
spiral run, ``core_helpers.make_result`` a 2-node A100 job, ``tests/fixtures/
make_analysis_logs.py`` the H200 sweep behind the goldens, ``benchmarks/summarize_speed.py`` its
synthetic sweeps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scalescope.record import Identity, ResultRecord

VERSIONS = {"python": "3.11.2", "torch": "2.13.0+cpu", "lightning": "2.6.6"}


def identity(
    job_id: str = "1000",
    *,
    world: tuple[int, int] = (1, 1),
    restart_count: int = 0,
    scaling_mode: str = "strong",
    precision: str = "32",
    accelerator: str = "cpu",
    config_name: str = "spiral",
    workload: str = "spiral",
    global_batch_size: int = 256,
    weak_batch: int | None = None,
    array: tuple[str, int] | None = None,
    **fields: Any,
) -> Identity:
    """A run of ``world = (nodes, devices per node)``. Strong scaling splits
    ``global_batch_size`` over the ranks; weak scaling gives each rank ``weak_batch``
    (``global_batch_size`` when not given). ``fields`` set any other Identity field."""
    nodes, devices = world
    n = nodes * devices
    if scaling_mode == "strong":
        per_device = global_batch_size // n
    else:
        per_device = weak_batch if weak_batch is not None else global_batch_size
    base: dict[str, Any] = {
        "run_id": f"{job_id}.r{restart_count}",
        "job_id": job_id,
        "array_job_id": array[0] if array else None,
        "array_task_id": array[1] if array else None,
        "restart_count": restart_count,
        "launcher": "slurm",
        "config_name": config_name,
        "workload": workload,
        "scaling_mode": scaling_mode,
        "precision": precision,
        "accelerator": accelerator,
        "nodes": nodes,
        "devices_per_node": devices,
        "world_size": n,
        "per_device_batch_size": per_device,
        "global_batch_size": per_device * n,
        "sweep_id": "sweep-test",
        "run_dir": f"outputs/runs/{job_id}",
        "started_at": "2025-01-01T10:00:00+00:00",
    }
    base.update(fields)
    return Identity(**base)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def record(
    ident: Identity,
    *,
    epoch_times_s: Sequence[float],
    train_samples: int = 8000,
    val_samples: int = 2000,
    setup_time_s: float = 5.0,
    val_time_s: float = 2.0,
    val_loss: float | None = 0.12,
    val_acc: float | None = 0.95,
    steady: bool = True,
    **fields: Any,
) -> ResultRecord:
    """A finished run of ``len(epoch_times_s)`` epochs over ``train_samples`` samples each.

    Derived as the trainer derives them, each from the fields before it (so a field set in
    ``fields`` feeds what follows): steps from the samples and the global batch; training time
    the sum of the epochs; throughput samples x epochs over it; the step time from the epochs
    after the first; with ``steady``, the steady state is every epoch after the first."""
    f: dict[str, Any] = dict(fields)

    def take(name: str, derive: Callable[[], Any]) -> Any:
        """The field as set, else derived (only then: a field set to None derives nothing)."""
        if name not in f:
            f[name] = derive()
        return f[name]

    world, batch = ident.world_size, ident.global_batch_size
    f["epoch_times_s"] = list(epoch_times_s)
    epochs = take("epochs", lambda: len(epoch_times_s))
    per_epoch = take("steps_per_epoch", lambda: train_samples // batch)
    take("steps", lambda: per_epoch * epochs)
    train = take("train_time_s", lambda: sum(epoch_times_s))
    take("job_time_s", lambda: setup_time_s + train + val_time_s)
    take("mean_epoch_time_s", lambda: train / epochs)
    later = take("mean_epoch_time_excl_first_s", lambda: _mean(epoch_times_s[1:]))
    rate = take("samples_per_s", lambda: train_samples * epochs / train)
    take("samples_per_s_per_device", lambda: rate / world)
    step = take("step_time_s", lambda: (later or train / epochs) / max(1, per_epoch))
    take("predicted_epoch_time_s", lambda: step * per_epoch)
    if steady and epochs > 1:
        steady_s = take("steady_time_s", lambda: sum(epoch_times_s[1:]))
        take("warmup_steps", lambda: per_epoch)
        take("steady_steps", lambda: per_epoch * (epochs - 1))
        steady_rate = take("steady_samples_per_s", lambda: train_samples * (epochs - 1) / steady_s)
        take("steady_samples_per_s_per_device", lambda: steady_rate / world)
    base: dict[str, Any] = {
        "identity": ident,
        "node_names": [f"node{i + 1}" for i in range(ident.nodes)],
        "device_name": "cpu",
        "train_samples": train_samples,
        "val_samples": val_samples,
        "setup_time_s": setup_time_s,
        "val_time_s": val_time_s,
        "val_loss_final": val_loss,
        "val_acc_final": val_acc,
        "val_loss_best": val_loss,
        "val_acc_best": val_acc,
        "peak_mem_gib": None,
        "peak_host_rss_gib": [0.5] * world,
        "model_flops_per_sample": None,
        "mfu": None,
        "versions": dict(VERSIONS),
        "config": {"name": ident.config_name},
        "finished_at": "2025-01-01T10:05:00+00:00",
    }
    base.update(f)
    return ResultRecord(**base)
