"""A cluster's network for the projection (``--network FILE``): a YAML profile, or the table
nccl-tests' ``all_reduce_perf`` (or ``benchmarks/allreduce.py``) printed across nodes."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, NamedTuple

from scalescope.errors import yaml_problem


def read_profile(path: str) -> dict[str, Any]:
    """A ``--network`` file: YAML with either ``inter_busbw_gbps`` (GB/s, the bus bandwidth
    measured across nodes) or ``inter_line_rate_gbit_s`` (Gb/s, the inter-node line rate a
    node's NICs are stated at, all of them together: an upper bound, not what is achieved),
    and optionally ``inter_alpha_s``, ``at_world_size`` and ``source``; or the output of
    nccl-tests' ``all_reduce_perf`` (or of ``benchmarks/allreduce.py``) run at the target
    size, to which the latency-bandwidth model is fitted. Raises ValueError naming what is
    wrong."""
    import yaml

    from scalescope.config.files import load_yaml_text

    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    table = allreduce_table(text)  # first: srun's "0: " prefixes make it a YAML mapping
    if table is not None:
        return _profile_from_table(path, table)
    try:
        data = load_yaml_text(text)  # as people mean it: 1e9 is a number, as in a config
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not YAML: {yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: neither a YAML mapping with inter_busbw_gbps or inter_line_rate_gbit_s "
            "nor an all-reduce table (nccl-tests' all_reduce_perf output)"
        )
    known = {"inter_busbw_gbps", LINE_RATE_KEY, "inter_alpha_s", "at_world_size", "source"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"{path}: unknown key(s) {', '.join(map(str, unknown))}; known: "
            f"{', '.join(sorted(known))}"
        )
    given = [k for k in ("inter_busbw_gbps", LINE_RATE_KEY) if data.get(k) is not None]
    if not given:
        raise ValueError(
            f"{path}: inter_busbw_gbps (measured, GB/s) or {LINE_RATE_KEY} (the stated line "
            "rate, Gb/s a node) is missing"
        )
    if len(given) > 1:
        raise ValueError(
            f"{path}: inter_busbw_gbps (measured) and {LINE_RATE_KEY} (stated) are both "
            "given; keep the one you have"
        )
    for key in ("inter_busbw_gbps", LINE_RATE_KEY, "inter_alpha_s"):
        value = data.get(key)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"{path}: {key} must be a positive number, got {value!r}")
    at = data.get("at_world_size")
    if at is not None and (isinstance(at, bool) or not isinstance(at, int) or at < 2):
        raise ValueError(f"{path}: at_world_size must be an integer >= 2, got {at!r}")
    # the projection's note names where the figure came from: the file, unless it says
    return {**data, "source": data.get("source") or Path(path).name}


LINE_RATE_KEY = "inter_line_rate_gbit_s"
"""A profile's stated inter-node line rate (Gb/s a node, every NIC together), as a site's
documentation gives it: the projection spans the share of it that published clusters
achieved, never the whole of it."""


_NCCL_ROW = (
    r"(\d+)\s+\d+\s+[a-z0-9_]+\s+[a-z]+\s+(?:-?\d+\s+)?"  # size, count, type, redop, root
    r"(\d+(?:\.\d+)?)\s+[\d.]+\s+[\d.]+\s+(?:\d+|N/A)"  # time (us), algbw, busbw, #wrong
)
"""A data row of nccl-tests' all_reduce_perf: size, count, type, redop, [root,] the
out-of-place time (us), algbw, busbw, #wrong -- after any prefix srun or mpirun adds."""
_TABLE_ROW = r"^\s*(\d+)\s+(\d+(?:\.\d+)?)\s+[\d.]+\s+[\d.]+\s*$"
"""A data row of benchmarks/allreduce.py: size, time (us), algbw, busbw."""


class AllreduceTable(NamedTuple):
    """An all-reduce table's rows and what it says of where it ran."""

    ranks: int | None
    rows: list[tuple[float, float]]
    """(bytes, seconds) per size: the out-of-place time."""
    hosts: list[str]
    """The hosts its ranks ran on, where it names them (nccl-tests' ``#  Rank`` lines, the
    benchmark's ``# hosts`` line); empty where it does not."""


def allreduce_table(text: str) -> AllreduceTable | None:
    """The rows of an all-reduce table: nccl-tests' ``all_reduce_perf`` output (the
    out-of-place time) or ``benchmarks/allreduce.py``'s; None without a data row. Ranks:
    nccl-tests' ``#  Rank N`` lines, or the ``N ranks`` of the benchmark's header; hosts:
    the ``on HOST device`` of those lines, or the benchmark's ``# hosts`` line."""

    rows: list[tuple[float, float]] = []
    ranks: set[int] = set()
    hosts: dict[str, None] = {}
    declared = None
    for line in text.splitlines():
        rank = re.search(r"#\s+Rank\s+(\d+)\s", line)
        if rank:
            ranks.add(int(rank.group(1)))
            host = re.search(r"\son\s+(\S+)\s+device\s", line)
            if host:
                hosts[host.group(1)] = None
            continue
        named = re.search(r"#\s*hosts\s+(\S.*)$", line)
        if named:
            hosts.update(dict.fromkeys(h.strip() for h in named.group(1).split(",")))
            continue
        header = re.search(r"#.*?(\d+) ranks", line)
        if header:
            declared = int(header.group(1))
            continue
        found = re.search(_NCCL_ROW, line) or re.match(_TABLE_ROW, line)
        if found and float(found.group(2)) > 0:
            rows.append((float(found.group(1)), float(found.group(2)) * 1e-6))
    if not rows:
        return None
    return AllreduceTable(len(ranks) or declared, rows, [h for h in hosts if h])


def _profile_from_table(path: str, table: AllreduceTable) -> dict[str, Any]:
    from scalescope.allreduce_model import fit_model

    ranks, rows = table.ranks, table.rows
    if ranks is None or ranks < 2:
        raise ValueError(f"{path}: the all-reduce table does not say how many ranks ran it")
    if len(table.hosts) == 1:
        # the link within a node (NVLink, shared memory), read as the network between nodes,
        # would project every multi-node scale as if it were one node
        raise ValueError(
            f"{path}: every rank of this all-reduce ran on one host ({table.hosts[0]}): it "
            "measured the link within a node; --network wants it run across 2 or more nodes"
        )
    fit = fit_model(rows, ranks)
    if fit.get("busbw_gbps") is None or fit.get("alpha_s") is None:
        raise ValueError(f"{path}: no latency-bandwidth fit from its table ({fit.get('note')})")
    return {
        "inter_busbw_gbps": float(fit["busbw_gbps"]),
        "inter_alpha_s": max(float(fit["alpha_s"]), 1e-9),
        "at_world_size": ranks,
        "source": f"{Path(path).name} ({ranks} ranks, {len(rows)} sizes fitted)",
    }
