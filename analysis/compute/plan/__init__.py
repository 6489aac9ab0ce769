"""The plan: from efficiency to a decision. ``table`` computes time to train, node-hours, the
charged cost and the model state per device at every measured and projected scale, with
intervals (``memory`` the model state); ``rule`` picks the scale to ask for and says what
would settle an open choice. The names a caller needs are importable from here."""

from analysis.compute.plan.rule import (
    PlanResult,
    answers,
    charged_cost,
    dominated_by,
    lower_end,
    make_plan,
    marginal,
    mark_dominated,
    scale_name,
)
from analysis.compute.plan.table import (
    CHARGES,
    DEFAULT_FLOOR,
    HOUR_S,
    PLAN_COLUMNS,
    UNITS,
    PlanError,
    PlanRequest,
    plan_table,
    tokens_per_sample,
    work_in_samples,
)

__all__ = [
    "CHARGES",
    "DEFAULT_FLOOR",
    "HOUR_S",
    "PLAN_COLUMNS",
    "UNITS",
    "PlanError",
    "PlanRequest",
    "PlanResult",
    "answers",
    "charged_cost",
    "dominated_by",
    "lower_end",
    "make_plan",
    "marginal",
    "mark_dominated",
    "plan_table",
    "scale_name",
    "tokens_per_sample",
    "work_in_samples",
]
