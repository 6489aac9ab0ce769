"""``--network``'s one reader (:func:`read_network`): a YAML profile or an all-reduce table
(:func:`analysis.read.network_profile.read_profile`), or earlier scalescope runs across nodes
(:func:`profile_from_runs`), of any workload on the same cluster: the network between nodes
their all-reduce sweeps measured, so that a sweep of one node starts from a measured network
rather than from an assumed band."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.compute.projection.step_time.network import Level, network_from_points
from analysis.compute.projection.step_time.step_model import ScalePoint
from analysis.read.network_profile import read_profile
from scalescope.record import MARKER


def read_network(path: str) -> dict[str, Any]:
    """The profile ``--network`` (or a sweep file's ``project_network``) names: scalescope
    runs (a folder of them, or a log holding their records) give the network their
    all-reduce sweeps measured across nodes; any other file is a profile or a table.
    Raises ValueError naming what is wrong."""
    where = Path(path)
    if where.is_dir() or _holds_records(where):
        from analysis.read.frame import load_all

        return profile_from_runs(load_all(path, jobs=1).runs, path)
    return read_profile(path)


def _holds_records(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return MARKER.encode() in f.read(1 << 20)
    except OSError:
        return False  # read_profile names why it cannot be read


def profile_from_runs(runs: pd.DataFrame, where: str) -> dict[str, Any]:
    """The network between nodes that ``runs`` measured: the all-reduce sweep of their
    largest scale across nodes (the most nodes, then ranks; of its series, the first in the
    summary's order), fitted as a sweep's own multi-node runs are
    (:func:`~.step_time.network.network_from_points`), as a profile of a measured bus
    bandwidth, with the clusters the runs name (``clusters``: the projection says so where
    a series ran on another). ValueError where no run across nodes recorded a sweep with a
    bandwidth."""
    from analysis.compute.groups import series_scale_groups
    from analysis.compute.metrics import DEFAULT_CONFIDENCE
    from analysis.compute.run_parts import group_parts

    measured: list[tuple[tuple[int, int], str, Any, Level]] = []
    for _, label, members in series_scale_groups(runs, DEFAULT_CONFIDENCE) if len(runs) else []:
        for g in (g for g in members if g.nodes > 1):
            parts = [p for _, p in group_parts(g) if p.recorded]
            point = ScalePoint(g.world_size, g.nodes, g.devices_per_node, parts, 1)
            level = network_from_points([point]).inter if parts else None
            if level is not None:
                measured.append(((g.nodes, g.world_size), label, g, level))
    if not measured:
        most = int(runs["nodes"].max()) if len(runs) else 0
        raise ValueError(
            f"{where}: no scalescope run across nodes with an all-reduce sweep to take the "
            f"network from ({len(runs)} run(s) read, the most nodes {most}); give runs of 2 "
            "or more nodes, nccl-tests' output across nodes, or a YAML profile"
        )
    top = max(key for key, *_ in measured)
    _, label, g, level = next(m for m in measured if m[0] == top)
    clusters = g.clusters()
    on = f" on {', '.join(clusters)}" if clusters else ""
    return {
        "inter_busbw_gbps": float(level.busbw_gbps),
        "inter_alpha_s": max(float(level.alpha_s), 1e-9),  # finite: a measured level's
        "at_world_size": int(level.at_world),
        "clusters": clusters,
        "source": f"the all-reduce sweeps of the {g.nodes}x{g.devices_per_node} runs in {where} "
        f"({label}{on})",
    }
