"""FSDP's communication in the step model: what of its gathers and reduce-scatters a step waits in.

FSDP2 (``fully_shard`` per block, then the root) shards every wrapped block's parameters over
the N ranks. Per micro-batch, for each of its blocks (bytes ``n_i`` as gathered):

* an all-gather of the block's parameters before its forward;
* another before its backward, unless ``reshard_after_forward`` is off (then the forward's
  gathered parameters stay until backward), and never for the root: FSDP2 keeps the root
  gathered after forward when its ``reshard_after_forward`` is left at the default, as
  scalescope leaves it (torch's ``_lazy_init`` sets the root's ``post_forward_mesh_info`` to
  None), so a sweep's units, the root first (``root_first``), gather the root once a
  micro-batch; a published case's even blocks have no root;
* a reduce-scatter of its gradients after its backward, on each micro-batch that syncs them
  (under accumulation the last one, the others keeping the gathers and skipping the
  reduce-scatters; every one where a published case says so,
  :attr:`..step_model.StepModel.sync_every_micro_batch`).

Each takes ``alpha(N) + n_i (N - 1) / N / busbw`` (the ring's bus factor of
:data:`scalescope.collectives.FSDP`; on gloo, which runs a reduce-scatter as an all-reduce of
the whole input, the reduce-scatter's is the all-reduce's 2 (N - 1) / N:
:func:`scalescope.collectives.as_run_by`; the latency as the all-reduce's,
:func:`..step_model.allreduce_s`), on the intra-node level of the :class:`..step_model.Network`
within one node and the inter-node one across nodes.

What of it is exposed (:func:`microbatch_exposed`):

* on GPUs the collectives run on FSDP's own streams and prefetch one block ahead: block
  i+1's gather is issued when block i's compute starts and runs behind it, a reduce-scatter
  is issued when its block's backward ends; one network channel carries them in issue order,
  so a block's compute waits only for what its gather did not finish behind the block
  before (a block with nothing to gather, the root in backward, waits for nothing), and
  backward ends when the last reduce-scatter does;
* on CPUs (gloo) FSDP's collectives run on the training thread: none is hidden.

Forward is ``1 - BACKWARD_SHARE`` of a micro-batch's compute, backward the rest, each shared
evenly over the blocks. :class:`FsdpStepModel` can also hide only a share of what the
timeline hides (``hidden_share``: 1 the timeline, 0 as on CPUs), which the interval draws
over :data:`FSDP_HIDDEN_BAND`, for published cases
(:mod:`analysis.compute.projection.published.scoring`) and a sweep's own FSDP series
(:class:`FsdpTerm`, :mod:`analysis.compute.projection.project`) alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from analysis.compute.projection.step_time.network import Level
from analysis.compute.projection.step_time.step_model import (
    BACKWARD_SHARE,
    CommTerm,
    StepModel,
    collective_times,
)
from analysis.read.strategy import FsdpSharding
from scalescope.collectives import (
    FSDP_ALL_GATHER,
    FSDP_REDUCE_SCATTER,
    FSDP_REPLICA_ALL_REDUCE,
    as_run_by,
)

FSDP_HIDDEN_BAND = (0.0, 1.0)
"""On GPUs, the share of the communication prefetching can hide (each block's gather behind
the block before, the reduce-scatters behind the next blocks' backward) that it does hide,
drawn over the interval (published cases and a sweep's own FSDP series alike): from none, as
on CPUs (the IBM Cloud FSDP post found the overlap of T5-11B "very limited" before its rate
limiter), to all, the centre's model."""


def _phase(gathers: Sequence[float], compute: Sequence[float], scatters: Sequence[float]) -> float:
    """The exposed time of one pass over the blocks (in the pass's order) on GPUs: gathers
    prefetched one block ahead, reduce-scatters after each block, one channel in issue order
    (see the module doc). Seconds the pass ends after its compute alone would."""
    n = len(compute)
    done = [0.0] * n  # when each block's gather ends
    channel = done[0] = gathers[0]  # when the network is free
    compute_end = 0.0
    # max(a, b) written out as b if b > a else a (the same, NaN too): the draws of a fit
    # ask for tens of millions
    for i in range(n):
        ready = done[i]
        start = ready if ready > compute_end else compute_end
        # the next block's gather, issued as this block's compute starts; a block with
        # nothing to gather issues none and waits behind nothing on the channel
        if i + 1 < n and gathers[i + 1] != 0.0:
            channel = done[i + 1] = (start if start > channel else channel) + gathers[i + 1]
        compute_end = start + compute[i]
        if scatters[i] > 0:
            channel = (compute_end if compute_end > channel else channel) + scatters[i]
    return (channel if channel > compute_end else compute_end) - math.fsum(compute)


def microbatch_exposed(
    gather_s: Sequence[float],
    scatter_s: Sequence[float],
    compute_s: float,
    *,
    reshard_after_forward: bool = True,
    sync: bool = True,
    overlap: bool = True,
    root_first: bool = False,
) -> float:
    """Seconds one micro-batch waits in FSDP's collectives beyond its compute ``compute_s``.

    ``gather_s`` / ``scatter_s``: each block's all-gather and reduce-scatter time, in forward
    order; ``sync``: whether this micro-batch reduce-scatters; ``overlap``: GPUs (prefetch
    hides a gather behind the block before) or CPUs (nothing hidden); ``root_first``: the
    first unit is the root, which backward does not gather again."""
    n = len(gather_s)
    if not n:
        return 0.0
    back_gathers = list(gather_s) if reshard_after_forward else [0.0] * n
    if root_first:
        back_gathers[0] = 0.0
    scatters = list(scatter_s) if sync else [0.0] * n
    if not overlap:
        return math.fsum([*gather_s, *back_gathers, *scatters])
    share = [1.0 / n] * n
    forward = [(1.0 - BACKWARD_SHARE) * compute_s * s for s in share]
    backward = [BACKWARD_SHARE * compute_s * s for s in share]
    exposed = _phase(gather_s, forward, [0.0] * n)
    # backward meets the blocks last first
    exposed += _phase(back_gathers[::-1], backward[::-1], scatters[::-1])
    return exposed


def timeline_exposed(
    gathers: Sequence[float],
    scatters: Sequence[float],
    compute_s: float,
    k: int = 1,
    syncs: int = 1,
    **kw: Any,
) -> float:
    """The exposed seconds of one optimizer step of ``k`` micro-batches (compute
    ``compute_s`` for all of them) whose units take ``gathers`` and ``scatters`` seconds
    (:func:`microbatch_exposed`'s keywords in ``kw``): every micro-batch gathers, the last
    ``syncs`` of them (one, or all ``k`` where every micro-batch syncs) also reduce-scatter."""
    micro = compute_s / k
    syncs = min(max(1, syncs), k)
    last = syncs * microbatch_exposed(gathers, scatters, micro, sync=True, **kw)
    if syncs == k:
        return last
    return (k - syncs) * microbatch_exposed(gathers, scatters, micro, sync=False, **kw) + last


def hybrid_times(
    shard_level: Level,
    replica_level: Level,
    units: Sequence[float],
    world: int,
    shard_size: int,
    *,
    bw_factor: float = 1.0,
    shard_bw_factor: float = 1.0,
    sharing: int = 1,
    scatter_factor: float = 1.0,
    backend: str = "nccl",
) -> tuple[list[float], list[float]]:
    """Each unit's gather and reduce seconds under hybrid sharding (HSDP) at ``world`` ranks
    in shard groups of ``shard_size``: the all-gather and the reduce-scatter over the shard
    group on ``shard_level`` (``shard_bw_factor`` on its bandwidth: a node's link where the
    group is within a node, the link between nodes where it spans them), then, after each
    reduce-scatter on the same channel, the all-reduce of the unit's gradient shard (its
    reduced bytes over the shard group) across the ``world / shard_size`` replicas on
    ``replica_level`` (``bw_factor`` on its bandwidth: the replicas' link is the one a
    projection draws).

    Every rank all-reduces its own shard at once, so across nodes the ``sharing`` ranks of a
    node in different replica groups (a node's devices, or a shard group's where it is
    smaller) share the node's link: each all-reduce has ``1 / sharing`` of its bus bandwidth,
    which is the node's, every NIC together, as an all-reduce over the world measures it.
    Together they move what one all-reduce of the whole unit across the replicas would; within
    a node each rank has its own link (``sharing`` 1)."""
    shard = max(1, min(shard_size, world))
    replicas = world // shard
    gathers, scatters = _collective_times(
        shard_level, units, shard, shard_bw_factor, scatter_factor, backend
    )
    reduce = as_run_by(FSDP_REPLICA_ALL_REDUCE, backend)
    per_group = bw_factor / max(1, sharing)
    shards = collective_times(
        replica_level, reduce, [b * scatter_factor / shard for b in units], replicas, per_group
    )
    return gathers, [a + b for a, b in zip(scatters, shards, strict=True)]


def _collective_times(
    level: Level,
    units: Sequence[float],
    world: int,
    bw_factor: float,
    scatter_factor: float,
    backend: str,
) -> tuple[list[float], list[float]]:
    """Each unit's all-gather and reduce-scatter seconds, as ``backend`` runs them."""
    gather = as_run_by(FSDP_ALL_GATHER, backend)
    scatter = as_run_by(FSDP_REDUCE_SCATTER, backend)
    gathers = collective_times(level, gather, units, world, bw_factor)
    scatters = collective_times(
        level, scatter, [b * scatter_factor for b in units], world, bw_factor
    )
    return gathers, scatters


def block_bytes(param_bytes: float, blocks: int) -> tuple[float, ...]:
    """The gathered bytes of each of ``blocks`` wrapped blocks that share ``param_bytes``
    evenly (what a published case states: the whole model and its number of blocks)."""
    return tuple(param_bytes / blocks for _ in range(blocks))


@dataclass(frozen=True)
class FsdpStepModel(StepModel):
    """The step model of :mod:`.step_model` with FSDP's communication for the network term:
    ``bucket_bytes`` holds each wrapped block's gathered bytes (forward order)."""

    reshard_after_forward: bool = True
    overlap: bool = True
    """GPUs: prefetch hides a block's gather behind the block before; CPUs: nothing hidden."""
    hidden_share: float = 1.0
    """On GPUs, the share of what prefetching can hide (the timeline's hidden time against
    every collective exposed) that it does hide: 1 the timeline of the module doc, 0 as on
    CPUs (the interval draws it over :data:`FSDP_HIDDEN_BAND`)."""
    scatter_factor: float = 1.0
    """Bytes reduce-scattered per byte gathered: the reduce dtype's size over the gathered
    one's (2 where the units gather bf16 and reduce fp32, ``bf16-mixed``; 0.5 for fp32
    parameters reduced in bf16)."""
    param_dtype: str | None = None
    """What the units gather in, as recorded (None: the parameters' own dtype)."""
    root_first: bool = False
    """The first unit is the root, which FSDP2 keeps gathered from forward to backward (a
    sweep's units as recorded); False for a published case's even blocks, which have none."""
    backend: str = "nccl"
    """The process group's backend the series ran on (gloo on CPUs): it says what a
    reduce-scatter moves (:func:`scalescope.collectives.as_run_by`)."""
    shard_size: int | None = None
    """Hybrid sharding (HSDP): the ranks of a shard group (a node's devices unless the
    series set ``fsdp.shard_size``), whose gathers and reduce-scatters stay on the intra-node
    link unless the group spans nodes, each unit's gradient shard then all-reduced across the
    replicas (:func:`hybrid_times`); None: full sharding over the world."""

    def hybrid_at(self, world: int) -> bool:
        """Whether ``world`` ranks run hybrid sharding with more than one replica."""
        return self.shard_size is not None and world > self.shard_size

    def unit_times(
        self, world: int, nodes: int, buckets: Sequence[float], bw: float
    ) -> tuple[list[float], list[float]]:
        """Each unit's gather and reduce seconds at ``world`` ranks over ``nodes`` nodes
        (``bw`` on the bandwidth of the level of ``nodes``, which is known): full sharding's
        over the world, or hybrid sharding's (:func:`hybrid_times`: the shard group on the
        intra-node level, or between nodes where it spans them; the replicas on the level of
        ``nodes``, the ranks of a node sharing its link)."""
        level = self.network.level(nodes)
        assert level is not None
        if not self.hybrid_at(world):
            return _collective_times(level, buckets, world, bw, self.scatter_factor, self.backend)
        assert self.shard_size is not None
        per_node = max(1, world // max(1, nodes))
        shard = min(self.shard_size, world)
        spans = nodes > 1 and shard > per_node
        return hybrid_times(
            level if spans else (self.network.intra or level),
            level,
            buckets,
            world,
            self.shard_size,
            bw_factor=bw,
            shard_bw_factor=bw if spans else 1.0,
            sharing=min(shard, per_node) if nodes > 1 else 1,
            scatter_factor=self.scatter_factor,
            backend=self.backend,
        )

    def exposed_on(
        self, world: int, nodes: int, buckets: Sequence[float], k: int, bw: float, batch: float
    ) -> float:
        """FSDP's exposed gathers and reduce-scatters per step at ``world`` ranks over
        ``nodes`` nodes (under HSDP, with the replicas' all-reduces): the timeline of the
        module doc, less ``hidden_share`` of what it hides on GPUs."""
        gathers, scatters = self.unit_times(world, nodes, buckets, bw)
        kw: dict[str, Any] = {
            "reshard_after_forward": self.reshard_after_forward,
            "root_first": self.root_first,
        }
        compute = self.compute_s(batch, k)
        kw["syncs"] = self.syncs(k)
        hidden = timeline_exposed(gathers, scatters, compute, k, overlap=self.overlap, **kw)
        if not self.overlap or self.hidden_share >= 1.0:
            return hidden
        serial = timeline_exposed(gathers, scatters, compute, k, overlap=False, **kw)
        return hidden + (1.0 - self.hidden_share) * (serial - hidden)

    def allreduce_total(
        self, world: int, nodes: int, buckets: Sequence[float], k: int | None = None
    ) -> float:
        """Every collective of one optimizer step of ``k`` micro-batches (the anchor's where
        None): the gathers of every micro-batch (before backward too where resharded, never
        the root's), the reduce-scatters on each micro-batch that syncs (:meth:`syncs`), one
        after another on the network level of ``nodes`` nodes: what ``carry = network`` grows
        with."""
        level = self.network.level(nodes)
        if world <= 1 or level is None:
            return math.nan if level is None else 0.0
        k = self.accumulate if k is None else k
        gathers, scatters = self.unit_times(world, nodes, buckets, self.network.factor(nodes))
        again = gathers[1:] if self.root_first else gathers
        per_micro = math.fsum(gathers) + (math.fsum(again) if self.reshard_after_forward else 0.0)
        return k * per_micro + self.syncs(k) * math.fsum(scatters)


@dataclass(frozen=True)
class FsdpTerm(CommTerm):
    """A sweep's FSDP series in the step model's fit (:func:`..step_model.fit_series`): its
    units' gathered bytes in forward order (``messages``: the record's
    ``sharding.unit_bytes``) on :class:`FsdpStepModel`, with the series' setting."""

    needs: str = "exposed communication and the all-reduce sweep"
    reshard_after_forward: bool = True
    overlap: bool = True
    """GPUs (prefetch hides) or CPUs (nothing hidden): the series' accelerator."""
    hidden_share: float = 1.0
    scatter_factor: float = 1.0
    param_dtype: str | None = None
    root_first: bool = False
    backend: str = "nccl"
    shard_size: int | None = None

    @classmethod
    def of(cls, sharding: FsdpSharding, *, gpu: bool) -> FsdpTerm:
        """The term of a series whose records say ``sharding`` (with its units' bytes, the
        root first; under HSDP its shard groups' size), on GPUs (nccl, prefetch hides) or
        CPUs (gloo, nothing hidden)."""
        assert sharding.unit_bytes is not None
        return cls(
            messages=tuple(float(b) for b in sharding.unit_bytes),
            reshard_after_forward=sharding.reshard_after_forward,
            overlap=gpu,
            scatter_factor=sharding.scatter_factor,
            param_dtype=sharding.param_dtype,
            root_first=sharding.root_first,
            backend="nccl" if gpu else "gloo",
            shard_size=sharding.shard_size,
        )

    def build(self, **fields: Any) -> StepModel:
        return FsdpStepModel(
            **fields,
            reshard_after_forward=self.reshard_after_forward,
            overlap=self.overlap,
            hidden_share=self.hidden_share,
            scatter_factor=self.scatter_factor,
            param_dtype=self.param_dtype,
            root_first=self.root_first,
            backend=self.backend,
            shard_size=self.shard_size,
        )

    def drawn(self, rng: np.random.Generator) -> CommTerm:
        """On GPUs, the share prefetching hides drawn over :data:`FSDP_HIDDEN_BAND` (on CPUs
        nothing is hidden: nothing to draw)."""
        if not self.overlap:
            return self
        return replace(self, hidden_share=float(rng.uniform(*FSDP_HIDDEN_BAND)))
