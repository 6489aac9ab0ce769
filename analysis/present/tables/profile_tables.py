"""Which operations took the time: the profiled ranks' top operations, a table per series.

A run with ``trainer.profile.steps`` carries, per profiled rank, the top operations of its
trace (``profile.top_ops``: by self time on the device where there is one, else the CPU,
communication labelled; scalescope.traces) and the trace's path in its run directory.
Each series gets one table, from its largest scale that was profiled (where communication
and stragglers matter most), from the first run profiled there.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.compute.groups import series_keys, series_labels
from analysis.present.display import DisplayTable, pct, sig
from scalescope.traces import short_name

TOP_ROWS = 10
"""Operations shown per profiled rank."""


def captured(profile: Any) -> bool:
    return isinstance(profile, Mapping) and profile.get("status") == "captured"


def profiled_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """For every series, the first captured run at its largest profiled scale, with a
    ``series`` column (its label)."""
    if "profile" not in runs or runs.empty:
        return runs.iloc[0:0]
    keys = series_keys(runs)
    labels = series_labels(sorted(set(keys), key=str))
    marked = runs.assign(series=[labels[k] for k in keys])
    marked = marked[[captured(p) for p in marked["profile"]]]
    if marked.empty:
        return marked
    ordered = marked.sort_values(["series", "world_size", "job_id"], ascending=[True, False, True])
    return ordered.groupby("series", sort=True).head(1)


def trace_paths(run: Mapping[str, Any]) -> dict[int, str]:
    """Rank -> its trace file, under the run directory the job recorded."""
    profile = run["profile"]
    run_dir = Path(str(run.get("run_dir") or ""))
    traces = profile.get("traces") or {}
    return {int(rank): str(run_dir / str(traces[rank])) for rank in sorted(traces, key=int)}


def profile_index(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """The summary's ``profiles``: per series, the run its table shows and its traces."""
    return [
        {
            "series": run["series"],
            "job_id": run["job_id"],
            "world_size": int(run["world_size"]),
            "table": f"profile_{run['job_id']}",
            "ranks": list(run["profile"].get("ranks") or []),
            "chosen_by": run["profile"].get("chosen_by"),
            "steps": list(run["profile"].get("steps") or []),
            "traces": trace_paths(run),
        }
        for _, run in profiled_runs(runs).iterrows()
    ]


def profile_tables(runs: pd.DataFrame) -> list[DisplayTable]:
    """One table per profiled series: each profiled rank's top operations."""
    return [_table(run) for _, run in profiled_runs(runs).iterrows()]


def _table(run: pd.Series) -> DisplayTable:
    profile = run["profile"]
    top_ops: Mapping[str, Any] = profile.get("top_ops") or {}
    rows = []
    on = ""
    for rank in sorted(top_ops, key=int):
        top = top_ops[rank]
        on = top.get("on", on)
        for op in (top.get("ops") or [])[:TOP_ROWS]:
            rows.append(
                [
                    str(rank),
                    short_name(str(op.get("name", ""))),
                    sig(1e3 * float(op.get("self_s", 0.0)), 3),
                    pct(op.get("share"), 1),
                    str(op.get("calls", "")),
                    "yes" if op.get("communication") else "",
                ]
            )
    where = "device (GPU kernels)" if on == "device" else "CPU (self time)"
    columns = ["Rank", "Operation", "Time (ms)", "Share", "Calls", "Communication"]
    steps = profile.get("steps") or []
    caption = [
        f"{run['series']} at {run['world_size']} devices (job {run['job_id']}): the operations "
        f"that took the most time on the {where} over the profiled steps "
        f"{'-'.join(str(s) for s in steps)}, on ranks chosen by {profile.get('chosen_by')}. "
        "Share: of the trace's total; communication: NCCL or gloo collectives, whatever "
        "they are called. The profiled steps are in the warm-up: no timed figure holds them.",
    ]
    return DisplayTable(
        f"profile_{run['job_id']}",
        f"Top operations: {run['series']}",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=caption,
        right={"Time (ms)", "Share", "Calls"},
    )
