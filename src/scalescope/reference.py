"""``scalescope config-reference``: every config key, generated from the dataclasses.

The README's config reference is this command's Markdown output, so the documentation
cannot drift from what the validator accepts (a test compares them).
"""

from __future__ import annotations

import argparse

from . import workloads
from .cluster import ClusterProfile
from .config import TrainConfig
from .schema import describe


def markdown() -> str:
    sections: list[tuple[str, list[tuple[str, str, str, str]]]] = [
        ("Train config (`configs/*.yaml`)", describe(TrainConfig)),
    ]
    for name, spec in sorted(workloads.REGISTRY.items()):
        rows = [(f"workload.{k}", t, d, h) for k, t, d, h in describe(spec.params)]
        sections.append((f"Workload `{name}` ({spec.description})", rows))
    sections.append(("Cluster profile (`configs/clusters/*.yaml`)", describe(ClusterProfile)))
    out: list[str] = []
    for title, rows in sections:
        out += [f"#### {title}", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{k}` | {t} | `{d}` | {h.replace('|', '/')} |" for k, t, d, h in rows]
        out.append("")
    return "\n".join(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    print(markdown())
    return 0
