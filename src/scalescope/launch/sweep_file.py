"""A sweep file's keys (configs/sweeps/*.yaml): :class:`SweepConfig`, each key documented
and checked on its own; :mod:`scalescope.launch.sweep_config` plans the sweep from it (the
format and how a sweep runs are described there)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from ..config import Precision, Strategy
from ..config.files import read_yaml
from ..errors import ConfigError
from ..schema import below_one, build, check_axis, non_negative, option, positive
from .plan_spec import PlanSpec
from .resources import Shape

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
"""A sweep's name and id: they name folders."""


@dataclass(frozen=True)
class SweepConfig:
    name: str = option(
        help="sweep family: prefix of the sweep id and the Comet project "
        "(unless the overrides set tracking.project)"
    )
    train_config: str = option(
        help="train config YAML, relative to the sweep file's folder (or absolute)"
    )
    shapes: list[Shape] = option(help="list of {nodes, devices_per_node}; one job per repeat")
    overrides: dict[str, Any] = option(
        {}, help="dotted train-config keys applied to every run, e.g. trainer.max_epochs: 3"
    )
    precisions: list[Precision] | None = option(
        None,
        help='run every shape at each of these trainer.precision values (e.g. ["32", '
        '"bf16-mixed"]); null = the train config\'s precision',
    )
    accumulate_grad_batches: list[int] | None = option(
        None,
        help="run every shape at each of these trainer.accumulate_grad_batches values (e.g. "
        "[1, 4]: the effect of gradient accumulation on efficiency at each scale); null = "
        "the train config's",
    )
    strategies: list[Strategy] | None = option(
        None,
        help="run every shape under each of these trainer.strategy values (e.g. [ddp, "
        "fsdp]: one series each in the summary, compared); null = the train config's",
    )
    repeats: int = option(
        3,
        help="runs per shape, submitted round by round (every shape once per round)",
        check=positive,
    )
    profile_repeat: int | None = option(
        None,
        help="profile this repeat (0-based) of every shape only: the trainer.profile "
        "overrides apply to it, every other repeat runs with trainer.profile.steps=0, so "
        "its timings stay clean; null = every repeat as the overrides say",
        check=non_negative,
    )
    order_seed: int | None = option(
        None,
        help="seed of the shuffled shape order within each round; null = a random one "
        "(recorded in sweep.json)",
    )
    timeout_min: int | None = option(
        None, help="time limit per job in minutes; null = the cluster profile's", check=positive
    )
    project_nodes: list[int] | None = option(
        None,
        help="the summary projects each series to these node counts (e.g. [2, 4, 8]: "
        "`python -m analysis.summarize --project 2,4,8`); null = no projection",
    )
    project_network: str | None = option(
        None,
        help="the projection's network between nodes, as `python -m analysis.summarize "
        "--network` takes it: a YAML with inter_busbw_gbps (measured) or "
        "inter_line_rate_gbit_s (the stated line rate, Gb/s a node), nccl-tests' "
        "all_reduce_perf output across nodes, or a folder of earlier scalescope runs across "
        "nodes on the cluster; relative to this file; null = what the runs measured",
    )
    plan: PlanSpec | None = option(
        None,
        help="the summary plans this training, e.g. {work: 2e11, unit: tokens} (`python -m "
        "analysis.summarize --plan-work 2e11 --plan-unit tokens`); null = no plan",
    )

    def validate(self, where: str) -> None:
        if not NAME.match(self.name):
            raise ConfigError(
                f"name: use letters, digits, '.', '_' and '-' only (it names folders), got "
                f"{self.name!r}"
            )
        if not self.shapes:
            raise ConfigError("shapes: the list is empty; add e.g. {nodes: 1, devices_per_node: 1}")
        seen: set[str] = set()
        for shape in self.shapes:
            if shape.label in seen:
                raise ConfigError(f"shapes: {shape.label} is listed twice; use repeats instead")
            seen.add(shape.label)
        if self.precisions is not None:
            check_axis("precisions", self.precisions)
        if self.strategies is not None:
            check_axis("strategies", self.strategies)
        if self.project_nodes is not None:
            check_axis(
                "project_nodes", self.project_nodes, bad=below_one, wanted="a node count >= 1"
            )
        if self.project_network is not None and not self.project_nodes:
            raise ConfigError(
                "project_network: the summary projects only where project_nodes is set; add "
                "e.g. project_nodes: [2, 4, 8]"
            )
        if self.accumulate_grad_batches is not None:
            check_axis(
                "accumulate_grad_batches",
                self.accumulate_grad_batches,
                bad=below_one,
                wanted="a count >= 1",
            )


def load_sweep_config(path: str | os.PathLike[str]) -> SweepConfig:
    data = read_yaml(path, what="sweep config")
    try:
        return build(SweepConfig, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
