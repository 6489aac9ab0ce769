"""The JSON summary document and ``report.md``: everything shown, in two durable forms.

Both are deterministic functions of the inputs (no generation time, paths relative to the
inputs' parent folder), so they can be golden-tested and diffed between two summaries.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.analyze import Analysis
from analysis.compute.findings import findings
from analysis.present.display import DisplayTable
from analysis.present.plan.text import plan_study, study_markdown
from analysis.present.tables.profile_tables import profile_index
from analysis.present.tables.tables import markdown
from analysis.read.files import Problem
from analysis.read.frame import written
from scalescope.record import SCHEMA_VERSION as RECORD_SCHEMA_VERSION

SUMMARY_SCHEMA_VERSION = 1
"""Version of the summary JSON layout (independent of the record schema it reads)."""

METHODS = {
    "group_ci": (
        "two-sided Student-t interval of the mean over repetitions (n >= 2); for times and "
        "rates, of the log values, back-transformed: an interval of the geometric mean (gmean), "
        "always positive"
    ),
    "ratio_ci": (
        "delta-method interval of a ratio of means on the log scale with Welch-Satterthwaite "
        "degrees of freedom (n >= 2 on both sides)"
    ),
    "headline": (
        "steady state: steady_samples_per_s, the throughput after the warm-up "
        "(trainer.warmup_steps); whole training where a group or its baseline has none "
        "(headline_basis)"
    ),
    "speedup": "mean headline throughput / baseline mean headline throughput",
    "whole_train_speedup": "the same ratio from samples_per_s (all steps, warm-up included)",
    "job_time_speedup": "baseline mean job_time_s / mean job_time_s (start-up included)",
    "parallel_efficiency": "speedup / (world_size / baseline world_size)",
    "karp_flatt": (
        "(1/S - 1/p) / (1 - 1/p), p = world_size / baseline world_size; only for 1 < S <= p, "
        "else null with karp_flatt_note saying why"
    ),
    "amdahl": (
        "least squares of 1/S = f + (1 - f)/p through S(1) = 1; SE of f from residuals; "
        "interval f -/+ t_{(1+c)/2, m-1} SE(f) over m scaled points; null with fit_note when "
        "f is outside [0, 1]"
    ),
    "weak_scaling_efficiency": "mean per-device throughput / baseline mean per-device throughput",
    "precision": (
        "groups whose series differ only in precision (one fp32), same scale: speed_ratio = "
        "mixed / fp32 mean headline throughput with ratio_ci; peak_mem_ratio = mixed / fp32 "
        "mean peak_mem_gib_max; val_loss_rel_diff = (mixed - fp32) / fp32 mean final val loss"
    ),
    "parity": "final val loss relative change > loss tolerance, or val accuracy drop > tolerance",
    "waterfall": (
        "per run at a scale beyond the baseline: lost = 100 (1 - E_run), E_run = steady "
        "per-device throughput / the baseline's mean; part c = 100 (c_run - mean_baseline(c)) "
        "/ t_run, t = 1 / steady per-device throughput, c in seconds per sample per device of "
        "the typical rank: exposed communication (per step, the least gradient wait over the "
        "ranks), communication overlapping backward (calibration), input wait, rank skew and "
        "rotating stragglers (the typical rank's wait for others: persistent, then per-step), "
        "compute; unexplained = lost - the parts; per scale point over the runs with a "
        "breakdown: lost with the scaling table's ratio interval, parts with Student-t "
        "intervals; 'not recorded' (null) where a run has no breakdown"
    ),
    "comm_hidden_share": (
        "clip(1 - exposed_comm_s / allreduce.predicted_step_s, 0, 1): the share of the "
        "all-reduce predicted from busbw and the gradient bytes hidden behind backward"
    ),
    "projection": (
        "with --project: per series, T(N) = k (input + compute) + overlap + exposed "
        "all-reduce(N) + straggler(N) + other, fitted at the largest measured multi-device "
        "scale; all-reduce of DDP's buckets on the fitted latency-bandwidth model (latency "
        "log2 N as a tree's, bandwidth 2(N-1)/N as a ring's), less what backward hides; "
        "an FSDP series has each wrapped unit's all-gathers (before forward, and before "
        "backward unless reshard_after_forward is off; the root, which FSDP2 keeps gathered, "
        "once) and reduce-scatter at (N-1)/N of its bytes in the reduce dtype (as a whole "
        "all-reduce under gloo) in the all-reduce's place, the next unit's gather behind the "
        "current one's "
        "compute on GPUs; straggler = sigma x E[max of N normals]; 95% prediction interval "
        "from draws over repeats (bootstrap), the network band and a model error; see "
        "analysis/compute/projection/project.py"
    ),
}


@dataclass(frozen=True)
class Settings:
    baseline: str | None
    confidence: float
    cv_threshold: float
    loss_tolerance: float
    acc_tolerance: float


def _plain(value: Any) -> Any:
    """JSON-ready: NaN/NA -> None, numpy scalars -> Python, timestamps -> ISO-8601."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, (pd.Timestamp, dt.datetime)):
        return value.isoformat()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _plain_column(series: pd.Series) -> list[Any]:
    """A column as JSON-ready values; numbers converted in bulk, the rest one by one."""
    values = series.tolist()
    if series.dtype == "float64":
        return [v if math.isfinite(v) else None for v in values]
    if str(series.dtype) == "Int64":
        return [None if v is pd.NA else v for v in values]
    return [_plain(v) for v in values]


def records(frame: pd.DataFrame, drop: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts (built column by column: fast for 10,000 runs), less the
    columns nothing was recorded in (:func:`analysis.read.frame.written`)."""
    frame = written(frame)
    cols = [c for c in frame.columns if c not in drop]
    columns = [_plain_column(frame[c]) for c in cols]
    return [dict(zip(cols, values, strict=True)) for values in zip(*columns, strict=True)]


def dumps(doc: dict[str, Any]) -> str:
    """The document as JSON with one table row per line: readable, diffable, and written by
    the C encoder (an indented dump of 10,000 runs takes seconds in pure Python)."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        name = json.dumps(key)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            rows = ",\n    ".join(json.dumps(v, ensure_ascii=False, allow_nan=False) for v in value)
            lines.append(f"  {name}: [\n    {rows}\n  ]{comma}")
        else:
            lines.append(
                f"  {name}: {json.dumps(value, ensure_ascii=False, allow_nan=False)}{comma}"
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


def environment(runs: pd.DataFrame) -> dict[str, Any]:
    """What the runs ran on: devices, nodes, versions (every distinct value), dates."""
    if runs.empty:
        return {}
    versions: dict[str, list[str]] = {}
    for v in runs["versions"]:
        for package, version in (v or {}).items():
            versions.setdefault(package, [])
            if version is not None and str(version) not in versions[package]:
                versions[package].append(str(version))
    nodes = sorted({n for names in runs["node_names"].dropna() for n in str(names).split(",") if n})
    devices = Counter(
        f"{d} ({a})" for d, a in zip(runs["device_name"], runs["accelerator"], strict=True)
    )
    started = runs["started_at"].dropna()
    finished = runs["finished_at"].dropna()
    return {
        "devices": dict(sorted(devices.items())),
        "node_names": nodes,
        "launchers": sorted(runs["launcher"].dropna().unique().tolist()),
        "versions": {k: sorted(v) for k, v in sorted(versions.items())},
        "first_start": _plain(started.min()) if len(started) else None,
        "last_finish": _plain(finished.max()) if len(finished) else None,
        "sweep_ids": sorted(runs["sweep_id"].dropna().unique().tolist()),
    }


def document(
    *,
    inputs: Sequence[str],
    files_read: int,
    runs: pd.DataFrame,
    failures: pd.DataFrame,
    problems: Sequence[Problem],
    analysis: Analysis,
    settings: Settings,
) -> dict[str, Any]:
    """The summary JSON: every number shown anywhere, plus how it was computed."""
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "kind": "scalescope-summary",
        "record_schema_version": RECORD_SCHEMA_VERSION,
        "inputs": list(inputs),
        "files_read": files_read,
        "settings": asdict(settings),
        "methods": METHODS,
        "environment": environment(runs),
        "notes": analysis.notes,
        "runs": records(
            runs, drop=("versions", "diagnosis", "profile", "config", "sharding", "batch")
        ),
        "shared_nodes": records(analysis.overlaps),
        "groups": records(analysis.groups),
        "scaling": records(analysis.scaling),
        "amdahl": records(analysis.amdahl),
        "precision": records(analysis.precision),
        **_strategy(analysis),
        "diagnosis": records(analysis.waterfall.table) if analysis.waterfall else [],
        "diagnosis_findings": findings(analysis.waterfall) if analysis.waterfall else [],
        **_projection(analysis),
        **_plan(analysis, runs),
        "profiles": profile_index(runs),
        "failures": records(failures),
        "problems": [asdict(p) for p in problems],
    }


def _projection(analysis: Analysis) -> dict[str, Any]:
    """summary.json's projection: rows (efficiencies as fractions), the self-check, the
    paragraphs; absent when no projection was asked for."""
    result = analysis.projection
    if result is None:
        return {}
    from analysis.present.report.projection_text import findings as projection_findings

    crossings = [
        {"series": sp.series, "what_if": w, "nodes_below_75": c, "earliest": lo, "latest": hi}
        for sp in result.series
        for w, (c, lo, hi) in sp.crossing.items()
    ]
    return {
        "projection": records(result.table),
        "projection_check": records(result.checks),
        "projection_crossings": crossings,
        "projection_findings": projection_findings(result),
    }


def _strategy(analysis: Analysis) -> dict[str, Any]:
    """summary.json's FSDP vs DDP rows and paragraphs; absent when strategies are not
    compared."""
    if analysis.strategy.empty:
        return {}
    from analysis.present.tables.headline_tables import strategy_findings

    return {
        "strategy": records(analysis.strategy),
        "strategy_findings": strategy_findings(analysis),
    }


def _plan(analysis: Analysis, runs: pd.DataFrame) -> dict[str, Any]:
    """summary.json's plan: the request, the rows (:data:`analysis.compute.plan.PLAN_COLUMNS`)
    and the scaling study per series; absent when no plan was asked for."""
    plan = analysis.plan
    if plan is None:
        return {}
    return {
        "plan_request": asdict(plan.request),
        "plan": records(plan.table),
        "plan_study": plan_study(plan, analysis.scaling, runs),
    }


def _environment_md(env: dict[str, Any]) -> list[str]:
    if not env:
        return ["No finished run: nothing to say about hardware."]
    lines = ["| | |", "|---|---|"]
    devices = ", ".join(f"{k} x {v} run(s)" for k, v in env["devices"].items())
    lines.append(f"| Devices | {devices} |")
    lines.append(f"| Nodes | {', '.join(env['node_names']) or '—'} |")
    lines.append(f"| Launchers | {', '.join(env['launchers'])} |")
    for package, values in env["versions"].items():
        mixed = " **(differs between runs)**" if len(values) > 1 else ""
        lines.append(f"| {package} | {', '.join(values)}{mixed} |")
    lines.append(f"| Runs between | {env['first_start']} and {env['last_finish']} |")
    if env["sweep_ids"]:
        lines.append(f"| Sweeps | {', '.join(env['sweep_ids'])} |")
    return lines


FINDINGS_SECTIONS = (
    ("diagnosis_findings", "findings", "Where the efficiency went, in words", "In words"),
    ("strategy_findings", "strategy", "Sharded (FSDP) vs DDP, in words", "FSDP vs DDP"),
    ("projection_findings", "projection", "Projection, in words", "Projection"),
)
"""The paragraphs per series, in page order: (summary.json's key, report.html's anchor, the
heading, report.html's navigation label). report.md, report.html and the terminal each walk
this one list, so a paragraph cannot be in one and missing from another."""


def report_markdown(
    *,
    doc: dict[str, Any],
    tables: Sequence[DisplayTable],
    charts: Sequence[tuple[str, str]],
) -> str:
    """``report.md``: context, notes, charts (relative links), tables, method."""
    n_runs, n_fail = len(doc["runs"]), len(doc["failures"])
    series = len({r["series"] for r in doc["groups"]})
    out = [
        "# Scaling report",
        "",
        f"{n_runs} finished job(s) in {series} configuration series, {n_fail} failed or "
        f"incomplete; read from {', '.join(f'`{i}`' for i in doc['inputs'])} "
        f"({doc['files_read']} file(s)).",
        "",
        "## Hardware and software",
        "",
        *_environment_md(doc["environment"]),
        "",
    ]
    if doc["notes"]:
        out += ["## Read this first", "", *(f"- {n}" for n in doc["notes"]), ""]
    for key, _, heading, _ in FINDINGS_SECTIONS:
        if doc.get(key):
            out += [f"## {heading}", ""]
            for item in doc[key]:
                out += [f"### {item['series']}", "", item["text"], ""]
    out += study_markdown(doc)
    if charts:
        out += ["## Charts", ""]
        out += [f"![{title}]({path})" for title, path in charts]
        out.append("")
    for table in tables:
        out.append(markdown(table))
    out += [
        "## Method",
        "",
        *(f"- **{k}**: {v}" for k, v in doc["methods"].items()),
        f"- confidence level {doc['settings']['confidence']:.0%}; high-variance flag at CV > "
        f"{doc['settings']['cv_threshold']:.0%}; parity tolerances: loss "
        f"{doc['settings']['loss_tolerance']:.0%} relative, accuracy "
        f"{100 * doc['settings']['acc_tolerance']:g} points.",
        "",
    ]
    return "\n".join(out)
