"""What Slurm's clients say about partitions and pending jobs, read for a sweep: how many
nodes a partition can give one job and what each node holds (``sinfo``: nodes, CPUs, GPUs),
and which pending reasons will not clear while the sweep waits (``squeue``'s ``%r``).
Parsing and deciding are pure functions; the one call to ``sinfo`` is
:func:`partition_limits`. Nothing here prints or submits.
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
    from .resources import Resources
    from .sweep_config import SweepPlan

SINFO_FORMAT = "%P|%D|%s|%c|%G"
"""Partition (``*`` marks the default), its nodes on this line, its largest job in nodes
(MaxNodes: ``infinite``, a number or ``min-max``), CPUs per node and generic resources per
node (``gpu:a100:4(S:0-1)``, ``(null)``). Asked with ``--exact``: nodes that differ in CPUs
or GRES are on lines of their own, never summed up as ``16+``."""


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of a partition alike in what one job can use on each."""

    nodes: int
    cpus: int | None
    """CPUs per node; None when sinfo does not say exactly."""
    gpus: int | None
    """GPUs per node (GRES ``gpu``); 0 without, None when sinfo gives no count."""

    def holds(self, cpus: int, gpus: int) -> bool:
        """Does one node hold a job's share of a node (unknowns are left to Slurm)?"""
        return (self.cpus is None or self.cpus >= cpus) and (self.gpus is None or self.gpus >= gpus)


@dataclass(frozen=True)
class Partition:
    name: str
    nodes: int
    """Nodes in the partition, whatever their state."""
    max_nodes_per_job: int | None
    """The partition's MaxNodes; None when unlimited."""
    default: bool = False
    groups: tuple[NodeGroup, ...] = ()
    """Its nodes by CPUs and GPUs per node, as sinfo lists them."""

    @property
    def job_limit(self) -> int:
        """The most nodes one job can get here: the partition's size or MaxNodes."""
        return self._capped(self.nodes)

    def _capped(self, nodes: int) -> int:
        return nodes if self.max_nodes_per_job is None else min(nodes, self.max_nodes_per_job)

    def nodes_holding(self, cpus: int, gpus: int) -> int:
        """Its nodes that hold ``cpus`` CPUs and ``gpus`` GPUs each."""
        if not self.groups:
            return self.nodes
        return sum(g.nodes for g in self.groups if g.holds(cpus, gpus))

    def limit_for(self, cpus: int, gpus: int) -> int:
        """The most nodes one job of that share of a node can get here."""
        return self._capped(self.nodes_holding(cpus, gpus))

    def most(self, what: str) -> int | None:
        """The most CPUs (``cpus``) or GPUs (``gpus``) one of its nodes has; None: not known."""
        values = [getattr(g, what) for g in self.groups]
        if not values or None in values:
            return None
        return max(values)


def _max_nodes(text: str) -> int | None:
    # MaxNodes prints as "infinite", a number, or (for a range) "min-max".
    last = text.strip().rsplit("-", 1)[-1]
    return int(last) if last.isdigit() else None


_GRES_SOCKETS = re.compile(r"\([^)]*\)")


def gres_gpus(text: str) -> int | None:
    """GPUs per node in sinfo's ``%G``: ``gpu:a100:4(S:0-1),nvme:1`` -> 4, ``(null)`` -> 0;
    None for a ``gpu`` entry without a count."""
    total = 0
    for entry in _GRES_SOCKETS.sub("", text.strip()).split(","):
        fields = entry.strip().split(":")
        if fields[0] != "gpu":
            continue
        if not fields[-1].isdigit() or len(fields) < 2:
            return None
        total += int(fields[-1])
    return total


def parse_sinfo(text: str) -> dict[str, Partition]:
    """``sinfo --exact --noheader --format=%P|%D|%s|%c|%G`` as {partition: Partition}. sinfo
    writes a partition on several lines where its nodes differ (state, CPUs, GRES): their
    nodes add up. Lines that do not parse are left out."""
    nodes: dict[str, int] = {}
    limits: dict[str, int | None] = {}
    groups: dict[str, list[NodeGroup]] = {}
    default: set[str] = set()
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3 or not parts[0] or not parts[1].isdigit():
            continue
        name = parts[0].rstrip("*")
        if parts[0].endswith("*"):
            default.add(name)
        count = int(parts[1])
        nodes[name] = nodes.get(name, 0) + count
        limits[name] = _max_nodes(parts[2])
        cpus = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else None  # not "16+"
        gpus = gres_gpus(parts[4]) if len(parts) > 4 else None
        groups.setdefault(name, []).append(NodeGroup(count, cpus, gpus))
    return {n: Partition(n, nodes[n], limits[n], n in default, tuple(groups[n])) for n in nodes}


def partition_limits(timeout_s: float = 10.0) -> dict[str, Partition] | None:
    """Every partition's nodes from ``sinfo``; None when sinfo is missing or does not answer
    (then nothing is checked here, and Slurm itself decides)."""
    if shutil.which("sinfo") is None:
        return None
    try:
        proc = subprocess.run(
            ["sinfo", "--exact", "--noheader", f"--format={SINFO_FORMAT}"],
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


def _node_share(label: str, r: Resources) -> tuple[int, int, str]:
    """(CPUs, GPUs, in words) that one job of the shape asks of each of its nodes."""
    cpus = r.tasks_per_node * r.cpus_per_task
    words = (
        f"{r.tasks_per_node} task(s) per node x {r.cpus_per_task} CPU(s) per task = "
        f"{cpus} CPUs per node"
    )
    if r.gpus_per_node:
        words = f"{r.gpus_per_node} GPUs per node"
    return cpus, r.gpus_per_node, f"shape {label}: {words}"


def _too_big_for_a_node(
    what: str, r: Resources, p: Partition, profile_name: str
) -> ConfigError | None:
    """The error for a share of a node larger than every node of ``p`` has, or None."""
    cpus, gpus = r.tasks_per_node * r.cpus_per_task, r.gpus_per_node
    most_gpus = p.most("gpus")
    if gpus and most_gpus is not None and most_gpus < gpus:
        has = f"{most_gpus} GPUs" if most_gpus else "no GPUs (GRES gpu)"
        fix = f"set max_devices_per_node: {most_gpus}" if most_gpus else "use a GPU partition"
        return ConfigError(
            f"{what}, but the nodes of partition {p.name!r} have {has} (sinfo): drop the "
            f"shape, or {fix} in the profile {profile_name!r}"
        )
    most_cpus = p.most("cpus")
    if most_cpus is not None and most_cpus < cpus:
        # gpus_per_node asks one task per GPU: fewer tasks is fewer GPUs, the profile's limit.
        per_node = most_cpus // r.cpus_per_task
        fix = (
            f"set max_devices_per_node: {per_node}"
            if per_node
            else f"set cpus_per_task: {most_cpus}"
        )
        at_most = "at most " if len({g.cpus for g in p.groups}) > 1 else ""
        return ConfigError(
            f"{what}, but the nodes of partition {p.name!r} have {at_most}{most_cpus} CPUs "
            "(sinfo): sbatch would refuse the job (CPU count per node can not be satisfied); "
            f"drop the shape, or {fix} in the profile {profile_name!r}"
        )
    return None


def check_partition_fit(
    shapes: Iterable[tuple[str, Resources]],
    partition: str | None,
    partitions: dict[str, Partition] | None,
    profile_name: str,
) -> None:
    """Refuse, in one line, a shape its partition cannot give one job: more nodes than it
    gives one job (Slurm would accept it and leave it pending with ``PartitionNodeLimit`` for
    ever), or more CPUs (tasks x cpus_per_task) or GPUs per node than its nodes have (sbatch
    refuses it, after the jobs before it were submitted). ``shapes``: (label, resources);
    ``partition``: the profile's (None: the cluster's default; ``a,b``: whichever holds the
    shape). Unknown partitions are left to sbatch, which names them."""
    if not partitions:
        return
    if partition:
        known = [partitions[p] for p in partition.split(",") if p in partitions]
    else:
        known = [p for p in partitions.values() if p.default]
    if not known:
        return
    for label, r in shapes:
        cpus, gpus, what = _node_share(label, r)
        best = max(known, key=lambda p: (p.limit_for(cpus, gpus), p.job_limit))
        if r.nodes <= best.limit_for(cpus, gpus):
            continue
        holding = best.nodes_holding(cpus, gpus)
        if holding == 0:
            error = _too_big_for_a_node(what, r, best, profile_name)
            if error is not None:
                raise error
        if holding < best.nodes and best.limit_for(cpus, gpus) == holding:
            per_node = f"{gpus} GPUs and {cpus} CPUs" if gpus else f"{cpus} CPUs"
            some = f"only {holding} of" if holding else "none of"
            fix = f"set max_nodes: {holding}" if holding else "ask less of each node"
            raise ConfigError(
                f"shape {label}: {r.nodes} nodes of {per_node} each, but {some} the "
                f"{best.nodes} nodes of partition {best.name!r} has that many (sinfo): no job "
                f"of this shape can start there; drop the shape, or {fix} in the profile "
                f"{profile_name!r}"
            )
        limit = best.limit_for(cpus, gpus)
        has = (
            f"has {best.nodes} node(s)"
            if limit == best.nodes
            else f"gives one job at most {limit} node(s) (MaxNodes)"
        )
        raise ConfigError(
            f"shape {label}: {r.nodes} nodes, but partition {best.name!r} {has} (sinfo): Slurm "
            "would leave the job pending with PartitionNodeLimit; drop the shape, or set "
            f"max_nodes: {limit} in the profile {profile_name!r}"
        )


def check_plan_partitions(
    plan: SweepPlan,
    partitions: dict[str, Partition] | None = None,
    *,
    sinfo_timeout_s: float = 10.0,
) -> None:
    """A Slurm sweep's shapes against what its partition can give one job (``sinfo`` asked
    when ``partitions`` is not given); nothing checked for a local sweep or without sinfo."""
    if plan.executor != "slurm" or plan.profile is None or not plan.shapes:
        return
    if partitions is None:
        partitions = partition_limits(timeout_s=sinfo_timeout_s)
    check_partition_fit(
        ((sp.shape.label, sp.resources) for sp in plan.shapes),
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
