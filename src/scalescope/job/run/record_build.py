"""A job's record: its identity, announced at the start (:func:`announce`), and rank 0's
result record at the end (:func:`rank_zero_record`, :func:`after_tracking`), printed
behind the record marker and written atomically to the run directory (:func:`publish`).
The record lines (:func:`emit`) go to stdout where it is a log (a Slurm or submitit file, a
pipe): what the parser reads; an interactive terminal gets the human lines only, the record
lines going to the run directory's ``records.log``.

Light to import: torch is imported inside the functions that need it.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import __version__, record
from ...config import SHARDED, TrainConfig
from ...workloads.tokens import tokens_per_sample
from .topology import Topology

if TYPE_CHECKING:
    from ..tracking.comet_log import Tracker
    from .measure import Measures, UserMeasures
    from .startup import Job


def say(topo: Topology, message: str) -> None:
    """Human-readable log lines: rank 0 only, flushed so they interleave in order."""
    if topo.is_rank_zero:
        print(f"scalescope: {message}", flush=True)


RECORDS_LOG = "records.log"
"""In the run directory: the record lines of a run whose stdout is an interactive terminal."""
PRINT_RECORDS_ENV = "SCALESCOPE_PRINT_RECORDS"
"""Set to 1: print the record lines to a terminal too."""


def emit(line: str, run_dir: Path, stream: Any = None) -> None:
    """One record line (``:::SCALESCOPE {...}``, several KB) where the parser reads it:
    stdout where stdout is not a terminal (a job log, a pipe, a file); where it is, the run
    directory's :data:`RECORDS_LOG`, so a user's terminal is not flooded with JSON (the
    analysis reads that file and ``result.json`` there)."""
    out = sys.stdout if stream is None else stream
    isatty = getattr(out, "isatty", None)
    if callable(isatty) and isatty() and os.environ.get(PRINT_RECORDS_ENV) != "1":
        with open(run_dir / RECORDS_LOG, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
        return
    print(line, file=out, flush=True)


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat(timespec="seconds")


# -- the start ----------------------------------------------------------------------------
def announce(cfg: TrainConfig, job: Job, process_start: float) -> tuple[Path, record.Identity]:
    """The run's directory (a new one, made by rank 0) and its identity; rank 0 prints the
    start event and a line that says what runs."""
    topo = job.topo
    run_dir = Path(cfg.output_dir) / "runs" / cfg.name / topo.run_id
    if topo.is_rank_zero:
        run_dir = _unique_dir(run_dir)
    ident = _identity(cfg, job, run_dir, process_start)
    if topo.is_rank_zero:
        emit(record.encode(record.StartEvent(ident)), run_dir)
    say(
        topo,
        f"run {ident.run_id}: {cfg.name} on {topo.num_nodes} node(s) x "
        f"{topo.devices_per_node} {job.accelerator} device(s) = world {topo.world_size}, "
        + batch_words(job.batch, cfg.trainer.scaling, job.resolved if job.user_workload else None)
        + f", precision {cfg.trainer.precision}, "
        f"run dir {run_dir}",
    )
    return run_dir, ident


def batch_words(batch: Any, scaling: str, resolved: Any) -> str:
    """The start line's batch: the configured one (``batch``), or, where a user's module's
    classes (``resolved``) take no ``batch_size``, the loader's own, which the record
    measures: the configured figure would name a batch that never ran."""
    if resolved is not None and not resolved.batch_size_passed:
        given = batch.global_batch_size if scaling == "strong" else batch.per_device_batch_size
        cls = resolved.datamodule_cls or resolved.module_cls
        return (
            f"batch: the loader's own, measured as it runs ({cls.__name__} takes no "
            f"batch_size, so trainer.batch_size={given} is not passed; {scaling} scaling)"
        )
    k = batch.accumulate_grad_batches
    return (
        f"batch {batch.per_device_batch_size}/device {batch.global_batch_size} global "
        f"({scaling} scaling)"
        + (f" in {k} micro-batches of {batch.micro_batch_size}" if k > 1 else "")
    )


def _unique_dir(base: Path) -> Path:
    """``base``, or ``base-2``, ``base-3``...: never reuse an earlier run's directory."""
    candidate, n = base, 1
    while True:
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base.with_name(f"{base.name}-{n}")


def _identity(cfg: TrainConfig, job: Job, run_dir: Path, process_start: float) -> record.Identity:
    topo, batch = job.topo, job.batch
    return record.Identity(
        run_id=topo.run_id,
        job_id=topo.job_id,
        array_job_id=topo.array_job_id,
        array_task_id=topo.array_task_id,
        restart_count=topo.restart_count,
        launcher=topo.launcher,
        config_name=cfg.name,
        workload=cfg.workload_name,
        scaling_mode=cfg.trainer.scaling,
        precision=cfg.trainer.precision,
        accelerator=job.accelerator,
        nodes=topo.num_nodes,
        devices_per_node=topo.devices_per_node,
        world_size=topo.world_size,
        per_device_batch_size=batch.per_device_batch_size,
        global_batch_size=batch.global_batch_size,
        sweep_id=cfg.sweep_id,
        run_dir=str(run_dir),
        started_at=_utc(process_start),
        cluster=cfg.cluster or topo.cluster_name or "local",
        repeat_index=cfg.repeat_index,
        run_uuid=uuid.uuid4().hex,
        accumulate_grad_batches=batch.accumulate_grad_batches,
        strategy=cfg.trainer.strategy,
    )


def library_versions() -> dict[str, str | None]:
    import lightning
    import torch

    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            nccl = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "scalescope": _code_version(),
    }


def _code_version() -> str:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
        commit = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"{__version__}+g{commit}" if commit else __version__


# -- the end, rank 0 ----------------------------------------------------------------------
def rank_zero_record(
    cfg: TrainConfig,
    job: Job,
    ident: record.Identity,
    versions: Mapping[str, str | None],
    agreed: Any,
    measures: Measures,
    trainer: Any,
    model: Any,
    datamodule: Any,
) -> record.ResultRecord:
    """Rank 0's record from the agreed timings and what was measured, with the diagnosis'
    section (or why there is none)."""
    from .measure import diagnosis_off

    user, diag = measures.user, measures.diag
    probe = user.probe if user is not None else None
    if probe is not None and probe.problem:
        say(job.topo, f"FLOPs per sample not measured ({probe.problem})")
    elif probe is not None and probe.counted_live:
        say(
            job.topo,
            "FLOPs per sample counted on the first training step (warm-up): the copy "
            f"failed ({probe.copy_problem})",
        )
    result = build_result(
        cfg, ident, agreed, measures.timing.t, datamodule, model, versions, trainer, user
    )
    declared = getattr(job.resolved, "tokens_per_sample", None)  # a user's classes' attribute
    return replace(
        result,
        tokens_per_sample=tokens_per_sample(result.config["workload"], declared),
        diagnosis=(
            diag.section(agreed, result.steady_steps, result.identity.per_device_batch_size)
            if diag
            else diagnosis_off()
        ),
        profile=_profile(measures, agreed, result),
    )


def _profile(measures: Measures, agreed: Any, result: record.ResultRecord) -> dict[str, Any] | None:
    """The profiler's section; None when ``trainer.profile`` is off."""
    if measures.profile is None:
        return None
    steady = (
        result.steady_time_s / result.steady_steps
        if result.steady_time_s is not None and result.steady_steps
        else None
    )
    return measures.profile.section(agreed.per_rank, steady)


def after_tracking(
    result: record.ResultRecord,
    tracker: Tracker,
    measures: Measures,
    *,
    threads: int,
    compile_enabled: bool,
) -> record.ResultRecord:
    """The record logged to Comet and the experiment ended, then what only the record
    carries: the tracking's own report, the threads, why training stopped early (if it did)
    and the compile section."""
    tracker.log_result(result.to_dict())
    tracker.end()  # before info(): whether the archive was completed belongs in it
    return replace(
        result,
        tracking=tracker.info(),
        threads_per_process=threads,
        stop_reason=measures.stop.reason,
        compile=measures.compile_clock.section(compile_enabled),
    )


def publish(result: record.ResultRecord, run_dir: Path, topo: Topology) -> None:
    """The record written to the run directory and printed behind the record marker, then
    its warnings and a summary line."""
    record.write_json_atomic(run_dir / "result.json", result.to_dict())
    emit(record.encode(result), run_dir)
    for warning in [
        *(result.batch or {}).get("warnings", []),
        *(result.compile or {}).get("warnings", []),
    ]:
        say(topo, f"warning: {warning}")
    say(topo, _summary_line(result))


def build_result(
    cfg: TrainConfig,
    ident: record.Identity,
    agreed: Any,
    timings: Any,
    datamodule: Any,
    model: Any,
    versions: Mapping[str, str | None],
    trainer: Any,
    measures: UserMeasures | None = None,
) -> record.ResultRecord:
    """Rank 0's record from the agreed timings (called after torch is imported).

    A built-in workload's samples are steps x global batch (its batches are all full); a
    user's module's are the samples its loaders yielded, counted on every rank and summed.
    """
    from ...workloads.user_measurement import measured_batch
    from ..clocks.model_state import memory_section
    from ..faults.injection import not_applied

    steps = int(trainer.global_step)
    counted = measures.counted if measures is not None else None
    batch_section = None
    if measures is not None and counted is not None:
        ident, batch_section = measured_batch(
            ident, counted, measures.passed_to, trainer.train_dataloader
        )
    epochs = _epochs(agreed, trainer)
    speed = _speed(ident, agreed, timings, steps, counted, epochs)
    history = measures.history.history if measures is not None else model.val_history
    device_name = _device_name(trainer)
    return record.ResultRecord(
        identity=ident,
        node_names=agreed.node_names,
        device_name=device_name,
        train_samples=counted.first_epoch_samples if counted else datamodule.num_train,
        val_samples=counted.val_samples if counted else datamodule.num_val,
        steps=steps,
        setup_time_s=agreed.setup_time_s,
        val_time_s=agreed.val_time_s,
        job_time_s=agreed.job_time_s,
        train_start_unix=agreed.train_start_unix,
        train_end_unix=agreed.train_end_unix,
        peak_mem_gib=agreed.peak_mem_gib,
        val_peak_mem_gib=agreed.val_peak_mem_gib,
        peak_host_rss_gib=agreed.peak_host_rss_gib,
        host_load=agreed.host_load,
        **epochs,
        **speed,
        **_validation(history),
        **_flops(model, measures, speed, device_name, ident.precision),
        versions=dict(versions),
        config=cfg.to_dict(),
        finished_at=_utc(time.time()),
        batch=batch_section,
        memory=memory_section(agreed.per_rank, agreed.reserved_peak_gib, ident.accelerator),
        sharding=_sharding(model, cfg),
        faults_not_applied=not_applied(trainer),
    )


def _sharding(model: Any, cfg: TrainConfig) -> dict[str, Any] | None:
    """The sharding FSDP applied, read from the module (None under DDP)."""
    if cfg.trainer.strategy not in SHARDED:
        return None
    from ...workloads.sharding import autocast_dtype, describe

    section = getattr(model, "sharding", None) or describe(model, None, "the module")
    return {**section, "autocast": autocast_dtype(cfg.trainer.precision)}


def _epochs(agreed: Any, trainer: Any) -> dict[str, Any]:
    """The epochs' times, their mean over the complete ones, and the steps in one."""
    from ..clocks.timing import loader_steps

    # Known before the epoch ran (a length, limit_train_batches), else what the longest
    # epoch ran: a stream without a length ends its epochs where it ends.
    steps_per_epoch = loader_steps(trainer) or max(agreed.epoch_steps, default=0)
    # Mean epoch times over complete epochs only (max_steps may cut the last one short).
    full = [
        t
        for t, n in zip(agreed.epoch_times_s, agreed.epoch_steps, strict=True)
        if n == steps_per_epoch
    ] or agreed.epoch_times_s
    return {
        "epochs": len(agreed.epoch_times_s),
        "steps_per_epoch": steps_per_epoch,
        "train_time_s": sum(agreed.epoch_times_s),
        "epoch_times_s": agreed.epoch_times_s,
        # A run stopped in its first epoch has no complete epoch: its times are NaN, not zero.
        "mean_epoch_time_s": sum(full) / len(full) if full else math.nan,
        "mean_epoch_time_excl_first_s": record.mean_excluding_first(full),
    }


def _speed(
    ident: record.Identity,
    agreed: Any,
    timings: Any,
    steps: int,
    counted: Any,
    epochs: Mapping[str, Any],
) -> dict[str, Any]:
    """Samples per second over the whole training and over its steady state (after the
    warm-up), and the median step time."""
    from ..clocks.timing import median_step_time

    samples = counted.train_samples if counted is not None else steps * ident.global_batch_size
    rate = record.rate(samples, epochs["train_time_s"])
    warmup = agreed.warmup_steps
    step_time = median_step_time(timings.step_windows, warmup) if warmup is not None else None
    steady_s = agreed.steady_time_s
    steady_steps = steps - warmup if steady_s is not None and warmup is not None else None
    steady_samples: int | None = None
    if steady_s is not None and steady_steps is not None:
        steady_samples = steady_steps * ident.global_batch_size
        if counted is not None:
            warm = counted.warmup_samples
            steady_samples = counted.train_samples - warm if warm is not None else None
    steady_rate = (
        record.rate(steady_samples, steady_s)
        if steady_s is not None and steady_samples is not None
        else None
    )
    steps_per_epoch = epochs["steps_per_epoch"]
    return {
        "samples_per_s": rate,
        "samples_per_s_per_device": rate / ident.world_size,
        "step_time_s": step_time,
        "predicted_epoch_time_s": step_time * steps_per_epoch if step_time else None,
        "warmup_steps": warmup if warmup is not None else steps,
        "steady_steps": steady_steps,
        "steady_time_s": steady_s,
        "steady_samples_per_s": steady_rate,
        "steady_samples_per_s_per_device": (
            steady_rate / ident.world_size if steady_rate is not None else None
        ),
    }


def _validation(history: list[Any]) -> dict[str, Any]:
    """The last and the best validation loss and accuracy, from (epoch, loss, acc) rows."""
    losses = [h[1] for h in history if h[1] is not None]
    accs = [h[2] for h in history if h[2] is not None]
    return {
        "val_loss_final": history[-1][1] if history else None,
        "val_acc_final": history[-1][2] if history else None,
        "val_loss_best": min(losses) if losses else None,
        "val_acc_best": max(accs) if accs else None,
    }


def _device_name(trainer: Any) -> str:
    import torch

    device = trainer.strategy.root_device
    return torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _flops(
    model: Any,
    measures: UserMeasures | None,
    speed: Mapping[str, Any],
    device_name: str,
    precision: str,
) -> dict[str, Any]:
    """FLOPs per sample (the module's own count, else measured once before training) and
    what they make of the device's peak (MFU), over the whole training and its steady state."""
    from ..diagnosis.hardware import mfu, peak_entry_label, peak_flops

    flops: float | None = None
    flops_source: str | None = None
    if hasattr(model, "flops_per_sample"):
        flops, flops_source = float(model.flops_per_sample()), "module"
    elif measures is not None and measures.probe is not None:
        flops = measures.probe.flops_per_sample
        flops_source = "measured" if flops is not None else None
    steady_per_device = speed["steady_samples_per_s_per_device"]
    return {
        "model_flops_per_sample": flops,
        "flops_source": flops_source,
        "mfu": mfu(flops, speed["samples_per_s_per_device"], device_name, precision),
        "steady_mfu": (
            mfu(flops, steady_per_device, device_name, precision)
            if steady_per_device is not None
            else None
        ),
        "peak_flops_per_s": peak_flops(device_name, precision),
        "peak_flops_entry": peak_entry_label(device_name, precision),
    }


def _summary_line(r: record.ResultRecord) -> str:
    excl = (
        f", {r.mean_epoch_time_excl_first_s:.3f} s excl. first"
        if r.mean_epoch_time_excl_first_s is not None
        else ""
    )
    val = f"; val loss {r.val_loss_final:.4f}" if r.val_loss_final is not None else ""
    if val and r.val_acc_final is not None:
        val += f" acc {r.val_acc_final:.4f}"
    mem = f"; peak mem {max(r.peak_mem_gib):.2f} GiB" if r.peak_mem_gib else ""
    if mem and r.val_peak_mem_gib:
        mem += f" (validation {max(r.val_peak_mem_gib):.2f} GiB)"
    steady = (
        f"; steady state {r.steady_samples_per_s:,.0f} samples/s after {r.warmup_steps} "
        "warm-up steps"
        if r.steady_samples_per_s is not None
        else f"; no steady state (warm-up {r.warmup_steps} steps covered all training)"
    )
    stopped = f"STOPPED EARLY ({r.stop_reason}) after {r.steps} steps: " if r.stop_reason else ""
    if r.profile is not None:
        from ..profile.plan import summary_phrase

        mem += f"; {summary_phrase(r.profile)}"
    return (
        f"{stopped}trained {r.epochs} epoch(s), {r.steps} steps in {r.train_time_s:.3f} s "
        f"(mean epoch {r.mean_epoch_time_s:.3f} s{excl}); {r.samples_per_s:,.0f} samples/s "
        f"({r.samples_per_s_per_device:,.0f} per device); setup {r.setup_time_s:.2f} s, "
        f"job {r.job_time_s:.2f} s{steady}{val}{mem}"
    )
