"""FSDP's collective baseline (``BASELINES["fsdp"]``): the all-gather and the reduce-scatter
at the sizes FSDP uses, on the job's own allocation, before training.

Per sharded module (each block, then the root), FSDP gathers its parameters' local shards
into the whole (``world`` times the shard) and reduce-scatters the whole gradient into a
shard. Each distinct size is timed here with the calls FSDP2 makes (``all_gather_single``
and ``reduce_scatter_single``; a few repetitions, after one untimed), with nccl-tests'
conventions: algbw = the full size / time, busbw = algbw x (n - 1) / n. It runs beside DDP's
all-reduce sweep (:class:`.strategies.AllReduceBaseline`), which runs under FSDP too. On gloo
the reduce-scatter runs as an all-reduce, and the section says so.

Under hybrid sharding (HSDP, a 2-D mesh: replicate x shard) the gathers and reduce-scatters
run over each shard group, at its size, and each shard is then all-reduced across the replica
group (``replica_all_reduce``, busbw = algbw x 2 (r - 1) / r over its r replicas): every rank
calls each collective on its own groups, all groups at once, as training does. ``mesh`` says
which sizes were timed.

The record's ``diagnosis.fsdp_collectives``, only for runs sharded by FSDP2.
"""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L

from ....collectives import (
    FSDP_ALL_GATHER,
    FSDP_REDUCE_SCATTER,
    FSDP_REPLICA_ALL_REDUCE,
    Collective,
    as_run_by,
)
from ....config import DiagnosisConfig, FaultsConfig
from ....workloads.sharding import policy_dtypes
from ...faults.fsdp_comms import fsdp_modules
from ..strategies import BASELINES, never_started

SECTION = "fsdp_collectives"
NOT_FSDP = "not trained under FSDP2"
GLOO_REDUCE_SCATTER = (
    "gloo runs reduce_scatter_tensor as an all-reduce: its time is at least an all-reduce's, "
    "and its busbw counts the all-reduce's bytes, algbw x 2 (n - 1) / n"
)
REPEATS = 5


def shard_bytes(pl_module: Any) -> list[tuple[int, int]]:
    """Per sharded module (its own parameters, not its sharded children's), the bytes each
    rank contributes to its all-gather and to its reduce-scatter's output: every parameter's
    shard padded as FSDP2 pads it (dim 0 split in ceil(dim0 / world) rows), the same on every
    rank, where a rank's own shard can be shorter (3 ranks over 10 rows hold 4, 4 and 2) and
    sizes that differ between ranks would fail the collective; gathered in the unit's
    ``param_dtype`` (the parameter's own where its policy sets none) and reduced in its
    ``reduce_dtype`` (else as gathered): under ``bf16-mixed`` the gather is half the
    reduce-scatter."""
    from torch.distributed.tensor import DTensor

    out = []
    for module in fsdp_modules(pl_module):
        owned = {id(p) for m in fsdp_modules(module) if m is not module for p in m.parameters()}
        gathered, reduced = policy_dtypes(module)
        gather = scatter = 0
        for p in module.parameters():
            if id(p) in owned:
                continue
            elements = padded_shard_elements(p) if isinstance(p, DTensor) else p.numel()
            as_gathered = gathered or p.dtype
            gather += elements * as_gathered.itemsize
            scatter += elements * (reduced or as_gathered).itemsize
        if gather:
            out.append((gather, scatter))
    return out


def padded_shard_elements(param: Any) -> int:
    """A dim-0-sharded parameter's padded shard in elements: ceil(rows / ranks) rows, over
    the ranks of its mesh's shard dimension (the world under FSDP, a shard group under
    HSDP)."""
    shape = tuple(param.shape)  # a DTensor's shape is the whole parameter's
    mesh = param.device_mesh
    ranks = mesh.size(mesh.ndim - 1)  # the shard dimension: the last (HSDP: replicate x shard)
    if not shape:
        return 1
    return -(-shape[0] // ranks) * math.prod(shape[1:])


def _timed(op: Any, device: Any) -> float:
    import torch

    op()  # untimed: the first call sets things up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(REPEATS):
        op()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - started) / REPEATS


def measure_sizes(
    shards: list[tuple[int, int]],
    device: Any,
    world: int,
    group: Any = None,
    replicas: tuple[Any, int] | None = None,
    backend: str = "nccl",
) -> list[dict[str, Any]]:
    """Each distinct shard size (``shards``: each unit's gathered and reduced bytes a rank,
    :func:`shard_bytes`): the collectives FSDP runs at that size timed over ``group`` of
    ``world`` ranks (the default group: every rank), on every rank together: the all-gather
    at a gathered size, the reduce-scatter at a reduced one, and with ``replicas`` (the
    replica group and its size, under HSDP) the all-reduce of the shard across it. Each busbw
    is the bytes the collective puts on the busiest link as ``backend`` runs it
    (:func:`scalescope.collectives.as_run_by`: on gloo a reduce-scatter is an all-reduce)."""
    import torch
    import torch.distributed as dist

    # What FSDP2 itself calls (torch 2.13 names them ``*_single``; the older names warn)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    gathered, reduced = {g for g, _ in shards}, {r for _, r in shards}
    rows = []
    for shard in sorted(gathered | reduced):
        n = max(1, shard // 4)  # float32 elements
        small = torch.ones(n, device=device)
        whole = torch.empty(n * world, device=device)
        row: dict[str, Any] = {"shard_bytes": n * 4, "full_bytes": n * 4 * world}
        ops: list[tuple[Collective, Any, int]] = []
        if shard in gathered:
            ops.append((FSDP_ALL_GATHER, lambda w=whole, s=small: gather(w, s, group=group), world))
        if shard in reduced:
            ops.append(
                (FSDP_REDUCE_SCATTER, lambda w=whole, s=small: scatter(s, w, group=group), world)
            )
        if shard in reduced and replicas is not None and replicas[1] > 1:
            ops.append(
                (
                    FSDP_REPLICA_ALL_REDUCE,
                    lambda s=small, g=replicas[0]: dist.all_reduce(s, group=g),
                    replicas[1],
                )
            )
        for collective, op, ranks in ops:
            seconds = _timed(op, device)
            # a gather's or reduce-scatter's size is the whole; an all-reduce's, the shard
            whole_size = collective is not FSDP_REPLICA_ALL_REDUCE
            moved = row["full_bytes"] if whole_size else row["shard_bytes"]
            algbw = moved / seconds / 1e9
            row[collective.key] = {
                "time_s": seconds,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * as_run_by(collective, backend).bus_factor(ranks),
            }
        rows.append(row)
    return rows


def module_mesh(pl_module: Any) -> Any:
    """The device mesh FSDP2 sharded the module over (its first sharded parameter's); None
    where no parameter is a DTensor."""
    from torch.distributed.tensor import DTensor

    for module in fsdp_modules(pl_module):
        for p in module.parameters():
            if isinstance(p, DTensor):
                return p.device_mesh
    return None


class FsdpBaseline:
    section = SECTION

    def not_started(self) -> dict[str, Any]:
        return never_started()

    def measure(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        cfg: DiagnosisConfig,
        faults: FaultsConfig | None,
    ) -> dict[str, Any]:
        if not fsdp_modules(pl_module):
            return {"status": "skipped", "reason": NOT_FSDP}
        if not cfg.allreduce_baseline:
            return {"status": "off", "reason": "diagnosis.allreduce_baseline=false"}
        import torch.distributed as dist

        if not dist.is_initialized() or dist.get_world_size() < 2:
            return {"status": "skipped", "reason": "one device: no collective"}
        started = time.perf_counter()
        device = trainer.strategy.root_device
        backend = str(dist.get_backend())
        mesh = module_mesh(pl_module)
        world = dist.get_world_size()
        if mesh is not None and mesh.ndim == 2:  # HSDP: replicate x shard
            shard_size, replicas = mesh.size(1), mesh.size(0)
            rows = measure_sizes(
                shard_bytes(pl_module),
                device,
                shard_size,
                group=mesh.get_group(1),
                replicas=(mesh.get_group(0), replicas),
                backend=backend,
            )
        else:
            shard_size, replicas = world, 1
            rows = measure_sizes(shard_bytes(pl_module), device, world, backend=backend)
        return {
            "status": "measured",
            "reason": None,
            "backend": backend,
            "world_size": world,
            "mesh": {"shard_size": shard_size, "replicas": replicas},
            "sizes": rows,
            "note": GLOO_REDUCE_SCATTER if backend == "gloo" else None,
            "seconds": time.perf_counter() - started,
        }

    def after_training(self, model: Any, part: dict[str, Any]) -> dict[str, Any]:
        return part


BASELINES["fsdp"] = FsdpBaseline()
