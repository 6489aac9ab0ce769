"""The summary's plan options (``--plan-work`` and its companions) and the plan on the
terminal; the arithmetic is :mod:`analysis.compute.plan`'s, the words
:mod:`analysis.present.plan.text`'s."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import pandas as pd

from analysis.commands.common import _fraction, _number, fill, rich_console
from analysis.compute.plan import DEFAULT_FLOOR, PlanRequest
from analysis.present.tables.tables import rich_table

NEGATIVE_NUMBER = re.compile(r"^-\.?\d")
"""What Python 3.13's argparse takes for a negative number (``-2e11`` too); 3.10-3.12 take
``-2e11`` for an option and answer ``--plan-work: expected one argument`` with the usage."""


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The plan's options, in their own group; a negative ``--plan-work -2e11`` is read as the
    number, so the plan's own check refuses it in one line."""
    parser._negative_number_matcher = NEGATIVE_NUMBER  # type: ignore[attr-defined]
    plan = parser.add_argument_group("the plan: time to train and node-hours")
    plan.add_argument(
        "--plan-work",
        type=_number,
        metavar="N",
        help="plan this much training (e.g. 2e11) at every measured and projected scale: time "
        "to train, node-hours, device-hours with intervals, the node count to ask for and a "
        "scaling study for an allocation request (report.md, report.html, plan.csv)",
    )
    plan.add_argument(
        "--plan-unit",
        default="samples",
        metavar="UNIT",
        help="what --plan-work counts: samples, tokens (language models: samples x sequence "
        "length) or steps (optimizer steps: samples x global batch); default samples",
    )
    plan.add_argument(
        "--plan-floor",
        type=_fraction,
        default=DEFAULT_FLOOR,
        metavar="F",
        help="the efficiency per charged unit (against the baseline's) the chosen scale keeps "
        "at the lower end of its interval, as a fraction (default 0.7)",
    )
    plan.add_argument(
        "--plan-charge",
        default="node",
        metavar="WHAT",
        help="what the centre charges: node (whole nodes: node-hours; the default) or device "
        "(shared nodes: device-hours); the floor is judged on throughput per charged unit",
    )
    plan.add_argument(
        "--plan-charge-factor",
        type=float,
        metavar="F",
        help="the centre's charge factor: charged hours = node-hours (or device-hours) x F",
    )
    plan.add_argument(
        "--plan-price",
        type=float,
        metavar="P",
        help="price of one GPU-hour (device-hour): the plan's cost = device-hours x P",
    )


PLAN_ONLY = ("plan_unit", "plan_floor", "plan_charge", "plan_charge_factor", "plan_price")


def plan_request(args: argparse.Namespace, defaults: dict[str, Any]) -> PlanRequest | None:
    """The plan asked for, checked (``ValueError``: one line naming the option, or the sweep
    file's key for a sweep's own summary: ``args.plan_names``); a rate, unit or floor
    without ``--plan-work`` refused. ``defaults``: the parser's."""
    names = plan_names(args)
    if args.plan_work is None:
        given = [n for n in PLAN_ONLY if getattr(args, n) != defaults[n]]
        if given:
            field = ARG_FIELDS[given[0]]
            work = names["work"] + (" N" if names is PLAN_FLAGS else "")
            raise ValueError(f"{names[field]} needs {work}")
        return None
    request = PlanRequest(
        args.plan_work,
        args.plan_unit,
        args.plan_floor,
        args.plan_charge_factor,
        args.plan_price,
        args.plan_charge,
    )
    problem = request.problem()
    if problem is not None:
        raise ValueError(named_problem(problem, names))
    return request


PLAN_FLAGS = {
    "work": "--plan-work",
    "unit": "--plan-unit",
    "floor": "--plan-floor",
    "charge": "--plan-charge",
    "charge_factor": "--plan-charge-factor",
    "price_per_gpu_hour": "--plan-price",
}
"""The plan's settings (:class:`PlanRequest`'s fields) as the command line names them."""
ARG_FIELDS = {
    "plan_unit": "unit",
    "plan_floor": "floor",
    "plan_charge": "charge",
    "plan_charge_factor": "charge_factor",
    "plan_price": "price_per_gpu_hour",
}


def sweep_plan_names(sweep_file: str | None) -> dict[str, str]:
    """The plan's settings as a sweep file names them (``plan.unit``), after the file."""
    where = f"{sweep_file}: " if sweep_file else ""
    return {field: f"{where}plan.{field}" for field in PLAN_FLAGS}


def plan_names(args: argparse.Namespace) -> dict[str, str]:
    """How the user wrote the plan's settings: the options, or a sweep file's keys."""
    return getattr(args, "plan_names", None) or PLAN_FLAGS


def named_problem(problem: str, names: dict[str, str]) -> str:
    """``field: why`` (:meth:`PlanRequest.problem`, a ``PlanError``) with the field as the
    user wrote it; a line that names no field is kept as it is."""
    field, sep, why = problem.partition(": ")
    return f"{names[field]}: {why}" if sep and field in names else problem


TERMINAL_OMITS = ["Mean samples/s", "Model state per device"]
"""Columns report.md and report.html show and the terminal leaves out (with the per-device
efficiency where a node is what is charged: the floor judges the node's)."""


def print_plan(doc: dict[str, Any]) -> None:
    """The plan per series: its table and the answer paragraph, wrapped at the terminal's
    width (nothing without --plan-work)."""
    from analysis.present.plan.text import display_table

    console = rich_console(sys.stdout)
    for s in doc.get("plan_study", []):
        # the terminal's table: the decision's columns (throughput and job costs: report.md)
        frame = pd.DataFrame(s["rows"], columns=s["columns"])
        omit = [*TERMINAL_OMITS]
        if "Eff./node" in frame.columns:
            omit.append("Eff./device")
        frame = frame.drop(columns=[c for c in omit if c in frame.columns])
        console.print()
        console.print(rich_table(display_table(s["series"], frame), narrow=True))
        text = fill(console, s["answer"])
        console.print(text, markup=False, soft_wrap=True)
