"""A sweep file's ``plan:``: the training its summary plans (``python -m analysis.summarize
--plan-work``). Checked here where it is read; the summary checks it again against the
records (a unit they do not count) and does the arithmetic (``analysis/compute/plan/``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..schema import option, positive


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
        help="what work counts: samples, tokens (language models) or optimizer steps",
    )
    floor: float = option(
        0.7,
        help="the efficiency the chosen scale keeps at the lower end of its interval",
        check=lambda v: None if 0 < v < 1 else "must be between 0 and 1",
    )
    charge_factor: float | None = option(
        None, help="charged node-hours per node-hour (the centre's charge factor)", check=positive
    )
    price_per_gpu_hour: float | None = option(
        None, help="price of one GPU-hour: the plan's cost", check=positive
    )
