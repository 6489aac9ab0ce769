"""Parsed records as pandas DataFrames: one row per job, typed columns, units in the names.

``runs`` has one row per finished job (a requeued job once, with ``restart_count``);
``failures`` one row per job that left no result. Column names follow the record schema
(:mod:`scalescope.record`); list-valued fields are reduced to what a table needs
(``peak_mem_gib_max``) and kept whole where a notebook may want them (``epoch_times_s``).
"""

from __future__ import annotations

import json
import math
import os
import types
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin, get_type_hints

import pandas as pd

from analysis.read.cpu_load import load_columns
from analysis.read.parse import Failure, ParseResult, Problem, Run, parse
from scalescope.record import Identity, ResultRecord

# The runs frame's key columns: what identifies a series and a scale, and the per-run figures
# every group is summarised over (analysis.compute.metrics groups by them).
SERIES_KEYS = (
    "config_name",
    "workload",
    "scaling_mode",
    "precision",
    "accumulate_grad_batches",
    "accelerator",
    "held_batch_size",
    "epochs",
    "max_steps",
    "workload_params",
    "device_name",
    "cluster",
    "strategy",
)
SERIES_KEY_DEFAULTS: dict[str, Any] = {"strategy": "ddp", "max_steps": None}
"""Key columns added after frames were first built: a frame without one (made before, or
by hand) means this value in every row."""
SERIES_KEY_COLUMNS: dict[str, str] = {"epochs": "planned_epochs"}
"""The runs frame's column each series key field is read from where it is not its own: a
series' ``epochs`` are the epochs its runs were set to train (:func:`planned_epochs`), not
the epochs each trained, an outcome (a module's early stop, a step budget reached sooner at
one world size than another), which would split one configuration's runs into series."""
SCALE_KEYS = ("nodes", "devices_per_node", "world_size")
STAT_COLUMNS = (
    "train_time_s",
    "job_time_s",
    "mean_epoch_time_s",
    "samples_per_s",
    "samples_per_s_per_device",
    "steady_time_s",
    "steady_samples_per_s",
    "steady_samples_per_s_per_device",
    "mfu",
    "steady_mfu",
    "warmup_share",
    "val_loss_final",
    "val_acc_final",
)


UNLESS_RECORDED: dict[str, Any] = {
    "strategy": "ddp",
    "model_state_gib_max": None,
    "reserved_peak_gib_max": None,
    "device_memory_gib": None,
    "sharding": None,
    "batch": None,
    "tokens_per_sample": None,
}
"""Columns a written table (JSON, CSV) carries only where some row holds more than this
default (None: missing): records made before they existed, and DDP-only sweeps, are
written as they were; a sweep over strategies, or runs that recorded their memory, show
them."""


def named(rows: pd.DataFrame, column: str) -> list[str]:
    """The distinct names a text column of ``rows`` holds (a cluster, a sweep id), sorted;
    empty and missing values left out, and none where the frame has no such column."""
    return sorted({v for v in rows.get(column, []) if isinstance(v, str) and v})


def written(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` less the :data:`UNLESS_RECORDED` columns every row of which is the default."""
    drop = []
    for col, default in UNLESS_RECORDED.items():
        if col not in frame.columns:
            continue
        values = frame[col]
        if (values.isna() | (values == default if default is not None else False)).all():
            drop.append(col)
    return frame.drop(columns=drop) if drop else frame


PathArg = str | os.PathLike[str]

_IDENTITY_COLUMNS: dict[str, str] = {
    "job_id": "str",
    "run_id": "str",
    "array_job_id": "str",
    "array_task_id": "Int64",
    "restart_count": "Int64",
    "launcher": "str",
    "config_name": "str",
    "workload": "str",
    "scaling_mode": "str",
    "precision": "str",
    "accelerator": "str",
    "nodes": "Int64",
    "devices_per_node": "Int64",
    "world_size": "Int64",
    "per_device_batch_size": "Int64",
    "global_batch_size": "Int64",
    "sweep_id": "str",
    "run_dir": "str",
    "cluster": "str",
    "repeat_index": "Int64",
    "run_uuid": "str",
    "accumulate_grad_batches": "Int64",
    "strategy": "str",
}

RUN_COLUMNS: dict[str, str] = {
    **_IDENTITY_COLUMNS,
    "held_batch_size": "Int64",
    "workload_params": "str",
    "started_at": "datetime",
    "finished_at": "datetime",
    "device_name": "str",
    "node_names": "str",
    "train_samples": "Int64",
    "val_samples": "Int64",
    "epochs": "Int64",
    "planned_epochs": "Int64",
    "max_steps": "Int64",
    "steps": "Int64",
    "steps_per_epoch": "Int64",
    "setup_time_s": "float64",
    "train_time_s": "float64",
    "val_time_s": "float64",
    "job_time_s": "float64",
    "train_start_unix": "float64",
    "train_end_unix": "float64",
    "mean_epoch_time_s": "float64",
    "mean_epoch_time_excl_first_s": "float64",
    "step_time_s": "float64",
    "predicted_epoch_time_s": "float64",
    "samples_per_s": "float64",
    "samples_per_s_per_device": "float64",
    "val_loss_final": "float64",
    "val_acc_final": "float64",
    "val_loss_best": "float64",
    "val_acc_best": "float64",
    "peak_mem_gib_max": "float64",
    "val_peak_mem_gib_max": "float64",
    "gpu_util_pct": "float64",
    "gpu_idle_share": "float64",
    "peak_host_rss_gib_max": "float64",
    "other_cpu_share": "float64",
    "cpu_wait_share": "float64",
    "cpu_slowed": "boolean",
    "model_state_gib_max": "float64",
    "reserved_peak_gib_max": "float64",
    "device_memory_gib": "float64",
    "model_flops_per_sample": "float64",
    "tokens_per_sample": "Int64",
    "mfu": "float64",
    "warmup_steps": "Int64",
    "steady_steps": "Int64",
    "steady_time_s": "float64",
    "steady_samples_per_s": "float64",
    "steady_samples_per_s_per_device": "float64",
    "steady_mfu": "float64",
    "warmup_share": "float64",
    "epoch_times_s": "object",
    "versions": "object",
    "diagnosis": "object",
    "profile": "object",
    "config": "object",
    "sharding": "object",
    "batch": "object",
    "host_load": "object",
    "sweep_command": "str",
    "restart_reasons": "str",
    "sources": "str",
    "comet_experiment_key": "str",
}
"""Column -> dtype of the runs frame; ``version_<package>`` columns follow, one per package."""

FAILURE_COLUMNS: dict[str, str] = {
    **_IDENTITY_COLUMNS,
    "reason": "str",
    "reason_label": "str",
    "detail": "str",
    "evidence": "str",
    "evidence_file": "str",
    "evidence_line": "Int64",
    "also_seen": "str",
    "consequences": "str",
    "files": "str",
}


@dataclass
class Loaded:
    """What :func:`load_all` returns; unpacks as ``runs, failures, problems``."""

    runs: pd.DataFrame
    failures: pd.DataFrame
    problems: list[Problem]
    files_read: int = 0

    def __iter__(self) -> Iterator[Any]:
        return iter((self.runs, self.failures, self.problems))


def held_batch_size(scaling_mode: str | None, global_bs: int | None, per_device: int | None) -> Any:
    """The batch size the scaling mode keeps constant: global (strong), per device (weak)."""
    return per_device if scaling_mode == "weak" else global_bs


def full_batch(identity: Identity, batch: Any) -> tuple[int, int]:
    """The per-device and global batch of a run as its series keys them: a full step's. A
    user's module's record keeps it in ``batch.per_device_max``; records made before its
    identity held that (a short last batch rounded into a mean) are read by it too, so 1 and
    2 ranks over the same data set stay one series. Otherwise the identity's."""
    full = batch.get("per_device_max") if isinstance(batch, Mapping) else None
    if not isinstance(full, int) or isinstance(full, bool) or full <= 0:
        return identity.per_device_batch_size, identity.global_batch_size
    return full, full * identity.world_size


def workload_params(config: Any) -> str:
    """The workload's parameters as compact sorted JSON: runs of one series share them."""
    workload = config.get("workload") if isinstance(config, dict) else None
    if not isinstance(workload, dict):
        return ""
    params = {k: v for k, v in workload.items() if k != "name"}
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def _identity_row(identity: Identity | None) -> dict[str, Any]:
    if identity is None:
        return {k: None for k in _IDENTITY_COLUMNS}
    return {k: getattr(identity, k) for k in _IDENTITY_COLUMNS}


def whole_number(value: Any) -> int | None:
    """``value`` where a record's JSON gives a whole number there (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _trainer_int(config: Any, key: str) -> int | None:
    """A whole number the record's config gives under ``trainer`` (None where it gives none)."""
    trainer = config.get("trainer") if isinstance(config, dict) else None
    return whole_number(trainer.get(key)) if isinstance(trainer, dict) else None


def planned_epochs(config: Any, trained: Any) -> Any:
    """The epochs a run was set to train: its config's ``trainer.max_epochs``; the epochs it
    ``trained`` where the record says none (older records, a config without it) or fewer
    than it trained (a config that cannot be the run's)."""
    planned = _trainer_int(config, "max_epochs")
    if planned is None or not isinstance(trained, int) or planned < trained:
        return trained
    return planned


def warmup_share(train_time_s: Any, steady_time_s: Any) -> float | None:
    """Share of the training time spent in the warm-up; None without a steady state."""
    numbers = all(isinstance(v, (int, float)) for v in (train_time_s, steady_time_s))
    if not numbers or not train_time_s > 0:
        return None
    return float(max(0.0, 1.0 - steady_time_s / train_time_s))


def _max(values: Sequence[float] | None) -> float | None:
    finite = [v for v in values or () if v is not None]
    return max(finite) if finite else None


def _min(values: Any) -> float | None:
    if not isinstance(values, list):
        return None
    finite = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return min(finite) if finite else None


def _gpu_figures(diagnosis: Any) -> dict[str, float | None]:
    """NVML's steady-state utilisation (mean over the run's sampled GPUs) and the share of
    compute the GPUs idled (the compute split's mean); None where not recorded."""
    d = diagnosis if isinstance(diagnosis, dict) else {}
    nvml = d.get("nvml") if isinstance(d.get("nvml"), dict) else {}
    utils = [
        g["util_mean_pct"]
        for g in nvml.get("gpus") or []
        if isinstance(g, dict) and isinstance(g.get("util_mean_pct"), (int, float))
    ]
    split = d.get("compute_split") if isinstance(d.get("compute_split"), dict) else {}
    idle = split.get("gpu_idle_share")
    return {
        "gpu_util_pct": sum(utils) / len(utils) if utils else None,
        "gpu_idle_share": float(idle) if isinstance(idle, (int, float)) else None,
    }


def _memory_figures(memory: Any) -> dict[str, float | None]:
    """The largest model state any rank held (GiB) and, on GPUs, the largest reserved peak
    and the smallest device's memory (GiB); None where not recorded (older records, the
    reserved peak and device memory off CUDA)."""
    m = memory if isinstance(memory, dict) else {}
    state = m.get("model_state_bytes")
    numbers = [v for v in state or () if isinstance(v, (int, float))]
    reserved = m.get("reserved_peak_gib")
    return {
        "model_state_gib_max": max(numbers) / 2**30 if numbers else None,
        "reserved_peak_gib_max": _max(reserved) if isinstance(reserved, list) else None,
        "device_memory_gib": _min(m.get("device_memory_gib")),
    }


def _run_row(run: Run) -> dict[str, Any]:
    r = run.record
    i = r.identity
    row = _identity_row(i)
    per_device, global_ = full_batch(i, r.batch)
    row.update(
        per_device_batch_size=per_device,
        global_batch_size=global_,
        held_batch_size=held_batch_size(i.scaling_mode, global_, per_device),
        workload_params=workload_params(r.config),
        started_at=i.started_at,
        finished_at=r.finished_at,
        device_name=r.device_name,
        node_names=",".join(r.node_names),
        peak_mem_gib_max=_max(r.peak_mem_gib),
        val_peak_mem_gib_max=_max(r.val_peak_mem_gib),
        **_gpu_figures(r.diagnosis),
        peak_host_rss_gib_max=_max(r.peak_host_rss_gib),
        **load_columns(r.host_load),
        **_memory_figures(r.memory),
        epoch_times_s=tuple(r.epoch_times_s),
        versions=dict(r.versions),
        config=dict(r.config) if isinstance(r.config, dict) else {},
        planned_epochs=planned_epochs(r.config, r.epochs),
        max_steps=_trainer_int(r.config, "max_steps"),
        warmup_share=warmup_share(r.train_time_s, r.steady_time_s),
        restart_reasons="; ".join(run.restart_reasons),
        sources=";".join(run.sources),
        sweep_command=None,  # the sweep's, from its manifest (runs_frame)
        comet_experiment_key=(
            r.tracking.get("experiment_key") if isinstance(r.tracking, dict) else None
        ),
    )
    for col in RUN_COLUMNS:
        if col not in row:
            row[col] = getattr(r, col)
    for package, version in sorted(r.versions.items()):
        row[f"version_{package}"] = version
    return row


def _failure_row(failure: Failure) -> dict[str, Any]:
    row = _identity_row(failure.identity)
    planned = failure.planned
    if failure.identity is None and planned is not None:
        row.update(
            nodes=planned.nodes,
            devices_per_node=planned.devices_per_node,
            world_size=planned.world_size,
            sweep_id=planned.sweep_id,
            repeat_index=planned.repeat,
        )
    d = failure.diagnosis
    row.update(
        job_id=failure.job_id,
        restart_count=failure.restart_count,
        reason=d.code,
        reason_label=d.label,
        detail=d.detail,
        evidence=d.evidence.line if d.evidence else None,
        evidence_file=d.evidence.file if d.evidence else None,
        evidence_line=d.evidence.line_no if d.evidence else None,
        also_seen=",".join(d.also_seen),
        consequences="\n".join(f"{c.label} at {c.where}: {c.line}" for c in d.consequences),
        files=";".join(failure.files),
    )
    return row


def _column(values: list[Any], dtype: str) -> pd.Series:
    """Values as ``dtype``; anything of the wrong type becomes missing, never an error (a
    record is checked for presence of its fields, not their types)."""
    if dtype.startswith("datetime"):
        return pd.to_datetime(pd.Series(values, dtype="object"), utc=True, errors="coerce")
    if dtype == "object":
        return pd.Series(values, dtype="object")
    if dtype == "str":
        return pd.Series([None if v is None else str(v) for v in values], dtype="str")
    if dtype == "Int64":
        return pd.Series(
            [v if isinstance(v, int) and not isinstance(v, bool) else None for v in values],
            dtype="Int64",
        )
    if dtype == "boolean":
        return pd.Series([v if isinstance(v, bool) else None for v in values], dtype="boolean")
    return pd.Series(
        [
            float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan
            for v in values
        ],
        dtype=dtype,
    )


def _typed(rows: list[dict[str, Any]], columns: dict[str, str]) -> pd.DataFrame:
    extra = sorted({k for row in rows for k in row} - set(columns))
    specs = {**columns, **dict.fromkeys(extra, "str")}
    data = {col: _column([row.get(col) for row in rows], dtype) for col, dtype in specs.items()}
    return pd.DataFrame(data, index=pd.RangeIndex(len(rows)))


def runs_frame(result: ParseResult) -> pd.DataFrame:
    rows = [_run_row(r) for r in result.runs]
    for row in rows:
        row["sweep_command"] = result.sweep_commands.get(row.get("sweep_id") or "")
    return _typed(rows, RUN_COLUMNS)


def failures_frame(result: ParseResult) -> pd.DataFrame:
    return _typed([_failure_row(f) for f in result.failures], FAILURE_COLUMNS)


def _optional(tp: Any) -> bool:
    origin = get_origin(tp)
    return (origin is Union or origin is types.UnionType) and type(None) in get_args(tp)


_HINTS = {**get_type_hints(Identity), **get_type_hints(ResultRecord)}
MEASURED_COLUMNS = tuple(
    c for c in (*SCALE_KEYS, *STAT_COLUMNS) if c in _HINTS and not _optional(_HINTS[c])
)
"""Columns every run must have a finite value in (a record field that is not optional): a
run without one would silently leave a group's statistics or a scaling axis."""


def unmeasured_runs(runs: pd.DataFrame) -> list[Problem]:
    """A problem per run that lacks a value the grouping or the statistics need (a null
    written for NaN or infinity, a value of the wrong type): it stays in the runs table but
    counts in nothing computed from that column, so say so instead of losing it quietly."""
    problems: list[Problem] = []
    if runs.empty:
        return problems
    cols = [c for c in MEASURED_COLUMNS if c in runs]
    missing = runs[cols].isna()
    for pos in missing.index[missing.any(axis=1)]:
        lacking = [c for c in cols if missing.at[pos, c]]
        scale = [c for c in lacking if c in SCALE_KEYS]
        effect = (
            "it cannot be placed on a scaling axis and is left out of every group"
            if scale
            else "it is listed with the runs but left out of these statistics of its group "
            "(n counts finite values only)"
        )
        sources = str(runs.at[pos, "sources"] or "").split(";")
        problems.append(
            Problem(
                sources[0],
                f"run {runs.at[pos, 'run_id']}: no finite value for {', '.join(lacking)}; {effect}",
            )
        )
    return problems


def scaling_mismatches(runs: pd.DataFrame) -> list[Problem]:
    """A problem per series whose recorded batches do not follow its declared scaling mode
    (a user's module records the batch its loaders yielded, which may ignore the config):
    strong scaling whose per-device batch is the same at every world size is weak scaling,
    and weak scaling whose global batch is the same is strong scaling. Such runs split into
    one series per world size (the held batch differs), so no speedup is computed for them:
    the problem says why."""
    needed = {*SERIES_KEYS, "world_size", "per_device_batch_size", "global_batch_size"}
    if runs.empty or not needed - set(SERIES_KEY_DEFAULTS) <= set(runs.columns):
        return []
    keys = [k for k in SERIES_KEYS if k != "held_batch_size" and k in runs.columns]
    problems: list[Problem] = []
    for _, g in runs.groupby(keys, dropna=False, sort=True):
        sizes = g.dropna(subset=["world_size", "per_device_batch_size", "global_batch_size"])
        if sizes["world_size"].nunique() < 2:
            continue
        mode = str(g["scaling_mode"].iloc[0])
        per_device = set(sizes["per_device_batch_size"].astype(int))
        global_ = set(sizes["global_batch_size"].astype(int))
        name = f"{g['config_name'].iloc[0]} ({g['workload'].iloc[0]})"
        if mode == "strong" and len(per_device) == 1 and len(global_) > 1:
            (b,) = per_device
            what = (
                f"declared strong scaling, but the per-device batch recorded is {b} at every "
                "world size: that is weak scaling (the loader does not take the batch "
                "scalescope passes); set trainer.scaling=weak, or give the data module a "
                "batch_size argument"
            )
        elif mode == "weak" and len(global_) == 1 and len(per_device) > 1:
            (b,) = global_
            what = (
                f"declared weak scaling, but the global batch recorded is {b} at every world "
                "size: that is strong scaling; set trainer.scaling=strong"
            )
        else:
            continue
        sources = str(g["sources"].iloc[0] or "").split(";")
        problems.append(Problem(sources[0], f"series {name}: {what}; no speedup is computed"))
    return problems


def load_all(
    path: PathArg | Sequence[PathArg],
    *,
    jobs: int | None = None,
    exclude: Sequence[PathArg] = (),
) -> Loaded:
    """Runs, failures and problems under ``path`` (a folder, a file, or a list of them)."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    result = parse(paths, jobs=jobs, exclude=exclude)
    runs = runs_frame(result)
    problems = [*result.problems, *unmeasured_runs(runs), *scaling_mismatches(runs)]
    return Loaded(runs, failures_frame(result), problems, result.files_read)


def load(path: PathArg | Sequence[PathArg], *, jobs: int | None = None) -> pd.DataFrame:
    """One row per finished job; problems become one warning (``load_all`` lists them)."""
    loaded = load_all(path, jobs=jobs)
    serious = [p for p in loaded.problems if p.severity == "warning"]
    if serious:
        first = serious[0]
        warnings.warn(
            f"{len(serious)} problem(s) while reading, first: {first.file}: {first.message} "
            "(analysis.load_all returns them all)",
            stacklevel=2,
        )
    return loaded.runs
