"""A sweep file's ``plan:``: the training its summary plans (``python -m analysis.summarize
--plan-work``). Its keys are checked where the file is read, and :func:`check_plan` checks
it against what the workload's records will count (tokens) before anything is submitted;
the summary does the arithmetic (``analysis/compute/plan/``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigError
from ..schema import option, positive
from ..workloads.tokens import no_tokens


@dataclass(frozen=True)
class PlanSpec:
    """The training the summary plans (``python -m analysis.summarize --plan-work``)."""

    work: float = option(
        help="the training to plan, in unit (e.g. 2e11): time to train and node-hours at "
        "every measured and projected scale",
        check=positive,
    )
    unit: Literal["samples", "tokens", "steps"] = option(
        "samples",
        help="what work counts: samples, tokens (language models: a workload that counts "
        "them, gpt or your module with tokens_per_sample; checked before anything is "
        "submitted) or optimizer steps",
    )
    floor: float = option(
        0.7,
        help="the efficiency per charged unit (against what one unit delivers at its best "
        "measured) the chosen scale keeps at the lower end of its interval, as a fraction",
        check=lambda v: None if 0 < v < 1 else "must be a fraction between 0 and 1 (70% is 0.7)",
    )
    charge: Literal["node", "device"] = option(
        "node",
        help="what the centre charges: node (whole nodes: node-hours) or device (shared "
        "nodes: device-hours)",
    )
    charge_factor: float | None = option(
        None,
        help="charged hours per node-hour (or device-hour): the centre's charge factor",
        check=positive,
    )
    price_per_gpu_hour: float | None = option(
        None, help="price of one GPU-hour: the plan's cost", check=positive
    )


def check_plan(plan: PlanSpec, tokens_per_sample: int | None, workload: str) -> None:
    """Refuse a plan the summary could not make from the records this workload writes: work
    in tokens where one sample's tokens are unknown (:mod:`scalescope.workloads.tokens`).
    ConfigError naming the key, before anything is submitted."""
    if plan.unit == "tokens" and tokens_per_sample is None:
        raise ConfigError(
            f"plan.unit: tokens, but {no_tokens(workload)}; plan in samples or steps instead"
        )
