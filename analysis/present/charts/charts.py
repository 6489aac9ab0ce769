"""Charts: each function takes a DataFrame from :mod:`~analysis.compute.metrics` and returns
a Figure.

They build ``matplotlib.figure.Figure`` objects directly (no pyplot, so no global state and
no display is needed); they never save, show or print. The command line saves them.

* :func:`speedup_chart`, :func:`efficiency_chart` and :func:`val_loss_chart` take the
  scaling frame (:func:`analysis.compute.metrics.scaling_table`);
* :func:`throughput_chart` and :func:`epoch_time_chart` take the groups frame
  (:func:`analysis.compute.metrics.group_stats`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, LogLocator, NullLocator

from analysis.compute.metrics import (
    DEFAULT_LOSS_TOLERANCE,
    EFFICIENCY_REFERENCE,
    STEADY,
    efficiency_column,
)
from analysis.present.display import devices_header

_SIZE = (7.5, 4.8)


def _reference_line(ax: Any, label: str) -> None:
    """The dashed line at EFFICIENCY_REFERENCE on an efficiency axis in percent."""
    ax.axhline(
        100 * EFFICIENCY_REFERENCE, color="tab:red", linestyle="--", linewidth=1, label=label
    )


def _figure() -> tuple[Figure, Any]:
    fig = Figure(figsize=_SIZE, dpi=110, layout="constrained")
    return fig, fig.add_subplot()


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def _errors(mid: pd.Series, low: pd.Series, high: pd.Series) -> np.ndarray:
    """Asymmetric error bar lengths; zero where there is no interval."""
    lo = (mid - low).to_numpy(dtype=float)
    hi = (high - mid).to_numpy(dtype=float)
    return np.nan_to_num(np.vstack([lo, hi]), nan=0.0).clip(min=0.0)


def _log2_x(ax: Any, values: Sequence[float]) -> None:
    """Log base 2 x axis with a tick at every measured value, labelled as plain integers."""
    ax.set_xscale("log", base=2)
    axis = ax.xaxis
    ticks = sorted({float(v) for v in values if v and v > 0})
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(lambda v, _pos: f"{v:g}")


def _log_limits(ax: Any, values: Sequence[float]) -> None:
    """Log-axis limits from the measured means, not their intervals: an interval of two
    noisy repeats may reach near zero and would squash every line; its whisker is cut."""
    finite = [v for v in values if v > 0 and math.isfinite(v)]
    if finite:
        ax.set_ylim(min(finite) / 2.5, max(finite) * 2.5)


def _label_log2(ax: Any, frame: pd.DataFrame, ylabel: str, title: str) -> None:
    """The labels, title and major grid of a chart against devices on a log2 axis."""
    ax.set_xlabel(f"{devices_header(frame['accelerator'].tolist())} (log2)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)


def _mode_columns(part: pd.DataFrame) -> tuple[str, str]:
    return "speedup", efficiency_column(part["scaling_mode"])


def _legend(ax: Any, n: int) -> None:
    if n > 4:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize="small")


def _legend_below(ax: Any, n: int) -> None:
    """Under the axes (bars reach every corner of the plot area), one column when the labels
    are long; the figure grows by the legend's height instead of squeezing the plot."""
    handles, labels = ax.get_legend_handles_labels()
    ncol = 1 if max((len(label) for label in labels), default=0) > 34 else min(3, max(1, n))
    rows = math.ceil(len(labels) / ncol)
    fig = ax.get_figure()
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + 0.22 * rows)
    ax.legend(
        handles,
        labels,
        fontsize="small",
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=ncol,
        frameon=False,
    )


def _by_series(
    frame: pd.DataFrame, sort: Sequence[str] = ("world_size", "nodes")
) -> list[tuple[Any, str, pd.DataFrame]]:
    """(colour, name, rows) per configuration series in first-seen order, rows sorted by
    ``sort`` (nothing when empty): every chart gives a series the same colour."""
    series = list(dict.fromkeys(frame["series"]))
    out = []
    for color, name in zip(_colors(len(series)), series, strict=True):
        part = frame[frame["series"] == name]
        out.append((color, name, part.sort_values(list(sort)) if sort else part))
    return out


def speedup_chart(scaling: pd.DataFrame) -> Figure:
    """Speedup vs devices per configuration with 95% CI error bars and the ideal line: the
    scaling table's headline speedup, a ratio of steady-state throughputs (whole training
    where a series has no steady state). Log2 axes."""
    fig, ax = _figure()
    series = _by_series(scaling, sort=("world_size",))
    worlds: list[float] = []
    ys: list[float] = []
    for color, name, part in series:
        col, _ = _mode_columns(part)
        x = part["world_size"].astype(float)
        y = part[col].astype(float)
        ax.errorbar(
            x,
            y,
            yerr=_errors(y, part[f"{col}_ci_low"], part[f"{col}_ci_high"]),
            marker="o",
            capsize=3,
            color=color,
            label=name + (" (throughput)" if col != "speedup" else ""),
        )
        worlds += x.tolist()
        ys += y.tolist()
    for color, _name, part in series:
        base = float(part["baseline_world_size"].iloc[0])
        xs = np.array([float(part["world_size"].min()), float(part["world_size"].max())])
        if xs[1] > xs[0]:
            ax.plot(xs, xs / base, linestyle="--", color=color, alpha=0.6, linewidth=1)
            ys += (xs / base).tolist()
    ax.plot([], [], linestyle="--", color="0.4", label="ideal (linear from the baseline)")
    _log2_x(ax, worlds)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:g}")
    _label_log2(ax, scaling, "Speedup vs baseline (log2)", f"Speedup (from {_basis(scaling)})")
    _legend(ax, len(series) + 1)
    return fig


def _grouped_bars(
    ax: Any,
    frame: pd.DataFrame,
    value: str,
    low: str | None,
    high: str | None,
    scale: float = 1.0,
) -> list[str]:
    """Bars per world size (x), one per series; returns the x tick labels."""
    series = _by_series(frame, sort=())
    scales = sorted(
        {(int(w), int(n)) for w, n in zip(frame["world_size"], frame["nodes"], strict=True)}
    )
    width = 0.8 / max(1, len(series))
    for i, (color, name, part) in enumerate(series):
        xs, ys, errs = [], [], []
        for _, r in part.iterrows():
            xs.append(
                scales.index((int(r["world_size"]), int(r["nodes"])))
                + (i - (len(series) - 1) / 2) * width
            )
            ys.append(float(r[value]) * scale)
            if low and high:
                lo, hi = float(r[low]) * scale, float(r[high]) * scale
                e = [ys[-1] - lo, hi - ys[-1]]
                errs.append([0.0 if math.isnan(v) else max(0.0, v) for v in e])
            else:
                errs.append([0.0, 0.0])
        ax.bar(
            xs,
            ys,
            width=width * 0.95,
            color=color,
            label=name,
            yerr=np.array(errs).T if errs else None,
            capsize=3,
            ecolor="0.2",
        )
    ax.set_xticks(range(len(scales)))
    labels = [f"{w}\n({n} node{'s' if n > 1 else ''})" for w, n in scales]
    ax.set_xticklabels(labels)
    return labels


def efficiency_chart(scaling: pd.DataFrame) -> Figure:
    """Parallel efficiency (weak scaling: per-device throughput efficiency) per configuration
    and scale, 95% CI error bars, with a 75% reference line."""
    fig, ax = _figure()
    frame = scaling.copy()
    cols = [_mode_columns(frame[frame["series"] == s]) for s in frame["series"]]
    frame["_eff"] = [r[c[1]] for (_, r), c in zip(frame.iterrows(), cols, strict=True)]
    frame["_lo"] = [r[f"{c[1]}_ci_low"] for (_, r), c in zip(frame.iterrows(), cols, strict=True)]
    frame["_hi"] = [r[f"{c[1]}_ci_high"] for (_, r), c in zip(frame.iterrows(), cols, strict=True)]
    _grouped_bars(ax, frame, "_eff", "_lo", "_hi", scale=100.0)
    _reference_line(ax, f"{EFFICIENCY_REFERENCE:.0%} reference")
    ax.axhline(100, color="0.5", linewidth=0.8)
    # Scale to the measured values, not to the intervals: one wide interval (two noisy
    # repeats) would flatten every bar; its whisker is cut at the top of the plot instead.
    top = float(np.nanmax(frame["_eff"].to_numpy(float)))
    ax.set_ylim(0, max(110.0, 100 * top * 1.15))
    ax.set_xlabel(devices_header(scaling["accelerator"].tolist()))
    ax.set_ylabel("Efficiency (%)")
    modes = set(scaling["scaling_mode"])
    basis = _basis(scaling)
    ax.set_title(
        f"Parallel efficiency (from {basis})"
        if modes == {"strong"}
        else f"Weak-scaling efficiency (from per-device {basis})"
        if modes == {"weak"}
        else f"Efficiency (strong: parallel, weak: per device; from {basis})"
    )
    ax.grid(True, axis="y", alpha=0.3)
    _legend_below(ax, frame["series"].nunique() + 1)
    return fig


def _basis(scaling: pd.DataFrame) -> str:
    """What the headline ratios of these rows are made of, in words (the scaling table's
    ``headline_basis``: the steady state unless a group or its baseline has none)."""
    steady = scaling["headline_basis"] == STEADY
    if steady.all():
        return "steady-state throughput"
    if not steady.any():
        return "whole-training throughput"
    return "steady-state throughput; whole training where there is none"


def throughput_chart(groups: pd.DataFrame) -> Figure:
    """Mean steady-state throughput vs devices (95% CI of the mean; whole training for a
    series without a steady state), with the ideal line from each configuration's smallest
    scale. Log2 axes."""
    fig, ax = _figure()
    series = _by_series(groups)
    worlds: list[float] = []
    values: list[float] = []
    whole = False
    for color, name, part in series:
        x = part["world_size"].astype(float)
        col = "steady_samples_per_s"
        if not part[f"{col}_mean"].notna().all():
            col, name, whole = "samples_per_s", f"{name} (whole training)", True
        y = part[f"{col}_mean"].astype(float)
        ax.errorbar(
            x,
            y,
            yerr=_errors(y, part[f"{col}_ci_low"], part[f"{col}_ci_high"]),
            marker="o",
            capsize=3,
            color=color,
            label=name,
        )
        values += y.tolist()
        x0, y0 = float(x.iloc[0]), float(y.iloc[0])
        xs = np.array([x0, float(x.max())])
        if xs[1] > xs[0]:
            ax.plot(xs, y0 * xs / x0, linestyle="--", color=color, alpha=0.5, linewidth=1)
        worlds += x.tolist()
    ax.plot([], [], linestyle="--", color="0.4", label="ideal (linear from smallest scale)")
    _log2_x(ax, worlds)
    ax.set_yscale("log")
    _log_limits(ax, values)
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:,.0f}" if v >= 10 else f"{v:g}")
    title = "steady state" + ("; whole training where marked" if whole else "")
    _label_log2(ax, groups, "Throughput (samples/s, log scale)", f"Training throughput ({title})")
    _legend(ax, len(series) + 1)
    return fig


def epoch_time_chart(groups: pd.DataFrame) -> Figure:
    """Mean time per epoch (training part) vs devices per configuration, 95% CI error bars.
    Log axes: configurations of very different sizes stay readable side by side, and
    halving per doubling of devices is a straight line."""
    fig, ax = _figure()
    series = _by_series(groups)
    worlds: list[float] = []
    values: list[float] = []
    for color, name, part in series:
        x = part["world_size"].astype(float)
        y = part["mean_epoch_time_s_mean"].astype(float)
        err = _errors(y, part["mean_epoch_time_s_ci_low"], part["mean_epoch_time_s_ci_high"])
        err[0] = np.minimum(err[0], y.to_numpy(float) * 0.999)  # a time is never <= 0
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=color, label=name)
        worlds += x.tolist()
        values += y.tolist()
    _log2_x(ax, worlds)
    ax.set_yscale("log")
    _log_limits(ax, values)
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:g}")
    _label_log2(
        ax,
        groups,
        "Time per epoch (s, log scale)",
        "Time per epoch (training, validation excluded; 95% CI)",
    )
    _legend_below(ax, len(series))
    return fig


def val_loss_chart(scaling: pd.DataFrame, loss_tolerance: float = DEFAULT_LOSS_TOLERANCE) -> Figure:
    """Final validation loss per configuration and scale (mean, min-max whiskers) against
    each configuration's baseline, with the parity tolerance band above it: the check that
    a speedup did not cost model quality."""
    fig, ax = _figure()
    frame = scaling[scaling["val_loss_final_mean"].notna()]
    if frame.empty:
        ax.text(
            0.5,
            0.5,
            "no validation loss recorded",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
        return fig
    series = _by_series(frame, sort=())
    scales = sorted(
        {(int(w), int(n)) for w, n in zip(frame["world_size"], frame["nodes"], strict=True)}
    )
    step = 0.6 / max(1, len(series))
    for i, (color, name, part) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * step
        xs = [
            scales.index((int(w), int(n))) + offset
            for w, n in zip(part["world_size"], part["nodes"], strict=True)
        ]
        y = part["val_loss_final_mean"].astype(float)
        ax.errorbar(
            xs,
            y,
            yerr=_errors(y, part["val_loss_final_min"], part["val_loss_final_max"]),
            fmt="o",
            capsize=3,
            color=color,
            label=name,
        )
        base = part[part["is_baseline"]]
        if len(base):
            b = float(base["val_loss_final_mean"].iloc[0])
            ax.axhline(b, color=color, linestyle="--", linewidth=0.8)
            ax.axhspan(b, b * (1 + loss_tolerance), color=color, alpha=0.12, linewidth=0)
    ax.set_xticks(range(len(scales)))
    ax.set_xticklabels([f"{w}\n({n} node{'s' if n > 1 else ''})" for w, n in scales])
    ax.set_xlim(-0.6, len(scales) - 0.4)
    ax.plot(
        [],
        [],
        linestyle="--",
        color="0.4",
        label=f"baseline (band: +{loss_tolerance:.0%} tolerance)",
    )
    ax.set_xlabel(devices_header(scaling["accelerator"].tolist()))
    ax.set_ylabel("Final validation loss")
    ax.set_title("Validation loss vs baseline (whiskers: min–max over repeats)")
    ax.grid(True, axis="y", alpha=0.3)
    _legend_below(ax, len(series) + 1)
    return fig


CHARTS = {
    "speedup": ("scaling", speedup_chart),
    "efficiency": ("scaling", efficiency_chart),
    "throughput": ("groups", throughput_chart),
    "epoch_time": ("groups", epoch_time_chart),
    "val_loss": ("scaling", val_loss_chart),
}
"""Chart name -> (which frame it takes, function)."""


# --- where the efficiency went (:mod:`analysis.compute.waterfall`) ---------------------------

_STEP_PARTS = (
    ("input_step_s", "input wait", "tab:orange"),
    ("compute_step_s", "compute", "tab:blue"),
    ("overlap_step_s", "communication overlapping backward", "tab:cyan"),
    ("skew_step_s", "rank skew (waiting for the slowest rank)", "tab:purple"),
    ("jitter_step_s", "rotating stragglers (a different rank each step)", "tab:pink"),
    ("comm_step_s", "exposed communication", "tab:red"),
    ("other_step_s", "other (step - the parts)", "0.75"),
)


def step_parts_chart(table: pd.DataFrame, series: str) -> Figure:
    """Per-step time of one series, stacked by part (ms, typical rank, mean over repeats)
    against world size; a scale without a breakdown is labelled 'not recorded', not drawn
    as zero. ``table``: :attr:`analysis.compute.waterfall.Waterfall.table`."""
    from analysis.compute.waterfall import NOT_RECORDED

    fig, ax = _figure()
    part = table[table["series"] == series].sort_values(["world_size", "nodes"])
    labels = [
        f"{w}\n({n} node{'s' if n > 1 else ''})"
        for w, n in zip(part["world_size"], part["nodes"], strict=True)
    ]
    xs = np.arange(len(part))
    bottom = np.zeros(len(part))
    recorded = (part["n_recorded"] > 0).to_numpy()
    for col, name, color in _STEP_PARTS:
        ms = 1000.0 * part[col].to_numpy(float)
        drawn = np.where(recorded & np.isfinite(ms), ms, 0.0)
        ax.bar(xs, drawn, bottom=bottom, color=color, label=name, width=0.6)
        bottom += drawn
    top = float(bottom.max()) if len(bottom) else 0.0
    for x, (_, r), ok in zip(xs, part.iterrows(), recorded, strict=True):
        if not ok:
            ax.text(x, top * 0.05, NOT_RECORDED, ha="center", va="bottom", rotation=90)
        elif not np.isfinite(r["comm_step_s"]):
            note = "exposed comm\nnot recorded"
            ax.text(x, bottom[x], note, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels)
    ax.set_ylim(0, max(top * 1.2, 1e-6))
    ax.set_xlabel(devices_header(part["accelerator"].tolist()))
    ax.set_ylabel("Time per step (ms, typical rank)")
    ax.set_title(f"Where the step time went: {series}", fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)
    _legend_below(ax, len(_STEP_PARTS))
    return fig


def ranks_chart(ranks: pd.DataFrame, series: str) -> Figure:
    """Each rank's per-step input wait, compute and communication wait, stacked (ms), for the
    representative run of one series at its largest recorded scale; the slowest rank is
    marked and named with its node. ``ranks``: ``Waterfall.ranks`` (analysis.compute.waterfall)."""
    fig, ax = _figure()
    part = ranks[ranks["series"] == series].sort_values("rank")
    xs = np.arange(len(part))
    bottom = np.zeros(len(part))
    for col, name, color in (
        ("input_wait_s", "input wait", "tab:orange"),
        ("compute_s", "compute", "tab:blue"),
        ("comm_wait_s", "communication wait (exposed all-reduce + waiting for others)", "tab:red"),
    ):
        ms = 1000.0 * part[col].to_numpy(float)
        ax.bar(xs, ms, bottom=bottom, color=color, label=name, width=0.7)
        bottom += ms
    top = float(bottom.max()) if len(bottom) else 0.0
    for x, (_, r) in zip(xs, part.iterrows(), strict=True):
        if r["is_slowest"]:
            own = 1000.0 * float(r["own_s"])
            ax.annotate(
                f"slowest: rank {r['rank']}\non {r['node']}",
                xy=(x, own),
                xytext=(x, top * 1.08),
                ha="center",
                fontsize=8,
                arrowprops={"arrowstyle": "->", "color": "0.2"},
            )
            ax.bar([x], [own], fill=False, edgecolor="black", linewidth=2, width=0.7)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r}\n{n}" for r, n in zip(part["rank"], part["node"], strict=True)])
    ax.set_ylim(0, max(top * 1.3, 1e-6))
    run = part["run_id"].iloc[0] if len(part) else ""
    world = part["world_size"].iloc[0] if len(part) else 0
    ax.set_xlabel("Rank and node")
    ax.set_ylabel("Time per step (ms)")
    ax.set_title(f"Per rank at {world} devices (run {run}): {series}", fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)
    _legend_below(ax, 3)
    return fig


def projection_chart(scaling: pd.DataFrame, projection: pd.DataFrame, series: str) -> Figure:
    """Efficiency against devices for one series: the measured points with their 95% CI,
    the projection (as measured) with its prediction band, ideal scaling and the 75% line.
    ``projection``: :attr:`analysis.compute.projection.project.ProjectionResult.table`."""
    fig, ax = _figure()
    measured = scaling[scaling["series"] == series].sort_values(["world_size", "nodes"])
    proj = projection[
        (projection["series"] == series) & (projection["what_if"] == "as measured")
    ].sort_values("world_size")
    col = "per_device_throughput_efficiency"
    xs_all = [*measured["world_size"].tolist(), *proj["world_size"].tolist()]
    ax.axhline(100, color="0.4", linewidth=1, label="ideal scaling")
    _reference_line(ax, f"{EFFICIENCY_REFERENCE:.0%}")
    if len(proj):
        # the band joins the largest measured point to the projected ones
        last = measured.iloc[-1] if len(measured) else None
        bx = proj["world_size"].to_numpy(float)
        lo = 100 * proj["efficiency_low"].to_numpy(float)
        hi = 100 * proj["efficiency_high"].to_numpy(float)
        mid = 100 * proj["efficiency"].to_numpy(float)
        if last is not None and last["world_size"] < bx.min():
            e = 100 * float(last[col])
            bx, lo, hi, mid = (
                np.r_[last["world_size"], bx],
                np.r_[e, lo],
                np.r_[e, hi],
                np.r_[e, mid],
            )
        ax.fill_between(bx, lo, hi, color="tab:blue", alpha=0.18, label="projected, 95% PI")
        ax.plot(bx, mid, color="tab:blue", linestyle="-", marker=".", label="projected")
    if len(measured):
        ax.errorbar(
            measured["world_size"],
            100 * measured[col],
            yerr=100
            * _errors(measured[col], measured[f"{col}_ci_low"], measured[f"{col}_ci_high"]),
            fmt="o",
            color="black",
            capsize=3,
            label="measured, 95% CI",
        )
    _log2_x(ax, xs_all)
    ax.set_ylim(0, 110)
    ax.set_xlabel(devices_header(measured["accelerator"].tolist() if len(measured) else []))
    ax.set_ylabel("Efficiency (%)")
    ax.set_title(f"Projected scaling: {series}", fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)
    _legend_below(ax, 4)
    return fig


# --- memory where strategies are compared (:func:`analysis.compute.precision.strategy_table`)


def memory_chart(strategy: pd.DataFrame) -> Figure:
    """Model state one device holds (parameters, gradients, optimizer state; MiB) against
    devices, one line per series of each strategy pair: DDP's stays flat, FSDP's falls as
    1/N. Exact figures, so no error bars. Log2 axes."""
    fig, ax = _figure()
    frames = []
    for side in ("", "ddp_"):
        part = strategy[[f"{side}series", "nodes", "world_size", f"{side}model_state_gib_mean"]]
        frames.append(part.set_axis(["series", "nodes", "world_size", "gib"], axis=1))
    points = pd.concat(frames).drop_duplicates(["series", "nodes", "world_size"])
    points = points[points["gib"].notna()]
    series = _by_series(points)
    values: list[float] = []
    for color, name, part in series:
        y = part["gib"].astype(float) * 1024
        ax.plot(part["world_size"].astype(float), y, marker="o", color=color, label=name)
        values += y.tolist()
    _log2_x(ax, points["world_size"].astype(float).tolist())
    ax.set_yscale("log", base=2)
    _log_limits(ax, values)
    ax.yaxis.set_major_formatter(lambda v, _pos: f"{v:g}")
    ax.set_xlabel("Devices (log2)")
    ax.set_ylabel("Model state per device (MiB, log2)")
    ax.set_title("Model state per device: parameters, gradients, optimizer state")
    ax.grid(True, which="major", alpha=0.3)
    _legend(ax, len(series))
    return fig
