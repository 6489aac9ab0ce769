"""Comet scaling dashboards: one *scaling summary* experiment per series.

``python -m analysis.summarize RESULTS --comet [auto|online|offline]`` logs, after the summary
is written, one experiment per series (the jobs' tracking rules: online needs
``COMET_API_KEY`` and a reachable server, else an offline archive when allowed; the key is
read from the environment only and never written anywhere):

* metrics with **step = world size**: ``speedup``, ``efficiency`` (parallel efficiency under
  strong scaling, per-device throughput efficiency under weak) with ``efficiency_ci_low`` /
  ``_high``, ``throughput``, ``throughput_per_device`` and, where the waterfall has them,
  ``lost_pts`` and each part's points (``comm_pts``, ``input_pts``...): Comet's line chart of
  ``efficiency`` against step is the scaling curve, and two clusters' or two settings'
  summaries overlay in one project chart;
* the scaling table (``log_table``), the charts as images, ``report.html`` as an asset;
* parameters: the series' keys; others: its sweeps, clusters and the experiment keys of the
  jobs behind it, to go from the curve to a job; tags ``scaling-summary``, the sweeps and
  the clusters.

comet_ml is imported only here (and only with ``--comet``), through
``scalescope.job.tracking``, which guards every call and redacts the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from .diagnosis import PARTS, finite_number
from .metrics import SERIES_KEYS, efficiency_column

SUMMARY_TAG = "scaling-summary"


def series_metrics(doc: Mapping[str, Any], series: str) -> list[tuple[int, dict[str, float]]]:
    """(world size, metrics) per scale of one series, from the summary document."""
    rows = sorted(
        (r for r in doc["scaling"] if r["series"] == series), key=lambda r: r["world_size"]
    )
    parts = {
        (r["world_size"], r["nodes"]): r for r in doc.get("diagnosis", []) if r["series"] == series
    }
    out = []
    eff = efficiency_column(r["scaling_mode"] for r in rows)
    for r in rows:
        values: dict[str, Any] = {
            "speedup": r["speedup"],
            "efficiency": r[eff],
            "efficiency_ci_low": r[f"{eff}_ci_low"],
            "efficiency_ci_high": r[f"{eff}_ci_high"],
            "throughput": r["samples_per_s_mean"],
            "throughput_per_device": r["samples_per_s_per_device_mean"],
        }
        w = parts.get((r["world_size"], r["nodes"]))
        if w is not None and not w.get("is_baseline"):
            values["lost_pts"] = w.get("lost_pts_mean")
            for part in PARTS:
                values[f"{part}_pts"] = w.get(f"{part}_pts_mean")
        clean = {
            k: v for k, v in ((k, finite_number(v)) for k, v in values.items()) if v is not None
        }
        out.append((int(r["world_size"]), clean))
    return out


def log_scaling_summaries(
    doc: Mapping[str, Any],
    summary_dir: Path,
    runs: pd.DataFrame,
    *,
    mode: str,
    project: str,
    workspace: str | None = None,
) -> list[str]:
    """One experiment per series (see the module doc); returns the lines to print."""
    from scalescope.config import TrackingConfig
    from scalescope.job.tracking import start_tracking

    lines: list[str] = []
    series_names = list(dict.fromkeys(r["series"] for r in doc["scaling"]))
    charts = sorted((summary_dir / "charts").glob("*.png"))
    for series in series_names:
        first = next(r for r in doc["scaling"] if r["series"] == series)
        mine = _runs_of(runs, first)
        sweeps = sorted({str(s) for s in mine.get("sweep_id", []) if isinstance(s, str)})
        clusters = sorted({str(c) for c in mine.get("cluster", []) if isinstance(c, str)})
        keys = sorted(
            {str(k) for k in mine.get("comet_experiment_key", []) if isinstance(k, str) and k}
        )
        cfg = TrackingConfig(
            mode=mode,  # type: ignore[arg-type]
            project=project,
            workspace=workspace,
            offline_dir=str(summary_dir.parent / "comet"),  # beside the jobs' archives
        )
        tracker, line = start_tracking(
            cfg,
            output_dir=str(summary_dir),
            experiment_name=f"scaling summary: {series}",
            tags=[
                SUMMARY_TAG,
                *(f"sweep:{s}" for s in sweeps),
                *(f"cluster:{c}" for c in clusters),
            ],
            params={k: first.get(k) for k in SERIES_KEYS if first.get(k) is not None},
            others={
                "series": series,
                "sweeps": ",".join(sweeps),
                "clusters": ",".join(clusters),
                "job_experiment_keys": ",".join(keys),
            },
        )
        lines.append(f"{series}: {line}")
        if tracker.mode == "off":
            continue
        for world, metrics in series_metrics(doc, series):
            tracker.log_metrics(metrics, step=world)
        table = pd.DataFrame([r for r in doc["scaling"] if r["series"] == series])
        tracker.call("log_table", "scaling.csv", tabular_data=table)
        for png in charts:
            tracker.call("log_image", str(png), name=png.stem)
        report = summary_dir / "report.html"
        if report.exists():
            tracker.call("log_asset", str(report), file_name="report.html")
        tracker.end()
        info = tracker.info()
        where = info.get("url") or info.get("archive") or ""
        error = f"; {info['error']}" if info.get("error") else ""
        lines.append(f"{series}: {info['mode']} summary experiment {where}{error}")
    return lines


def _runs_of(runs: pd.DataFrame, first: Mapping[str, Any]) -> pd.DataFrame:
    """The runs of the series ``first`` (a scaling row) belongs to."""
    if runs.empty:
        return runs
    mask = pd.Series(True, index=runs.index)
    for key in SERIES_KEYS:
        if key in runs and first.get(key) is not None:
            mask &= runs[key].astype(str) == str(first[key])
    return runs[mask]
