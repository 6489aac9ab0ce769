"""The summary's display tables: numbers from :mod:`analysis.compute.metrics` formatted for
people (:mod:`analysis.present.display`), every table in reading order (:func:`all_tables`),
and their renderings as Markdown (report, ``--format markdown``) and as rich tables (terminal).

Here: the runs, scaling, Amdahl, precision and failure tables; the others have their modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis.analyze import Analysis
from analysis.compute.metrics import (
    STEADY,
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
    times,
    with_ci,
)
from analysis.present.tables.diagnosis_tables import diagnosis_table
from analysis.present.tables.gpu_columns import GPU_CAPTION, gpu_cells, gpu_columns
from analysis.present.tables.headline_tables import strategy_display
from analysis.present.tables.profile_tables import profile_tables
from analysis.present.tables.projection_tables import projection_check_table, projection_table
from analysis.read.files import Problem
from analysis.read.overlap import run_cells

# --- the tables ---------------------------------------------------------------------------------


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
        + ([SHARED_CAPTION] if shared else []),
        right=set(numbers),
    )
    return _truncate(table, max_rows, "runs.csv and summary.json")


SHARED_COLUMN = "Shared node"
SHARED_CAPTION = (
    f"{SHARED_COLUMN}: another job ran on this run's node for the seconds given (and that "
    "share) of its timed interval: its figures include that job's load."
)


def _run_throughput(steady: Any, whole: Any) -> str:
    """A run's steady-state throughput; its whole-training one, so marked, without one."""
    return sig(steady) if not is_missing(steady) else f"{sig(whole)} (whole)"


def variability_table(analysis: Analysis) -> DisplayTable:
    g = analysis.groups
    dev = devices_header(g["accelerator"].tolist() if len(g) else [])
    columns = [
        "Configuration",
        dev,
        "Nodes",
        "n",
        "Median (s)",
        "Mean (s)",
        "Geo. mean (s)",
        "Std (s)",
        "95% CI (s)",
        "CV",
        "Min–max (s)",
        "Flag",
    ]
    rows = []
    for _, r in g.iterrows():
        ci = (
            f"{r['train_time_s_ci_low']:.2f} – {r['train_time_s_ci_high']:.2f}"
            if not is_missing(r["train_time_s_ci_low"])
            else MISSING
        )
        rows.append(
            [
                r["series"],
                str(r["world_size"]),
                str(r["nodes"]),
                str(r["n"]),
                num(r["train_time_s_median"]),
                num(r["train_time_s_mean"]),
                num(r["train_time_s_gmean"]),
                num(r["train_time_s_std"]),
                ci,
                pct(r["train_time_s_cv"]),
                f"{num(r['train_time_s_min'])} – {num(r['train_time_s_max'])}",
                "high variance" if r["high_variance"] else "",
            ]
        )
    return DisplayTable(
        "groups",
        "Repeatability of training time per configuration",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=[
            "95% CI: Student-t interval of the log times, back-transformed (an interval of the "
            "geometric mean; always positive; needs n >= 2). CV: std / mean."
        ],
        right={dev, "Nodes", "n", "Median (s)", "Mean (s)", "Geo. mean (s)", "Std (s)", "CV"},
    )


def speedup_tables(analysis: Analysis) -> list[DisplayTable]:
    """One table per series: each scale against the series' baseline."""
    return [
        _speedup_table(series, part)
        for series, part in analysis.scaling.groupby("series", sort=False)
    ]


def _speedup_table(series: Any, part: pd.DataFrame) -> DisplayTable:
    weak = (part["scaling_mode"] == "weak").all()
    dev = devices_header(part["accelerator"].tolist())
    with_mfu = bool(part["mfu_mean"].notna().any())
    columns = _speedup_columns(dev, weak, with_mfu)
    rows = [_speedup_row(r, weak, with_mfu) for _, r in part.iterrows()]
    return DisplayTable(
        "scaling",
        f"Speedup analysis: {series}",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        _speedup_caption(part, weak),
        right={
            dev,
            "Nodes",
            "n",
            "Mean throughput (samples/s)",
            "Karp-Flatt e",
            "MFU",
            "Whole-training speedup",
            "Whole-training efficiency",
            "Job-time speedup",
            "Job-time efficiency",
            "Val loss vs base",
            "Val acc vs base",
        },
    )


def _speedup_columns(dev: str, weak: bool, with_mfu: bool) -> list[str]:
    """Weak scaling: scaled speedup and per-device efficiency; strong: speedup, parallel
    efficiency and Karp-Flatt. Both: the scale first, convergence parity last."""
    scale = [dev, "Nodes", "n", "Mean throughput (samples/s)"]
    mfu = ["MFU"] if with_mfu else []
    parity = ["Val loss vs base", "Val acc vs base", "Parity"]
    if weak:
        return [
            *scale,
            "Scaled speedup [95% CI]",
            "Weak-scaling efficiency [95% CI]",
            *mfu,
            "Whole-training efficiency",
            "Job-time speedup",
            *parity,
        ]
    return [
        *scale,
        "Speedup [95% CI]",
        "Parallel efficiency [95% CI]",
        "Karp-Flatt e",
        *mfu,
        "Whole-training speedup",
        "Job-time speedup",
        "Job-time efficiency",
        *parity,
    ]


def _speedup_row(r: pd.Series, weak: bool, with_mfu: bool) -> list[Any]:
    """One scale's cells, in :func:`_speedup_columns`' order."""
    loss = (
        MISSING if is_missing(r["val_loss_delta_rel"]) else f"{100 * r['val_loss_delta_rel']:+.1f}%"
    )
    acc = MISSING if is_missing(r["val_acc_delta"]) else f"{100 * r['val_acc_delta']:+.2f} pt"
    mark = " (baseline)" if r["is_baseline"] else ""
    mfu = [pct(r["mfu_mean"])] if with_mfu else []
    head = [
        f"{r['world_size']}{mark}",
        str(r["nodes"]),
        str(r["n"]),
        sig(r["samples_per_s_mean"]),
        with_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
    ]
    parity = [loss, acc, r["parity"]]
    if weak:
        return [
            *head,
            with_ci(
                r["per_device_throughput_efficiency"],
                r["per_device_throughput_efficiency_ci_low"],
                r["per_device_throughput_efficiency_ci_high"],
                "%",
            ),
            *mfu,
            pct(r["whole_train_efficiency"]),
            times(r["job_time_speedup"]),
            *parity,
        ]
    kf = f"{r['karp_flatt']:.3f}" if not is_missing(r["karp_flatt"]) else MISSING
    if is_missing(r["karp_flatt"]) and not r["is_baseline"] and r["karp_flatt_note"]:
        kf = f"{MISSING} ({r['karp_flatt_note']})"
    return [
        *head,
        with_ci(
            r["parallel_efficiency"],
            r["parallel_efficiency_ci_low"],
            r["parallel_efficiency_ci_high"],
            "%",
        ),
        kf,
        *mfu,
        times(r["whole_train_speedup"]),
        times(r["job_time_speedup"]),
        pct(r["job_time_efficiency"]),
        *parity,
    ]


def _speedup_caption(part: pd.DataFrame, weak: bool) -> list[str]:
    """The baseline, what the headline figures cover, and how each column is computed."""
    base = part[part["is_baseline"]].iloc[0]
    steady = (part["headline_basis"] == STEADY).all()
    basis = (
        "Throughput, speedup, efficiency and MFU are the steady state (after the warm-up: "
        "trainer.warmup_steps)."
        if steady
        else "No steady state recorded for every run: throughput, speedup and efficiency "
        "cover whole training, warm-up included."
    )
    caption = [
        f"Baseline: {base['nodes']} node(s) x {base['devices_per_node']} device(s) "
        f"({base['baseline_note']}), {sig(base['samples_per_s_mean'])} samples/s over "
        f"{base['n']} run(s). {basis}"
    ]
    if weak:
        caption.append(
            "Weak scaling: scaled speedup = throughput / baseline throughput; efficiency "
            "= per-device throughput / baseline per-device throughput; Karp-Flatt and "
            "Amdahl apply to strong scaling only."
        )
    else:
        caption.append(
            "Speedup = mean throughput / baseline mean throughput (strong scaling: the "
            "same steps, so the inverse ratio of times); efficiency = speedup / (devices "
            "/ baseline devices); Karp-Flatt e = (1/S - 1/p) / (1 - 1/p), given only for "
            "1 < S <= p (a slowdown or a superlinear speedup has no serial fraction)."
        )
    caption.append(
        "Whole-training columns include the warm-up; job-time columns use the whole job "
        "time, start-up included."
    )
    caption.append(
        "95% CI: delta-method interval of the ratio of means (log scale, Welch df); "
        "needs n >= 2 on both sides."
    )
    return caption


def amdahl_table(analysis: Analysis) -> DisplayTable | None:
    a = analysis.amdahl
    if a.empty:
        return None
    columns = ["Configuration", "Serial fraction f [95% CI]", "Points"]
    for k in (2, 4):
        columns += [f"Predicted speedup at {k}x", f"Predicted efficiency at {k}x"]
    rows = []
    for _, r in a.iterrows():
        f = MISSING if is_missing(r["serial_fraction"]) else f"{r['serial_fraction']:.4f}"
        if not is_missing(r["serial_fraction_ci_low"]):
            f += f" [{r['serial_fraction_ci_low']:.4f}, {r['serial_fraction_ci_high']:.4f}]"
        if r["fit_note"]:
            f += f" ({r['fit_note']})"
        row = [r["series"], f, str(r["points"])]
        for k in (2, 4):
            s = r[f"predicted_speedup_{k}x"]
            rng = ""
            if not is_missing(r[f"predicted_speedup_{k}x_low"]):
                rng = (
                    f" [{r[f'predicted_speedup_{k}x_low']:.2f}, "
                    f"{r[f'predicted_speedup_{k}x_high']:.2f}]"
                )
            world = r[f"world_size_{k}x"]
            row += [
                MISSING if is_missing(s) else f"{s:.2f}x{rng} ({world} devices)",
                pct(r[f"predicted_efficiency_{k}x"]),
            ]
        rows.append(row)
    return DisplayTable(
        "amdahl",
        "Amdahl fit and extrapolation (strong scaling)",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=[
            "Least squares of 1/S = f + (1 - f)/p through S(1) = 1 over the m scaled points; "
            "95% CI of f: f -/+ t(0.975, m - 1) x SE(f), kept within [0, 1]; the predicted "
            "range is the speedup at the ends of that interval. No f is given outside [0, 1] "
            "(no speedup, or superlinear). Extrapolation assumes nothing new (network, "
            "topology) appears at the larger scale."
        ],
        right={"Points"},
    )


def precision_table(analysis: Analysis) -> DisplayTable | None:
    """Mixed precision vs fp32 at each scale; None when no series pair differs only in it."""
    a = analysis.precision
    if a.empty:
        return None
    columns = [
        "Configuration",
        "vs",
        "Nodes x devices",
        "Runs (mixed / fp32)",
        "Speed (mixed / fp32) [95% CI]",
        "Peak memory (mixed / fp32)",
        "Val loss (mixed vs fp32)",
    ]
    rows = []
    for _, r in a.iterrows():
        mem = MISSING
        if not is_missing(r["peak_mem_ratio"]):
            mem = (
                f"{r['peak_mem_ratio']:.2f}x ({r['peak_mem_gib_mean']:.2f} / "
                f"{r['fp32_peak_mem_gib_mean']:.2f} GiB)"
            )
        loss = MISSING
        if not is_missing(r["val_loss_rel_diff"]):
            loss = (
                f"{100 * r['val_loss_rel_diff']:+.2f}% ({sig(r['val_loss_final_mean'])} vs "
                f"{sig(r['fp32_val_loss_final_mean'])})"
            )
        speed = with_ci(r["speed_ratio"], r["speed_ratio_ci_low"], r["speed_ratio_ci_high"])
        if r["headline_basis"] != STEADY:
            speed += " (whole training)"
        rows.append(
            [
                r["series"],
                precision_label("32"),
                f"{r['nodes']}x{r['devices_per_node']}",
                f"{r['n']} / {r['fp32_n']}",
                speed,
                mem,
                loss,
            ]
        )
    return DisplayTable(
        "precision",
        "Mixed precision vs fp32",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=[
            "Pairs of series that differ only in precision, at the same scale. Speed: mean "
            "headline throughput (steady state) of the mixed-precision runs / the fp32 runs', "
            "delta-method 95% CI on the log scale; above 1 = mixed is faster. Peak memory: "
            "mean of each run's largest device peak (GPU runs only). Val loss: relative "
            "difference of the mean final validation loss (parity: near 0)."
        ],
        right={"Runs (mixed / fp32)"},
    )


def failure_label(row: pd.Series) -> str:
    """Like a series label, without what only a result knows (epochs, workload parameters);
    for a job that printed no start event, its shape and repeat as sweep.json or its sbatch
    log's first line give them."""
    if is_missing(row["config_name"]):
        if is_missing(row.get("nodes")) or is_missing(row.get("devices_per_node")):
            return "unknown (no start event)"
        repeat = row.get("repeat_index")
        again = "" if is_missing(repeat) else f" repeat {int(repeat)}"
        return f"shape {int(row['nodes'])}x{int(row['devices_per_node'])}{again}"
    name = str(row["config_name"])
    if not is_missing(row["workload"]) and row["workload"] != row["config_name"]:
        name += f" [{row['workload']}]"
    label = f"{name} · {row['scaling_mode']} · {precision_label(row['precision'])}"
    return label + accumulation_label(row.get("accumulate_grad_batches"))


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
    for _, r in failures.sort_values(
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
                str(r["job_id"]),
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
            "error (between logs of different ranks, the likelier cause); consequences are the "
            "symptoms that followed it (failures.csv has their lines)."
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


def all_tables(
    runs: pd.DataFrame,
    failures: pd.DataFrame,
    problems: Sequence[Problem],
    analysis: Analysis,
    max_rows: int = 0,
) -> list[DisplayTable]:
    """Every table in reading order; empty ones left out."""
    tables: list[DisplayTable] = []
    if len(runs):
        tables.append(summary_table(runs, max_rows, analysis.overlaps))
        tables.extend(speedup_tables(analysis))
        if analysis.projection is not None:
            for table in (
                projection_table(analysis.projection),
                projection_check_table(analysis.projection),
            ):
                if table is not None:
                    tables.append(table)
        extras = (amdahl_table, diagnosis_table, precision_table, strategy_display)
        tables += [t for t in (make(analysis) for make in extras) if t is not None]
        tables.extend(profile_tables(runs))
        tables.append(variability_table(analysis))
    if len(failures):
        tables.append(failures_table(failures, max_rows))
    if problems:
        tables.append(problems_table(problems))
    return tables


# --- rendering ----------------------------------------------------------------------------------


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(table: DisplayTable, level: int = 2) -> str:
    """GitHub-flavoured Markdown: heading, table, caption in italics."""
    cols = list(table.frame.columns)
    lines = [f"{'#' * level} {table.title}", ""]
    lines.append("| " + " | ".join(_md_cell(c) for c in cols) + " |")
    lines.append("|" + "|".join("---:" if c in table.right else "---" for c in cols) + "|")
    for row in table.frame.itertuples(index=False):
        lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
    if table.caption:
        lines.append("")
        lines.extend(f"*{_md_cell(c)}*" for c in table.caption)
    return "\n".join(lines) + "\n"


def rich_table(table: DisplayTable, narrow: bool = False) -> Any:
    """A ``rich.table.Table`` (imported here: only the terminal output needs rich);
    ``narrow``: no rules and no edge padding, two spaces between columns (the headline
    tables, which must fit 80 columns)."""
    from rich.table import Table
    from rich.text import Text

    # Text, not str: "[spiral]" in a configuration name is data, not rich markup.
    extra: dict[str, Any] = {"box": None, "padding": (0, 1), "pad_edge": False} if narrow else {}
    t = Table(
        title=Text(table.title, style="bold"),
        title_justify="left",
        caption=Text("\n".join(table.caption), style="dim"),
        caption_justify="left",
        header_style="bold",
        **extra,
    )
    for c in table.frame.columns:
        t.add_column(Text(str(c)), justify="right" if c in table.right else "left", overflow="fold")
    for row in table.frame.itertuples(index=False):
        t.add_row(*(Text(str(v)) for v in row))
    return t
