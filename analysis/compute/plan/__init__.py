"""The plan: from efficiency to a decision. ``table`` computes time to train, node-hours and
the charged cost at every measured and projected scale, with intervals; the names a caller
needs are importable from here."""

from analysis.compute.plan.table import (
    DEFAULT_FLOOR,
    HOUR_S,
    PLAN_COLUMNS,
    UNITS,
    PlanError,
    PlanRequest,
    PlanResult,
    answers,
    lower_end,
    make_plan,
    marginal,
    plan_table,
    tokens_per_sample,
    work_in_samples,
)

__all__ = [
    "DEFAULT_FLOOR",
    "HOUR_S",
    "PLAN_COLUMNS",
    "UNITS",
    "PlanError",
    "PlanRequest",
    "PlanResult",
    "answers",
    "lower_end",
    "make_plan",
    "marginal",
    "plan_table",
    "tokens_per_sample",
    "work_in_samples",
]
