"""The whole analysis of a runs frame, in one call: what analysis.compute's ``groups``,
``metrics`` (scaling), ``amdahl``, ``precision``, ``waterfall`` and ``projection`` compute,
and the "Read this first" notes (``findings`` words the waterfall's, ``batch_notes`` a user's
module's record warnings). Each of them is imported here and none imports this module, so the
computing modules never import each other in a circle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.compute.amdahl import amdahl_table, serial_fraction_notes
from analysis.compute.batch_notes import batch_notes
from analysis.compute.findings import diagnosis_notes
from analysis.compute.groups import (
    DEFAULT_CONFIDENCE,
    DEFAULT_CV_THRESHOLD,
    STEADY,
    group_stats,
    series_scale_groups,
)
from analysis.compute.metrics import (
    DEFAULT_ACC_TOLERANCE,
    DEFAULT_LOSS_TOLERANCE,
    SUPERLINEAR_EFFICIENCY,
    WARMUP_SHARE_NOTE,
    BaselineSpec,
    scaling_table,
)
from analysis.compute.plan import PlanRequest, PlanResult, make_plan
from analysis.compute.precision import (
    PRECISION_COLUMNS,
    STRATEGY_COLUMNS,
    precision_table,
    strategy_table,
)
from analysis.compute.projection import project as projection
from analysis.compute.waterfall import Waterfall, waterfall
from analysis.read.cpu_load import cpu_load_notes
from analysis.read.overlap import OVERLAP_COLUMNS, node_overlaps, overlap_notes, shape_label


@dataclass(frozen=True)
class ProjectionRequest:
    """``--project``: the node counts, and optionally devices per node and a network profile."""

    nodes: Sequence[int]
    devices_per_node: int | None = None
    profile: Mapping[str, Any] | None = None


@dataclass
class Analysis:
    groups: pd.DataFrame
    scaling: pd.DataFrame
    amdahl: pd.DataFrame
    notes: list[str]
    precision: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PRECISION_COLUMNS))
    """Mixed precision vs fp32 (:func:`precision_table`); empty without such pairs."""
    waterfall: Waterfall | None = None
    """Where each scale point lost its efficiency (:func:`analysis.compute.waterfall.waterfall`)."""
    projection: Any = None
    """The projection to scales not run (:func:`~analysis.compute.projection.project.project`),
    if asked."""
    overlaps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=OVERLAP_COLUMNS))
    """Runs timed while another job ran on their node (:func:`node_overlaps`); empty if none."""
    plan: PlanResult | None = None
    """Time to train, node-hours and the scale to ask for (:func:`make_plan`), if asked."""
    strategy: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STRATEGY_COLUMNS))
    """FSDP vs DDP at each scale both ran (:func:`strategy_table`); empty without such pairs."""


def analyze(
    runs: pd.DataFrame,
    *,
    baseline: BaselineSpec | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    cv_threshold: float = DEFAULT_CV_THRESHOLD,
    loss_tolerance: float = DEFAULT_LOSS_TOLERANCE,
    acc_tolerance: float = DEFAULT_ACC_TOLERANCE,
    project: ProjectionRequest | None = None,
    plan: PlanRequest | None = None,
) -> Analysis:
    """The whole result in one call: groups, scaling and Amdahl tables, the precision
    comparison, the waterfall, the projection where asked, and the sentences a reader must
    not miss; the plan where asked (:class:`~analysis.compute.plan.PlanError` when its unit
    does not fit the records)."""
    groups = group_stats(runs, confidence=confidence, cv_threshold=cv_threshold)
    scaling = scaling_table(
        runs,
        baseline=baseline,
        confidence=confidence,
        cv_threshold=cv_threshold,
        loss_tolerance=loss_tolerance,
        acc_tolerance=acc_tolerance,
    )
    amdahl = amdahl_table(scaling, confidence=confidence)
    overlaps = node_overlaps(runs)
    notes = [
        *overlap_notes(overlaps),
        *cpu_load_notes(runs, overlaps),
        *_series_notes(scaling),
        *batch_notes(runs, confidence),
        *_early_stop_notes(runs, confidence),
        *_scale_notes(scaling, cv_threshold),
        *serial_fraction_notes(scaling, amdahl),
        *_repeat_notes(groups),
    ]
    precision = precision_table(runs, confidence=confidence)
    falls = waterfall(runs, baseline=baseline, confidence=confidence)
    notes += diagnosis_notes(falls)
    result = Analysis(groups, scaling, amdahl, notes, precision, falls, overlaps=overlaps)
    result.strategy = strategy_table(runs, scaling, confidence=confidence)
    if project is not None:
        result.projection = projection.project(
            runs,
            project.nodes,
            devices_per_node=project.devices_per_node,
            profile=project.profile,
            baseline=baseline,
            confidence=confidence,
        )
        result.notes += projection.check_notes(result.projection)
    if plan is not None:
        projected = result.projection.table if result.projection is not None else None
        result.plan = make_plan(runs, scaling, plan, projection=projected, confidence=confidence)
    result.notes += _settle_notes(result)
    return result


def _repeats_text(m: Any, rows: str) -> str:
    if m is None or (isinstance(m, float) and math.isnan(m)):
        return f"repeat {rows} to size how many runs would settle it (one run has no spread)"
    return f"about {int(m)} repeats of {rows}, at the spread measured, would settle it"


def _settle_notes(result: Analysis) -> list[str]:
    """Where the intervals leave a question open, what would settle it: which strategy scales
    better (at the largest scale both ran), and the plan's choice of scale."""
    notes: list[str] = []
    for series, part in result.strategy.groupby("series", sort=False):
        r = part.sort_values(["world_size", "nodes"]).iloc[-1]
        e, lo, hi = r["efficiency"], r["efficiency_ci_low"], r["efficiency_ci_high"]
        d, dlo, dhi = r["ddp_efficiency"], r["ddp_efficiency_ci_low"], r["ddp_efficiency_ci_high"]
        if any(pd.isna(v) for v in (e, d)):
            continue
        if any(pd.isna(v) for v in (lo, hi, dlo, dhi)):
            shape = f"{r['nodes']}x{r['devices_per_node']}"
            notes.append(
                f"{series} against DDP at {shape}: a scale ran once, so there is no interval "
                "to say which scales better; repeat every scale of both (2 runs at least)."
            )
            continue
        if lo > dhi or dlo > hi:
            continue
        shape = f"{r['nodes']}x{r['devices_per_node']}"
        notes.append(
            f"{series} against DDP at {shape}: the intervals overlap, so these repeats do not "
            "settle which scales better; "
            + _repeats_text(r["repeats_to_settle"], "every scale of both")
            + "."
        )
    for a in result.plan.answers if result.plan is not None else []:
        row = a["open"]
        if a["settled"] or row is None:
            continue
        shape = shape_label(row["nodes"], row["devices_per_node"])
        how = (
            f"measuring {shape} would settle it"
            if row["source"] == "projected"
            else _repeats_text(a["open_repeats"], f"{shape} and its baseline")
        )
        notes.append(
            f"{a['series']}: the plan's choice is open: {shape} keeps the efficiency floor at "
            f"the centre of its interval but not at its lower end; {how}."
        )
    return notes


def _series_notes(scaling: pd.DataFrame) -> list[str]:
    """Per series: a baseline other than a 1-device run, and runs of different versions."""
    notes: list[str] = []
    for series, part in scaling.groupby("series", sort=False):
        note = part["baseline_note"].iloc[0]
        if note != "1-device run":
            notes.append(f"{series}: {note}.")
        mixed = part["mixed_versions"].iloc[0]
        if mixed:
            notes.append(
                f"{series}: runs used different versions ({mixed}); a speedup between them "
                "may be a software change, not scaling."
            )
    return notes


def _stopped_itself(row: Mapping[str, Any]) -> bool:
    """Whether a run trained fewer epochs than it was set to (``planned_epochs``) without
    reaching its step budget: the module stopped itself (an EarlyStopping, its own
    ``trainer.should_stop``). Runs that scalescope stopped early are not in the frame."""
    epochs, planned, steps, budget = (
        row.get(k) for k in ("epochs", "planned_epochs", "steps", "max_steps")
    )
    if pd.isna(epochs) or pd.isna(planned) or not epochs < planned:
        return False
    return pd.isna(budget) or pd.isna(steps) or steps < budget


def _early_stop_notes(runs: pd.DataFrame, confidence: float) -> list[str]:
    """Per series and scale, the runs their module stopped before the epochs they were set
    to train: they stay in their series (its key is the epochs set), and the note says so."""
    if runs.empty or "planned_epochs" not in runs.columns:
        return []
    if not any(_stopped_itself(r) for r in runs.to_dict("records")):
        return []  # most summaries: no need to group the runs again
    notes: list[str] = []
    for _key, label, members in series_scale_groups(runs, confidence):
        for g in members:
            rows = g.rows.to_dict("records")
            stopped = [r for r in rows if _stopped_itself(r)]
            if not stopped:
                continue
            trained = ", ".join(str(int(r["epochs"])) for r in stopped)
            planned = int(stopped[0]["planned_epochs"])
            notes.append(
                f"{label} at {shape_label(g.nodes, g.devices_per_node)}: {len(stopped)} of "
                f"{len(rows)} run(s) stopped before the {planned} epochs set, after {trained}: "
                "the module stopped itself (an EarlyStopping, or its own trainer.should_stop). "
                "Their throughput stands; their warm-up is a larger share of a shorter training."
            )
    return notes


def _scale_notes(scaling: pd.DataFrame, cv_threshold: float) -> list[str]:
    """Per scale point, kind by kind: throughput that varies, no steady state, a long
    warm-up, worse validation quality, a superlinear efficiency."""
    notes: list[str] = []
    for _, row in scaling[scaling["high_variance"]].iterrows():
        notes.append(
            f"{row['series']} at {row['nodes']}x{row['devices_per_node']}: throughput varies "
            f"{row['headline_cv']:.0%} between repeats (CV > {cv_threshold:.0%}); "
            "treat its speedup with care."
        )
    for _, row in scaling[scaling["headline_basis"] != STEADY].iterrows():
        notes.append(
            f"{row['series']} at {row['nodes']}x{row['devices_per_node']}: no steady state "
            "recorded for it or its baseline (training ended within the warm-up, or older "
            "records): its figures cover whole training, warm-up included."
        )
    heavy = scaling[scaling["warmup_share_mean"] > WARMUP_SHARE_NOTE]
    for _, row in heavy.iterrows():
        notes.append(
            f"{row['series']} at {row['nodes']}x{row['devices_per_node']}: the warm-up is "
            f"{row['warmup_share_mean']:.0%} of training time; the steady state rests on "
            "few steps: train longer (more epochs or steps) for a firmer figure."
        )
    for _, row in scaling[scaling["parity"].str.startswith("worse")].iterrows():
        notes.append(
            f"{row['series']} at {row['nodes']}x{row['devices_per_node']}: {row['parity']} than "
            f"the baseline beyond tolerance; {_worse_and(row['speedup'])}"
        )
    superlinear = scaling[
        (scaling["scaling_mode"] != "weak")
        & ~scaling["is_baseline"]
        & (scaling["parallel_efficiency"] > SUPERLINEAR_EFFICIENCY)
    ]
    for _, row in superlinear.iterrows():
        notes.append(
            f"{row['series']} at {row['nodes']}x{row['devices_per_node']}: parallel efficiency "
            f"{row['parallel_efficiency']:.0%} (superlinear). Usually a slow or contended "
            "baseline (shared cores, other jobs, fewer threads per process) or a per-device "
            "problem that now fits in cache: check before quoting."
        )
    return notes


def _worse_and(speedup: float) -> str:
    """What a worse validation result adds to the run's speed, which it qualifies."""
    if math.isfinite(speedup) and speedup > 1:
        return f"faster but worse is not a speedup ({speedup:.2f}x)."
    if math.isfinite(speedup) and speedup < 1:
        return f"and slower too ({speedup:.2f}x)."
    return "check the run before quoting its figures."


def _repeat_notes(groups: pd.DataFrame) -> list[str]:
    """How many configurations ran once, so have no interval."""
    single = groups[groups["n"] < 2]
    if not len(single):
        return []
    return [
        f"{len(single)} of {len(groups)} configuration(s) ran once: no confidence interval "
        "without repeats."
    ]
