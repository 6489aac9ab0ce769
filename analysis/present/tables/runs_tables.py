"""The per-job tables: one row per run (``summary_table``, with the Shared node column where
runs shared a node while timed and the Other load column where other programs took their
cores), per failed job (``failures_table``) and per problem met while
reading (``problems_table``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis.compute.metrics import (
    accumulation_label,
    natural_key,
    precision_label,
    series_keys,
    series_labels,
)
from analysis.present.display import (
    MISSING,
    DisplayTable,
    devices_header,
    is_missing,
    num,
    pct,
    sig,
)
from analysis.present.tables.gpu_columns import GPU_CAPTION, gpu_cells, gpu_columns
from analysis.read.cpu_load import slowed_runs
from analysis.read.files import Problem
from analysis.read.overlap import run_cells, shape_label


def _truncate(table: DisplayTable, max_rows: int, where: str) -> DisplayTable:
    """Keep the first ``max_rows`` rows (0 = all) and say how many are left out."""
    hidden = len(table.frame) - max_rows
    if max_rows > 0 and hidden > 0:
        table.frame = table.frame.iloc[:max_rows].reset_index(drop=True)
        table.caption.append(f"{hidden:,} more row(s) not shown: every one is in {where}.")
    return table


def summary_table(
    runs: pd.DataFrame, max_rows: int = 0, overlaps: pd.DataFrame | None = None
) -> DisplayTable:
    """One row per job, in series / scale / job-id order (the first ``max_rows``; 0 = all);
    a Shared node column where runs shared a node while timed (``overlaps``)."""
    dev = devices_header(runs["accelerator"].tolist() if len(runs) else [])
    restarts = bool(len(runs)) and bool((runs["restart_count"].fillna(0) > 0).any())
    numbers = [
        dev,
        "Nodes",
        "Train time (s)",
        "Time/epoch (s)",
        "Steady throughput (samples/s)",
        "Val loss",
        "Val acc",
    ]
    gpu = gpu_columns(runs)
    numbers += gpu
    columns = ["Job ID", "Configuration", *numbers]
    if restarts:
        columns.append("Restarts")
    shared = run_cells(overlaps) if overlaps is not None and len(overlaps) else {}
    if shared:
        columns.append(SHARED_COLUMN)
    loaded = _other_load_shown(runs)
    if loaded:
        columns.append(LOAD_COLUMN)
    keys = series_keys(runs)
    labels = series_labels(list(dict.fromkeys(keys)))
    c = {col: runs[col].tolist() for col in runs.columns}  # column-wise: 10,000 rows are cheap
    rows = []
    for i, key in enumerate(keys):
        row = [
            str(c["job_id"][i]),
            labels[key],
            str(c["world_size"][i]),
            str(c["nodes"][i]),
            num(c["train_time_s"][i]),
            num(c["mean_epoch_time_s"][i], 3),
            _run_throughput(c["steady_samples_per_s"][i], c["samples_per_s"][i]),
            num(c["val_loss_final"][i], 4),
            num(c["val_acc_final"][i], 4),
        ]
        row += gpu_cells(c, i, gpu)
        if restarts:
            reasons = c["restart_reasons"][i] if not is_missing(c["restart_reasons"][i]) else ""
            row.append(f"{c['restart_count'][i]}" + (f" ({reasons})" if reasons else ""))
        if shared:
            row.append(shared.get(runs.index[i], ""))
        if loaded:
            row.append(pct(c["other_cpu_share"][i]))
        world = c["world_size"][i]
        order = (labels[key], 0 if is_missing(world) else world, natural_key(c["job_id"][i]))
        rows.append((order, row))
    rows.sort(key=lambda x: x[0])
    frame = pd.DataFrame([r for _, r in rows], columns=columns, dtype="object")
    table = DisplayTable(
        "runs",
        "Benchmark results",
        frame,
        caption=[
            "Train time: training part of all epochs, validation excluded (max over ranks); "
            "Time/epoch: its mean per epoch; Steady throughput: samples/s after the warm-up, "
            "the headline's quantity (a run without a steady state: its whole training, marked "
            "'whole'); Val loss/acc: final epoch's." + (GPU_CAPTION if gpu else "")
        ]
        + ([SHARED_CAPTION] if shared else [])
        + ([LOAD_CAPTION] if loaded else []),
        right=set(numbers) | ({LOAD_COLUMN} if loaded else set()),
    )
    return _truncate(table, max_rows, "runs.csv and summary.json")


SHARED_COLUMN = "Shared node"
SHARED_CAPTION = (
    f"{SHARED_COLUMN}: another job ran on this run's node for the seconds given (and that "
    "share) of its timed interval: its figures include that job's load."
)


LOAD_COLUMN = "Other load"
LOAD_CAPTION = (
    f"{LOAD_COLUMN}: the share of the run's cores other programs kept busy while it trained "
    "(its busiest machine's); shown where other programs slowed a run (Read this first)."
)


def _other_load_shown(runs: pd.DataFrame) -> bool:
    """Whether other programs slowed any run (the runs frame's ``cpu_slowed``)."""
    return bool(slowed_runs(runs).any())


def _run_throughput(steady: Any, whole: Any) -> str:
    """A run's steady-state throughput; its whole-training one, so marked, without one."""
    return sig(steady) if not is_missing(steady) else f"{sig(whole)} (whole)"


def failure_label(row: pd.Series) -> str:
    """Like a series label, without what only a result knows (epochs, workload parameters);
    for a job that printed no start event, its shape and repeat as sweep.json or its sbatch
    log's first line give them."""
    if is_missing(row["config_name"]):
        if is_missing(row.get("nodes")) or is_missing(row.get("devices_per_node")):
            return "unknown (no start event)"
        repeat = row.get("repeat_index")
        again = "" if is_missing(repeat) else f" repeat {int(repeat)}"
        return f"shape {shape_label(row['nodes'], row['devices_per_node'])}{again}"
    name = str(row["config_name"])
    if not is_missing(row["workload"]) and row["workload"] != row["config_name"]:
        name += f" [{row['workload']}]"
    label = f"{name} · {row['scaling_mode']} · {precision_label(row['precision'])}"
    return label + accumulation_label(row.get("accumulate_grad_batches"))


def failure_job_ids(failures: pd.DataFrame) -> dict[Any, str]:
    """Each failure's job id as shown, by row index: the id alone, or, where other failures
    have the same id (two clusters' job 1234, an id handed out again in another sweep), with
    the cluster and sweep that tell them apart."""
    if not len(failures):
        return {}
    ids = failures["job_id"].astype(str)
    shown: dict[Any, str] = {}
    for i, job_id in ids.items():
        same = failures[ids == job_id]
        row = failures.loc[i]
        where = [
            f"{label} {row[col]}"
            for col, label in (("cluster", "on"), ("sweep_id", "in"))
            if col in failures
            and same[col].astype(str).nunique(dropna=False) > 1
            and not is_missing(row[col])
        ]
        shown[i] = f"{job_id} ({', '.join(where)})" if len(same) > 1 and where else job_id
    return shown


def failures_table(failures: pd.DataFrame, max_rows: int = 0) -> DisplayTable:
    dev = devices_header(failures["accelerator"].tolist() if len(failures) else [])
    columns = [
        "Job ID",
        "Configuration",
        dev,
        "Nodes",
        "Restarts",
        "Reason",
        "Detail",
        "Evidence",
        "Consequences",
    ]
    rows = []
    job_ids = failure_job_ids(failures)
    for i, r in failures.sort_values(
        "job_id", key=lambda s: s.map(natural_key), kind="stable"
    ).iterrows():
        if not is_missing(r["evidence_file"]):
            where = f"{r['evidence_file']}:{r['evidence_line']}"
        else:  # no matching line: name the log that was read
            where = str(r["files"]).split(";")[0] if not is_missing(r["files"]) else MISSING
        consequences = "; ".join(
            # "<label> at <file:line>: <line>": the line itself is in failures.csv
            c.split(": ", 1)[0]
            for c in ("" if is_missing(r["consequences"]) else r["consequences"]).split("\n")
            if c
        )
        rows.append(
            [
                job_ids[i],
                failure_label(r),
                MISSING if is_missing(r["world_size"]) else str(r["world_size"]),
                MISSING if is_missing(r["nodes"]) else str(r["nodes"]),
                str(r["restart_count"]),
                r["reason_label"],
                r["detail"],
                where,
                consequences or MISSING,
            ]
        )
    table = DisplayTable(
        "failures",
        "Failed or incomplete jobs",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=[
            "Jobs with a start event or a job log but no result. The reason is the earliest "
            "error (a node failure, preemption or host OOM kill even when printed after the "
            "errors it caused; between logs of different ranks, the likelier cause); "
            "consequences are the symptoms that followed it (failures.csv has their lines)."
        ],
        right={dev, "Nodes", "Restarts"},
    )
    return _truncate(table, max_rows, "failures.csv and summary.json")


def problems_table(problems: Sequence[Problem]) -> DisplayTable:
    rows = [[p.file, p.severity, p.message] for p in problems]
    return DisplayTable(
        "problems",
        "Problems while reading",
        pd.DataFrame(rows, columns=["File", "Severity", "Problem"], dtype="object"),
    )
