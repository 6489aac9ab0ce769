"""Display tables: numbers from :mod:`analysis.compute.metrics` formatted for people.

A :class:`DisplayTable` is a frame of strings with a title and caption; the same tables
render as Markdown (report, ``--format markdown``) and as rich tables (terminal). Machine
formats (CSV, JSON) use the numeric frames, never these strings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.analyze import Analysis
from analysis.compute.metrics import (
    STEADY,
    accumulation_label,
    efficiency_column,
    natural_key,
    precision_label,
    series_keys,
    series_labels,
)
from analysis.read.parse import Problem

MISSING = "—"


@dataclass
class DisplayTable:
    name: str
    """Machine name (``summary``, ``speedup``...), also the CSV file stem of its numbers."""
    title: str
    frame: pd.DataFrame
    caption: list[str] = field(default_factory=list)
    right: set[str] = field(default_factory=set)
    """Columns aligned right (numbers)."""


# --- number formatting ------------------------------------------------------------------------


def _nan(x: Any) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def num(x: Any, digits: int = 2) -> str:
    if _nan(x):
        return MISSING
    return f"{float(x):,.{digits}f}"


def sig(x: Any, digits: int = 4) -> str:
    """Four significant digits, no exponent for the sizes met here."""
    if _nan(x):
        return MISSING
    x = float(x)
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def times(x: Any) -> str:
    return MISSING if _nan(x) else f"{float(x):.2f}x"


def pct(x: Any, digits: int = 1) -> str:
    return MISSING if _nan(x) else f"{100 * float(x):.{digits}f}%"


def with_ci(x: Any, lo: Any, hi: Any, kind: str = "x") -> str:
    """``3.57x [3.42, 3.73]`` or ``89.3% [85.4, 93.3]``; the value alone without an interval."""
    if _nan(x):
        return MISSING
    if kind == "%":
        core = pct(x)
        ci = f" [{100 * lo:.1f}, {100 * hi:.1f}]" if not (_nan(lo) or _nan(hi)) else ""
    else:
        core = f"{float(x):.2f}x"
        ci = f" [{lo:.2f}, {hi:.2f}]" if not (_nan(lo) or _nan(hi)) else ""
    return core + ci


def devices_header(accelerators: Sequence[Any]) -> str:
    """ "GPUs" only when every run used GPUs; CPU processes are not GPUs."""
    values = {str(a) for a in accelerators if not _nan(a)}
    return "GPUs" if values == {"gpu"} else "Devices"


# --- the tables ---------------------------------------------------------------------------------


def _truncate(table: DisplayTable, max_rows: int, where: str) -> DisplayTable:
    """Keep the first ``max_rows`` rows (0 = all) and say how many are left out."""
    hidden = len(table.frame) - max_rows
    if max_rows > 0 and hidden > 0:
        table.frame = table.frame.iloc[:max_rows].reset_index(drop=True)
        table.caption.append(f"{hidden:,} more row(s) not shown: every one is in {where}.")
    return table


def summary_table(runs: pd.DataFrame, max_rows: int = 0) -> DisplayTable:
    """One row per job, in series / scale / job-id order (the first ``max_rows``; 0 = all)."""
    dev = devices_header(runs["accelerator"].tolist() if len(runs) else [])
    restarts = bool(len(runs)) and bool((runs["restart_count"].fillna(0) > 0).any())
    columns = [
        "Job ID",
        "Configuration",
        dev,
        "Nodes",
        "Train time (s)",
        "Time/epoch (s)",
        "Throughput (samples/s)",
        "Val loss",
        "Val acc",
    ]
    if restarts:
        columns.append("Restarts")
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
            sig(c["samples_per_s"][i]),
            num(c["val_loss_final"][i], 4),
            num(c["val_acc_final"][i], 4),
        ]
        if restarts:
            reasons = c["restart_reasons"][i] if not _nan(c["restart_reasons"][i]) else ""
            row.append(f"{c['restart_count'][i]}" + (f" ({reasons})" if reasons else ""))
        world = c["world_size"][i]
        order = (labels[key], 0 if _nan(world) else world, natural_key(c["job_id"][i]))
        rows.append((order, row))
    rows.sort(key=lambda x: x[0])
    frame = pd.DataFrame([r for _, r in rows], columns=columns, dtype="object")
    table = DisplayTable(
        "runs",
        "Benchmark results",
        frame,
        caption=[
            "Train time: training part of all epochs, validation excluded (max over ranks); "
            "Time/epoch: its mean per epoch; Val loss/acc: final epoch's."
        ],
        right={
            dev,
            "Nodes",
            "Train time (s)",
            "Time/epoch (s)",
            "Throughput (samples/s)",
            "Val loss",
            "Val acc",
        },
    )
    return _truncate(table, max_rows, "runs.csv and summary.json")


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
            if not _nan(r["train_time_s_ci_low"])
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
    out = []
    s = analysis.scaling
    for series, part in s.groupby("series", sort=False):
        weak = (part["scaling_mode"] == "weak").all()
        dev = devices_header(part["accelerator"].tolist())
        base = part[part["is_baseline"]].iloc[0]
        with_mfu = bool(part["mfu_mean"].notna().any())
        if weak:
            columns = [
                dev,
                "Nodes",
                "n",
                "Throughput (samples/s)",
                "Scaled speedup [95% CI]",
                "Weak-scaling efficiency [95% CI]",
                *(["MFU"] if with_mfu else []),
                "Whole-training efficiency",
                "Job-time speedup",
                "Val loss vs base",
                "Val acc vs base",
                "Parity",
            ]
        else:
            columns = [
                dev,
                "Nodes",
                "n",
                "Throughput (samples/s)",
                "Speedup [95% CI]",
                "Parallel efficiency [95% CI]",
                "Karp-Flatt e",
                *(["MFU"] if with_mfu else []),
                "Whole-training speedup",
                "Job-time speedup",
                "Job-time efficiency",
                "Val loss vs base",
                "Val acc vs base",
                "Parity",
            ]
        rows = []
        for _, r in part.iterrows():
            loss = (
                MISSING
                if _nan(r["val_loss_delta_rel"])
                else f"{100 * r['val_loss_delta_rel']:+.1f}%"
            )
            acc = MISSING if _nan(r["val_acc_delta"]) else f"{100 * r['val_acc_delta']:+.2f} pt"
            mark = " (baseline)" if r["is_baseline"] else ""
            mfu = [pct(r["mfu_mean"])] if with_mfu else []
            head = [
                f"{r['world_size']}{mark}",
                str(r["nodes"]),
                str(r["n"]),
                sig(r["samples_per_s_mean"]),
                with_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
            ]
            if weak:
                rows.append(
                    [
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
                        loss,
                        acc,
                        r["parity"],
                    ]
                )
            else:
                kf = f"{r['karp_flatt']:.3f}" if not _nan(r["karp_flatt"]) else MISSING
                if _nan(r["karp_flatt"]) and not r["is_baseline"] and r["karp_flatt_note"]:
                    kf = f"{MISSING} ({r['karp_flatt_note']})"
                rows.append(
                    [
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
                        loss,
                        acc,
                        r["parity"],
                    ]
                )
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
        out.append(
            DisplayTable(
                "scaling",
                f"Speedup analysis: {series}",
                pd.DataFrame(rows, columns=columns, dtype="object"),
                caption,
                right={
                    dev,
                    "Nodes",
                    "n",
                    "Throughput (samples/s)",
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
        )
    return out


def amdahl_table(analysis: Analysis) -> DisplayTable | None:
    a = analysis.amdahl
    if a.empty:
        return None
    columns = ["Configuration", "Serial fraction f [95% CI]", "Points"]
    for k in (2, 4):
        columns += [f"Predicted speedup at {k}x", f"Predicted efficiency at {k}x"]
    rows = []
    for _, r in a.iterrows():
        f = MISSING if _nan(r["serial_fraction"]) else f"{r['serial_fraction']:.4f}"
        if not _nan(r["serial_fraction_ci_low"]):
            f += f" [{r['serial_fraction_ci_low']:.4f}, {r['serial_fraction_ci_high']:.4f}]"
        if r["fit_note"]:
            f += f" ({r['fit_note']})"
        row = [r["series"], f, str(r["points"])]
        for k in (2, 4):
            s = r[f"predicted_speedup_{k}x"]
            rng = ""
            if not _nan(r[f"predicted_speedup_{k}x_low"]):
                rng = (
                    f" [{r[f'predicted_speedup_{k}x_low']:.2f}, "
                    f"{r[f'predicted_speedup_{k}x_high']:.2f}]"
                )
            world = r[f"world_size_{k}x"]
            row += [
                MISSING if _nan(s) else f"{s:.2f}x{rng} ({world} devices)",
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
        if not _nan(r["peak_mem_ratio"]):
            mem = (
                f"{r['peak_mem_ratio']:.2f}x ({r['peak_mem_gib_mean']:.2f} / "
                f"{r['fp32_peak_mem_gib_mean']:.2f} GiB)"
            )
        loss = MISSING
        if not _nan(r["val_loss_rel_diff"]):
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


def _points(r: Any, part: str) -> str:
    """``6.1 [4.0, 8.2]``; ``not recorded`` where the part was not measured (never 0)."""
    from analysis.compute.waterfall import NOT_RECORDED

    mean = r[f"{part}_pts_mean"]
    if _nan(mean):
        folded = str(r.get("overlap_note") or "") if part == "overlap" else ""
        return folded.split(" (", 1)[0] if folded else NOT_RECORDED
    low, high = r[f"{part}_pts_ci_low"], r[f"{part}_pts_ci_high"]
    ci = "" if _nan(low) or _nan(high) else f" [{_one(low)}, {_one(high)}]"
    return f"{_one(mean)}{ci}"


def _one(x: float) -> str:
    """One decimal, never ``-0.0``."""
    return f"{round(float(x), 1) + 0.0:.1f}"


def diagnosis_table(analysis: Analysis) -> DisplayTable | None:
    """Where the efficiency went: every scale point beyond its series' baseline, the points
    lost and their parts. None when no series has a scale beyond its baseline."""
    from analysis.compute.waterfall import NOT_RECORDED, PARTS

    w = analysis.waterfall
    if w is None:
        return None
    t = w.table[~w.table["is_baseline"]]
    if t.empty:
        return None
    dev = devices_header(t["accelerator"].tolist())
    names = {
        "comm": "Exposed comm",
        "overlap": "Comm overlap",
        "input": "Input wait",
        "skew": "Rank skew",
        "jitter": "Rotating stragglers",
        "compute": "Compute/sample",
        "remainder": "Unexplained",
    }
    columns = [
        "Configuration",
        dev,
        "Nodes",
        "n (breakdown)",
        "Lost (pts) [95% CI]",
        *(f"{names[p]} (pts)" for p in PARTS),
        "Comm hidden",
        "busbw (GB/s)",
    ]
    rows = []
    for _, r in t.iterrows():
        recorded = r["status"] == "recorded"
        lost_text = MISSING if _nan(r["lost_pts_mean"]) else _points(r, "lost")
        hidden = pct(r["hidden_share_mean"], 0) if recorded else NOT_RECORDED
        if recorded and _nan(r["hidden_share_mean"]) and r["hidden_note"]:
            hidden = f"{MISSING} ({r['hidden_note']})"
        busbw = r["busbw_gbps_mean"]
        rows.append(
            [
                r["series"],
                str(r["world_size"]),
                str(r["nodes"]),
                f"{r['n']} ({r['n_recorded']})",
                lost_text,
                *(_points(r, p) if recorded else NOT_RECORDED for p in PARTS),
                hidden,
                (sig(busbw, 3) if not _nan(busbw) else MISSING) if recorded else NOT_RECORDED,
            ]
        )
    caption = [
        "Points of parallel efficiency lost against the series' baseline (the same baseline "
        "and efficiency as the speedup table), split by where the time per sample per device "
        "went, read from the typical rank: part = 100 x (run's seconds per sample - "
        "baseline's) / run's seconds per sample; unexplained = lost - the parts, so they add "
        "up. Negative: a gain. 95% CI: Student-t over the repeats (n >= 2).",
        "Exposed comm: per step and collective (the gradient all-reduce, and the buffer "
        "broadcast for modules with buffers), the least wait of any rank (the last rank to "
        "arrive waits for the collective alone); rank skew and rotating stragglers: "
        "the typical rank's wait beyond it, for one persistently slower rank and for a "
        "different slow rank each step. Comm overlap: backward slowed by the all-reduce "
        "running beside it (calibration windows), taken out of compute where its interval "
        "over the windows lies above 0 (else 'within noise', left in compute). Compute/sample "
        "includes DDP's framework overhead against a 1-device baseline.",
        "Comm hidden: share of the all-reduce predicted from busbw and the gradient bytes "
        "that was not exposed. 'not recorded': the run has no breakdown "
        "(older record, diagnosis off, no steady state), never 0.",
    ]
    missing = sorted({s for s in t["status"] if s != "recorded"})
    caption += [f"Not recorded: {m.removeprefix(NOT_RECORDED).strip(' ()')}." for m in missing]
    return DisplayTable(
        "diagnosis",
        "Where the efficiency went",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=caption,
        right={c for c in columns if c not in ("Configuration",)},
    )


def failure_label(row: pd.Series) -> str:
    """Like a series label, without what only a result knows (epochs, workload parameters)."""
    if _nan(row["config_name"]):
        return "unknown (no start event)"
    name = str(row["config_name"])
    if not _nan(row["workload"]) and row["workload"] != row["config_name"]:
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
        if not _nan(r["evidence_file"]):
            where = f"{r['evidence_file']}:{r['evidence_line']}"
        else:  # no matching line: name the log that was read
            where = str(r["files"]).split(";")[0] if not _nan(r["files"]) else MISSING
        consequences = "; ".join(
            # "<label> at <file:line>: <line>": the line itself is in failures.csv
            c.split(": ", 1)[0]
            for c in ("" if _nan(r["consequences"]) else r["consequences"]).split("\n")
            if c
        )
        rows.append(
            [
                str(r["job_id"]),
                failure_label(r),
                MISSING if _nan(r["world_size"]) else str(r["world_size"]),
                MISSING if _nan(r["nodes"]) else str(r["nodes"]),
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
        tables.append(summary_table(runs, max_rows))
        tables.extend(speedup_tables(analysis))
        if analysis.projection is not None:
            for table in (
                projection_table(analysis.projection),
                projection_check_table(analysis.projection),
            ):
                if table is not None:
                    tables.append(table)
        amdahl = amdahl_table(analysis)
        if amdahl is not None:
            tables.append(amdahl)
        diagnosis = diagnosis_table(analysis)
        if diagnosis is not None:
            tables.append(diagnosis)
        precision = precision_table(analysis)
        if precision is not None:
            tables.append(precision)
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


# --- projection -------------------------------------------------------------------------------


def projection_table(result: Any) -> DisplayTable | None:
    """The projection (analysis.projection): per series every requested node count as
    measured, then each what-if at the largest. None without projected rows."""
    t = result.table
    if t.empty:
        return None
    largest = t.groupby("series", sort=False)["nodes"].transform("max")
    shown = t[(t["what_if"] == "as measured") | (t["nodes"] == largest)]
    columns = [
        "Configuration",
        "What if",
        "Nodes",
        "Devices",
        "Efficiency [95% PI]",
        "Speedup [95% PI]",
        "Samples/s/device",
    ]
    rows = []
    for _, r in shown.iterrows():
        rows.append(
            [
                r["series"],
                r["what_if"],
                str(r["nodes"]),
                str(r["world_size"]),
                with_ci(r["efficiency"], r["efficiency_low"], r["efficiency_high"], "%"),
                with_ci(r["speedup"], r["speedup_low"], r["speedup_high"]),
                sig(r["throughput_per_device"], 3),
            ]
        )
    caption = [
        "Projected from the measured scale points by the step-time model of "
        "analysis/projection.py: compute and input as measured, DDP's buckets on the fitted "
        "latency-bandwidth all-reduce (tree latency, ring bandwidth) less what backward "
        "hides, the expected slowest of N ranks. PI: 2.5-97.5% of draws over the repeats "
        "(bootstrap), the network band and the model error. What-ifs at the largest N; "
        "projection.csv has every one at every N. Efficiency and speedup against the "
        "series' baseline, as in the speedup table.",
    ]
    caption += sorted({f"Network: {n}." for n in t["network"] if n})
    return DisplayTable(
        "projection",
        "Projection to scales not yet run",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=caption,
        right={c for c in columns if c not in ("Configuration", "What if")},
    )


def projection_check_table(result: Any) -> DisplayTable | None:
    """The leave-one-out self-check: the largest measured scale projected from the smaller."""
    c = result.checks
    if c.empty:
        return None
    columns = [
        "Configuration",
        "Devices",
        "Nodes",
        "From devices",
        "Projected [95% PI]",
        "Measured",
        "Error (pts)",
        "Inside",
    ]
    rows = [
        [
            r["series"],
            str(r["world_size"]),
            str(r["nodes"]),
            r["from_world_sizes"],
            with_ci(r["predicted"], r["predicted_low"], r["predicted_high"], "%"),
            pct(r["measured"]),
            f"{r['error_pts']:+.1f}",
            "yes" if r["covered"] else "no",
        ]
        for _, r in c.iterrows()
    ]
    return DisplayTable(
        "projection_check",
        "Projection self-check (leave-one-out)",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=[
            "The largest measured scale projected from the smaller ones alone, against its "
            "measured efficiency: how far the model can be trusted on this cluster."
        ],
        right={"Devices", "Nodes", "Projected [95% PI]", "Measured", "Error (pts)"},
    )


# --- the terminal's default view ----------------------------------------------------------------

SHORT_PARTS = {
    "comm": "exposed comm",
    "overlap": "comm overlap",
    "input": "input wait",
    "skew": "rank skew",
    "jitter": "stragglers",
    "compute": "compute",
}
"""Names of the waterfall's parts in the headline table's last column."""


def _most_lost(analysis: Analysis, series: str, nodes: int, dpn: int) -> str:
    from analysis.compute.waterfall import NOT_RECORDED

    w = analysis.waterfall
    if w is None:
        return ""
    t = w.table
    rows = t[(t["series"] == series) & (t["nodes"] == nodes) & (t["devices_per_node"] == dpn)]
    if rows.empty or bool(rows.iloc[0]["is_baseline"]):
        return ""
    r = rows.iloc[0]
    parts = {p: r[f"{p}_pts_mean"] for p in SHORT_PARTS if not _nan(r[f"{p}_pts_mean"])}
    if not parts:
        return NOT_RECORDED if r["status"] != "recorded" else ""
    part = max(parts, key=lambda p: parts[p])
    return f"{SHORT_PARTS[part]} {parts[part]:.0f}" if parts[part] >= 0.5 else "none"


def headline_tables(analysis: Analysis) -> list[DisplayTable]:
    """The terminal's default: per series one narrow table (it fits 80 columns) of every
    scale's throughput, speedup and efficiency with their intervals, and the waterfall part
    that lost the most points there; the projection (as measured) where one was asked for."""
    s = analysis.scaling
    out: list[DisplayTable] = []
    columns = [
        "Shape",
        "n",
        "Samples/s",
        "Speedup [95% CI]",
        "Efficiency [95% CI]",
        "Most lost (pts)",
    ]
    for series, part in s.groupby("series", sort=False):
        eff = efficiency_column(part["scaling_mode"])
        rows = []
        for _, r in part.iterrows():
            rows.append(
                [
                    f"{r['nodes']}x{r['devices_per_node']}",
                    str(r["n"]),
                    sig(r["samples_per_s_mean"], 3),
                    "baseline"
                    if r["is_baseline"]
                    else with_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"]),
                    with_ci(r[eff], r[f"{eff}_ci_low"], r[f"{eff}_ci_high"], "%"),
                    _most_lost(analysis, str(series), int(r["nodes"]), int(r["devices_per_node"])),
                ]
            )
        out.append(
            DisplayTable(
                "headline",
                str(series),
                pd.DataFrame(rows, columns=columns, dtype="object"),
                right={"n", "Samples/s", "Speedup [95% CI]", "Efficiency [95% CI]"},
            )
        )
    result = analysis.projection
    if result is not None and not result.table.empty:
        plain = result.table[result.table["what_if"] == "as measured"]
        for series, part in plain.groupby("series", sort=False):
            rows = [
                [
                    f"{r['nodes']}x{r['devices_per_node']}",
                    with_ci(r["efficiency"], r["efficiency_low"], r["efficiency_high"], "%"),
                    with_ci(r["speedup"], r["speedup_low"], r["speedup_high"]),
                ]
                for _, r in part.iterrows()
            ]
            out.append(
                DisplayTable(
                    "projection",
                    f"Projected: {series}",
                    pd.DataFrame(
                        rows,
                        columns=["Shape", "Efficiency [95% PI]", "Speedup [95% PI]"],
                        dtype="object",
                    ),
                    right={"Efficiency [95% PI]", "Speedup [95% PI]"},
                )
            )
    return out
