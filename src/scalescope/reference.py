"""``scalescope config-reference``: every config key, generated from the dataclasses.

The config reference in docs/config.md is this command's Markdown output, so the
documentation cannot drift from what the validator accepts (a test compares them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import workloads
from .atomic import write_text_atomic
from .config import TrainConfig
from .errors import ScalescopeError
from .launch.cluster import ClusterProfile
from .launch.plan_spec import PlanSpec
from .launch.sweep_file import SweepConfig
from .schema import describe
from .workloads.user_import import UserParams


def markdown() -> str:
    sections: list[tuple[str, list[tuple[str, str, str, str]]]] = [
        ("Train config (`configs/*.yaml`)", describe(TrainConfig)),
    ]
    for name, spec in sorted(workloads.REGISTRY.items()):
        rows = [(f"workload.{k}", t, d, h) for k, t, d, h in describe(spec.params)]
        sections.append((f"Workload `{name}` ({spec.description})", rows))
    user = [(f"workload.{k}", t, d, h) for k, t, d, h in describe(UserParams)]
    sections.append(("Your own module (`workload.name: package.module:ClassName`)", user))
    sections.append(("Cluster profile (`configs/clusters/*.yaml`)", describe(ClusterProfile)))
    plan = [(f"plan.{k}", t, d, h) for k, t, d, h in describe(PlanSpec)]
    sections.append(("Sweep file (`configs/sweeps/*.yaml`)", describe(SweepConfig) + plan))
    out: list[str] = []
    for title, rows in sections:
        out += [f"#### {title}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{k}` | {t} | `{d}` | {h.replace('|', '/')} |" for k, t, d, h in rows]
        out.append("")
    return "\n".join(out)


START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def splice(document: str) -> str:
    """``document`` with the text between the markers replaced by :func:`markdown`."""
    head, sep1, rest = document.partition(START)
    _, sep2, tail = rest.partition(END)
    if not (sep1 and sep2):
        raise ScalescopeError(f"the markers {START} ... {END} are missing")
    return f"{head}{START}\n{markdown()}\n{END}{tail}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--write",
        metavar="FILE",
        help="replace the text between the config-reference markers of FILE (docs/config.md)",
    )


def run(args: argparse.Namespace) -> int:
    if not args.write:
        print(markdown())
        return 0
    path = Path(args.write)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScalescopeError(f"cannot read {path}: {exc.strerror}") from None
    new = splice(text)
    if new != text:
        write_text_atomic(path, new)
    print(f"{path}: config reference {'updated' if new != text else 'already current'}")
    return 0
