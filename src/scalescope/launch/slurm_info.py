"""What Slurm's clients say about partitions and pending jobs, read for a sweep: how many
nodes a partition can give one job (``sinfo``), and which pending reasons will not clear
while the sweep waits (``squeue``'s ``%r``). Parsing and deciding are pure functions; the
one call to ``sinfo`` is :func:`partition_limits`. Nothing here prints or submits.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from .sweep_config import SweepPlan

SINFO_FORMAT = "%P|%D|%s"
"""Partition (``*`` marks the default), its nodes on this line, and its largest job in nodes
(MaxNodes: ``infinite`` or a number)."""


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: int
    """Nodes in the partition, whatever their state."""
    max_nodes_per_job: int | None
    """The partition's MaxNodes; None when unlimited."""
    default: bool = False

    @property
    def job_limit(self) -> int:
        """The most nodes one job can get here: the partition's size or MaxNodes."""
        if self.max_nodes_per_job is None:
            return self.nodes
        return min(self.nodes, self.max_nodes_per_job)


def _max_nodes(text: str) -> int | None:
    # MaxNodes prints as "infinite", a number, or (for a range) "min-max".
    last = text.strip().rsplit("-", 1)[-1]
    return int(last) if last.isdigit() else None


def parse_sinfo(text: str) -> dict[str, Partition]:
    """``sinfo --noheader --format=%P|%D|%s`` as {partition: Partition}. sinfo writes a
    partition on several lines where its nodes differ (state, features): their nodes add up.
    Lines that do not parse are left out."""
    nodes: dict[str, int] = {}
    limits: dict[str, int | None] = {}
    default: set[str] = set()
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit():
            continue
        name = parts[0].rstrip("*")
        if parts[0].endswith("*"):
            default.add(name)
        nodes[name] = nodes.get(name, 0) + int(parts[1])
        limits[name] = _max_nodes(parts[2])
    return {n: Partition(n, nodes[n], limits[n], n in default) for n in nodes}


def partition_limits(timeout_s: float = 10.0) -> dict[str, Partition] | None:
    """Every partition's nodes from ``sinfo``; None when sinfo is missing or does not answer
    (then nothing is checked here, and Slurm itself decides)."""
    if shutil.which("sinfo") is None:
        return None
    try:
        proc = subprocess.run(
            ["sinfo", "--noheader", f"--format={SINFO_FORMAT}"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return parse_sinfo(proc.stdout) or None


def check_partition_nodes(
    shapes: Iterable[tuple[str, int]],
    partition: str | None,
    partitions: dict[str, Partition] | None,
    profile_name: str,
) -> None:
    """Refuse, in one line, a shape of more nodes than its partition can give one job: Slurm
    would accept it and leave it pending with ``PartitionNodeLimit`` for ever. ``shapes``:
    (label, nodes); ``partition``: the profile's (None: the cluster's default; ``a,b``: the
    larger of them). Unknown partitions are left to sbatch, which names them."""
    if not partitions:
        return
    if partition:
        known = [partitions[p] for p in partition.split(",") if p in partitions]
    else:
        known = [p for p in partitions.values() if p.default]
    if not known:
        return
    best = max(known, key=lambda p: p.job_limit)
    for label, nodes in shapes:
        if nodes <= best.job_limit:
            continue
        has = (
            f"has {best.nodes} node(s)"
            if best.job_limit == best.nodes
            else f"gives one job at most {best.job_limit} node(s) (MaxNodes)"
        )
        raise ConfigError(
            f"shape {label}: {nodes} nodes, but partition {best.name!r} {has} (sinfo): Slurm "
            "would leave the job pending with PartitionNodeLimit; drop the shape, or set "
            f"max_nodes: {best.job_limit} in the profile {profile_name!r}"
        )


def check_plan_partitions(plan: SweepPlan, partitions: dict[str, Partition] | None = None) -> None:
    """A Slurm sweep's shapes against what its partition can give one job (``sinfo`` asked
    when ``partitions`` is not given); nothing checked for a local sweep or without sinfo."""
    if plan.executor != "slurm" or plan.profile is None or not plan.shapes:
        return
    if partitions is None:
        partitions = partition_limits()
    check_partition_nodes(
        ((sp.shape.label, sp.shape.nodes) for sp in plan.shapes),
        plan.shapes[0].resources.partition,
        partitions,
        plan.profile.name,
    )


# --- pending reasons ----------------------------------------------------------------------------

STUCK_REASONS = {
    "PartitionNodeLimit": "more nodes than its partition gives one job",
    "PartitionTimeLimit": "a longer time limit than its partition allows",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "BadConstraints": "constraints no node satisfies",
    "DependencyNeverSatisfied": "a job it depends on ended the wrong way",
    "InvalidAccount": "an account it may not use",
    "InvalidQOS": "a QOS it may not use",
    "AccountNotAllowed": "an account its partition does not allow",
    "QOSNotAllowed": "a QOS its partition does not allow",
    "PartitionConfig": "more than its partition is configured to give",
}
"""Pending reasons that do not clear while a sweep waits, with what they mean: the job asks
for what its partition, account or QOS never gives, or for nodes that are out of service."""

_PER_JOB_LIMIT = re.compile(r"^(Assoc|QOS)Max\w*PerJob\w*$")
"""A per-job maximum of the account's association or of the QOS (``AssocMaxNodesPerJobLimit``,
``QOSMaxWallDurationPerJobLimit``...): the job is larger than it. Aggregate limits
(``AssocGrp*``, ``QOSGrp*``, per-user job counts) clear as other jobs end."""


def reason_code(reason: str | None) -> str:
    """``ReqNodeNotAvail, UnavailableNodes:node3`` -> ``ReqNodeNotAvail``; ``(None)`` -> ''."""
    code = (reason or "").strip().strip("()").split(",", 1)[0].strip()
    return "" if code == "None" else code


def stuck_reason(reason: str | None) -> str | None:
    """What a pending reason that will not clear by itself means; None for one that will
    (``Resources``, ``Priority``, ``Dependency``, aggregate limits) or none."""
    code = reason_code(reason)
    if code in STUCK_REASONS:
        return STUCK_REASONS[code]
    if _PER_JOB_LIMIT.match(code):
        owner = "account's association" if code.startswith("Assoc") else "QOS"
        return f"more than its {owner} allows one job"
    return None


def pending_note(job_id: str, state: str, reason: str | None) -> str | None:
    """The live view's line for a job pending for a reason that will not clear:
    ``pending: PartitionNodeLimit (more nodes than ...); scancel 12 cancels it``."""
    if state != "PENDING":
        return None
    meaning = stuck_reason(reason)
    if meaning is None:
        return None
    text = (reason or "").strip().strip("()")
    return f"pending: {text} ({meaning}); it waits until that changes: scancel {job_id} cancels it"
