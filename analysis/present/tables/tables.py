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
    precision_label,
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
from analysis.present.tables.headline_tables import strategy_display
from analysis.present.tables.profile_tables import profile_tables
from analysis.present.tables.projection_tables import projection_check_table, projection_table
from analysis.present.tables.runs_tables import (
    failures_table,
    problems_table,
    summary_table,
)
from analysis.read.files import Problem

# --- the tables ---------------------------------------------------------------------------------


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
