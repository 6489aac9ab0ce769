"""A parallel strategy's collectives, named once for the job and the analysis (no torch).

Each collective a training step waits in has one key. The job keeps a per-step series of its
wait under that key (:data:`scalescope.job.diagnosis.step_clock.COLLECTIVES`, every
registered key in order), the record's ``diagnosis`` names it in ``by_collective``, and the
analysis' step model reads from here which of them it times (:func:`modelled`) and the bytes
one message puts on the busiest link (:func:`link_bytes`).

DDP is the first strategy: its gradient all-reduce (from backward's last gradient to
``backward`` returning) and, for modules with buffers, its broadcast of them before forward.
FSDP (``fully_shard``) registers its own beside DDP's, which stay as they are: the all-gather
of each sharded block's parameters (before its forward, and again before its backward unless
``reshard_after_forward`` is off) and the reduce-scatter of its gradients after its backward,
and, under hybrid sharding (HSDP), the all-reduce of each gradient shard across the shard groups
(the replicas: between nodes when a shard group is a node).
The job's marks of each strategy's waits and its start-up sweep plug in the same way
(:mod:`scalescope.job.diagnosis.strategies`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from .allreduce_model import bus_factor as _all_reduce_bus_factor


@dataclass(frozen=True)
class Collective:
    """One collective a strategy's training step waits in."""

    key: str
    """Its per-step series on the job's step clock and its name in the record."""
    strategy: str
    operation: str
    """torch.distributed's name of it: ``all_reduce``, ``broadcast`` (``all_gather``,
    ``reduce_scatter``, ...)."""
    bus_factor: Callable[[int], float]
    """Bytes over the busiest link per byte of the message at N ranks (busbw / algbw, as
    nccl-tests reports it): 2 (N - 1) / N for a ring all-reduce, (N - 1) / N for an
    all-gather or a reduce-scatter, 1 for a broadcast."""
    wait: str
    """Where the job measures its wait, from which mark to which."""
    modelled: bool
    """Whether the step model times it from its bytes; the wait of one it does not stays in
    what the anchor measured."""


def _gather_or_scatter(world_size: int) -> float:
    """busbw / algbw of an all-gather or a reduce-scatter on the full size: (N - 1) / N."""
    return (world_size - 1) / world_size if world_size > 0 else 0.0


def _once(world_size: int) -> float:
    """busbw / algbw of a broadcast: each byte crosses each link once (0 on one rank)."""
    return 1.0 if world_size > 1 else 0.0


STRATEGIES: dict[str, tuple[Collective, ...]] = {}
"""strategy -> its collectives, in the order its step meets them; strategies in the order
they were registered."""


def register(*collectives: Collective) -> tuple[Collective, ...]:
    """Add one strategy's collectives (all of the same strategy, keys not taken yet)."""
    strategies = {c.strategy for c in collectives}
    if len(strategies) != 1:
        raise ValueError(f"one strategy at a time, not {sorted(strategies)}")
    (strategy,) = strategies
    taken = {c.key for c in every_collective()}
    clash = [c.key for c in collectives if c.key in taken]
    if strategy in STRATEGIES or clash:
        raise ValueError(f"{strategy}: already registered ({clash or 'the strategy'})")
    STRATEGIES[strategy] = tuple(collectives)
    return STRATEGIES[strategy]


def every_collective() -> tuple[Collective, ...]:
    return tuple(c for group in STRATEGIES.values() for c in group)


def series() -> tuple[str, ...]:
    """Every registered collective's key: the step clock's per-step series, in order."""
    return tuple(c.key for c in every_collective())


def modelled(strategy: str) -> tuple[Collective, ...]:
    """The collectives of ``strategy`` that the step model times from their bytes."""
    return tuple(c for c in STRATEGIES[strategy] if c.modelled)


def link_bytes(collective: Collective, nbytes: float, world: int) -> float:
    """Bytes over the busiest link for one message of ``nbytes`` at ``world`` ranks."""
    return nbytes * collective.bus_factor(world)


DDP_GRADIENT, DDP_BROADCAST = register(
    Collective(
        key="gradient",
        strategy="ddp",
        operation="all_reduce",
        bus_factor=_all_reduce_bus_factor,
        wait="from backward's last gradient to backward returning",
        modelled=True,
    ),
    Collective(
        key="broadcast",
        strategy="ddp",
        operation="broadcast",
        bus_factor=_once,
        wait="for a module with buffers: from the training call's start to its forward",
        modelled=False,
    ),
)

FSDP_ALL_GATHER, FSDP_REDUCE_SCATTER, FSDP_REPLICA_ALL_REDUCE = register(
    Collective(
        key="all_gather",
        strategy="fsdp",
        operation="all_gather",
        bus_factor=_gather_or_scatter,
        wait="before a sharded block's forward (and backward): on CPUs the collective's own "
        "call, on GPUs FSDP's pre-forward on the compute stream",
        modelled=True,
    ),
    Collective(
        key="reduce_scatter",
        strategy="fsdp",
        operation="reduce_scatter",
        bus_factor=_gather_or_scatter,
        wait="after a block's backward: on CPUs the collective's own call, on GPUs from the "
        "last reduce-scatter's issue to backward returning",
        modelled=True,
    ),
    Collective(
        key="replica_all_reduce",
        strategy="fsdp",
        operation="all_reduce",
        bus_factor=_all_reduce_bus_factor,
        wait="under HSDP only: each shard's gradient all-reduce across the shard groups, after "
        "its reduce-scatter; on CPUs from the reduce-scatter's return to FSDP's all-reduce "
        "hook, on GPUs inside the wait at backward's end",
        modelled=True,
    ),
)


FSDP = (FSDP_ALL_GATHER, FSDP_REDUCE_SCATTER)
"""FSDP2's collectives over its shards, in the order its step meets them (the step model reads
their bus factors from here). Under HSDP a third follows each reduce-scatter, across the shard
groups: :data:`FSDP_REPLICA_ALL_REDUCE`, which the step model times after each reduce-scatter
(``analysis.compute.projection.step_time.fsdp_comm.hybrid_times``)."""


def keys(strategy: str) -> tuple[str, ...]:
    """One strategy's collectives' keys, in the order its step meets them."""
    return tuple(c.key for c in STRATEGIES[strategy])


def as_run_by(collective: Collective, backend: str) -> Collective:
    """``collective`` as the process group's ``backend`` runs it. gloo has no reduce-scatter
    of its own: ``ProcessGroupGloo::reduce_scatter_tensor_coalesced`` clones the input,
    all-reduces it whole and keeps one chunk, so on gloo a reduce-scatter puts the
    all-reduce's bytes on the busiest link (:data:`DDP_GRADIENT`'s bus factor). Every other
    collective, and every one on nccl, as registered."""
    if backend == "gloo" and collective.operation == "reduce_scatter":
        return replace(collective, bus_factor=DDP_GRADIENT.bus_factor)
    return collective
