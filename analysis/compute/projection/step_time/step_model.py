"""The projection's step model: a series' step at a scale not run yet.

A step-time model of data-parallel training is fitted to each series' measured scale points
(:func:`fit_series`) and evaluated at larger ones (:meth:`StepModel.efficiency`). Per
optimizer step on the typical rank, at world size N over ``nodes`` nodes with a per-device
batch b and k micro-batches per step:

    T(N) = k (input(b/k) + compute(b/k)) + overlap + exposed(N) + straggler(N) + other

* compute(m) = a + c m per micro-batch of m samples: fitted over the measured scales' mean
  compute when their per-device batches differ (strong scaling), else proportional (a = 0),
  from the multi-device runs (so DDP's own per-step work is in it); input per sample the same.
* all-reduce of one message of n bytes at N ranks (Thakur, Rabenseifner & Gropp 2005; the
  record's fitted latency-bandwidth model, ``scalescope.allreduce_model.fit_model``):

      t(n, N) = alpha(N) + n 2 (N - 1) / N / busbw,   alpha(N) = alpha_p log2 N / log2 p

  The bandwidth term is the ring's (each byte crosses 2 (N-1)/N links at the bus bandwidth);
  the latency grows as a tree's, log2 N: NCCL's tuner picks the faster of ring and tree, and
  with equal bus bandwidth that is the tree's latency (alpha_p fitted at p ranks). Within a
  node the intra-node level applies, across nodes the inter-node one (the ring's slowest
  link); see :class:`Network` for where each comes from and its assumption band.
* exposed(N): DDP sends its buckets one after another as backward produces them (backward
  is about 2/3 of a micro-batch's compute); a bucket is ready when the record says its last
  gradient was (``bucket_ready``, shares of backward), else when the bytes up to it are
  (published cases, older records); each all-reduce starts when its bucket is ready and the
  one before it is done, and modelled(N) is what of that timeline ends after backward does
  (:mod:`.bucket_overlap`), and

      exposed(N) = max(0, modelled(N) + (exposed_p - modelled(p)))

  the offset measured at the anchor (the largest measured multi-device scale) carrying what
  the model misses there (contention, the framework).
* straggler(N) = sigma m(N): every rank waits each step for the slowest of N; with per-rank
  step times of spread sigma, the expected maximum of N draws is sigma m(N) above the mean
  (sigma is kept as a share of the step's compute, so it shrinks with the per-device batch)
  (m: the expected maximum of N standard normals, m(2) = 0.56, m(64) = 2.4, m(512) = 3.0).
  sigma is fitted (least squares through 0) to the measured waits (rank skew + rotating
  stragglers) at each multi-device scale.
* overlap (backward slowed by the all-reduce beside it) stays as at the anchor; other (the
  step's unexplained rest at the anchor, never below 0: a step faster than its parts is
  noise) carries as one of :data:`CARRIES` says (:meth:`StepModel.carried_other`).

Efficiency at N is the per-device throughput b/T(N) over the baseline's (as in the scaling
table), speedup = efficiency x N / baseline world size. A what-if that changes the per-device
batch changes the baseline's step by the same compute and input.

Assumptions: data parallelism only; no bottleneck at scale other than the network term (no
I/O limit, no memory change). The interval around it is :mod:`..project`'s. FSDP's
per-block gathers and reduce-scatters replace the all-reduce in :mod:`.fsdp_comm`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from functools import cache, cached_property, lru_cache
from typing import Any

import numpy as np

from analysis.compute.projection.step_time.bucket_overlap import (
    exposed_after_backward,
    ready_shares,
)
from analysis.compute.projection.step_time.network import Level, Network, network_from_points
from analysis.compute.stats import finite_mean
from scalescope.collectives import Collective, link_bytes, modelled

CARRIES = ("one-time", "network", "stragglers")
"""The structural explanations of the loss the parts leave at the anchor (``other``):
measurements that lack the parts (published tables) cannot tell them apart, and the
interval spans them (see :meth:`StepModel.carried_other`)."""
CARRY_WORDS = {
    "one-time": "a one-time step that keeps its share of the step",
    "network": "communication the model does not see, growing as the all-reduce does",
    "stragglers": "waiting for the slowest rank, growing with the number of ranks",
}
(NETWORK_TERM,) = modelled("ddp")
"""The collective the network term times, by the registry (scalescope.collectives): DDP's
gradient all-reduce; another strategy's modelled collectives come in beside it."""
BACKWARD_SHARE = 2.0 / 3.0
"""Share of a micro-batch's compute that is backward (forward : backward about 1 : 2)."""


# --- the network (its levels: :mod:`.network`) ----------------------------------------------


def collective_s(
    level: Level, collective: Collective, nbytes: float, world: int, bw_factor: float = 1.0
) -> float:
    """One ``collective`` of ``nbytes`` at ``world`` ranks on ``level``: the latency as a
    tree's, log2 N, and the collective's bytes over the busiest link (0 on one rank; NaN
    without a bandwidth, which is unknown, never infinite)."""
    return collective_times(level, collective, (nbytes,), world, bw_factor)[0]


def collective_times(
    level: Level,
    collective: Collective,
    sizes: Sequence[float],
    world: int,
    bw_factor: float = 1.0,
) -> list[float]:
    """:func:`collective_s` of each message of ``sizes``, the terms they share worked out
    once (the step model asks for every bucket of thousands of draws)."""
    if world <= 1:
        return [0.0] * len(sizes)
    scale = math.log2(world) / math.log2(level.at_world) if level.at_world > 1 else 1.0
    bw = level.busbw_gbps * bw_factor
    if not bw > 0:
        return [math.nan] * len(sizes)
    latency = level.alpha_s * scale
    per_byte = link_bytes(collective, 1.0, world)
    rate = bw * 1e9
    return [latency + nbytes * per_byte / rate for nbytes in sizes]


def allreduce_s(level: Level, nbytes: float, world: int, bw_factor: float = 1.0) -> float:
    """t(n, N) of the module doc at ``world`` ranks: the all-reduce of one bucket."""
    return collective_s(level, NETWORK_TERM, nbytes, world, bw_factor)


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


@lru_cache(maxsize=4096)
def expected_max(n: int) -> float:
    """E[max of n independent standard normals] (0 for n = 1), by quadrature."""
    if n <= 1:
        return 0.0
    from scipy.stats import norm

    x = np.linspace(-9.0, 9.0, 20001)
    density = n * norm.pdf(x) * norm.cdf(x) ** (n - 1)
    return float(np.trapezoid(x * density, x))


# --- the model ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StepModel:
    """A series' step, as one draw of the fit knows it (seconds per optimizer step)."""

    per_device_batch: float
    """Samples per optimizer step per device at the anchor."""
    accumulate: int
    compute_fixed_s: float
    compute_per_sample_s: float
    input_per_sample_s: float
    overlap_s: float
    other_s: float
    sigma_share: float
    """Per-rank spread of the step time as a share of its compute (see straggler(N))."""
    bucket_bytes: tuple[float, ...]
    network: Network
    anchor_world: int
    anchor_nodes: int
    exposed_offset_s: float
    baseline_step_s: float
    baseline_batch: float
    baseline_world: int
    scaling_mode: str
    carry: str = "one-time"
    """How ``other`` (what the parts leave of the anchor's step) carries beyond the anchor:
    one of :data:`CARRIES`."""
    bucket_ready: tuple[float, ...] = ()
    """When each of ``bucket_bytes`` was ready, as a share of backward (recorded at the
    anchor); empty where not recorded: then in proportion to bytes (:mod:`.bucket_overlap`)."""
    sync_every_micro_batch: bool = False
    """Whether every micro-batch of an accumulating step syncs its gradients (a published
    case's ``grad_sync: micro-batch``); False: the last one alone, as a sweep's runs do (DDP's
    ``no_sync``, FSDP's gradient sync switched off while accumulating)."""

    def with_fields(self, **changes: Any) -> StepModel:
        """This model with ``changes`` to its fields, as ``dataclasses.replace`` makes it (the
        same fields; nothing a property computed of the old ones is kept), without its work
        per call: a case's fit makes one for each of thousands of draws and fixed-point steps
        (no field of a step model has a default factory or a ``__post_init__``)."""
        names = _field_names(type(self))
        unknown = changes.keys() - set(names)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        new = object.__new__(type(self))
        state, old = new.__dict__, self.__dict__
        for name in names:
            state[name] = changes[name] if name in changes else old[name]
        return new

    def syncs(self, k: int) -> int:
        """How many of a step's ``k`` micro-batches sync their gradients."""
        return k if self.sync_every_micro_batch else 1

    def compute_s(self, batch: float, k: int) -> float:
        micro = batch / k
        return k * (self.compute_fixed_s + self.compute_per_sample_s * micro)

    def modelled_exposed(
        self, world: int, nodes: int, buckets: Sequence[float], k: int, bw: float, batch: float
    ) -> float:
        level = self.network.level(nodes)
        if world <= 1 or not buckets:
            return 0.0
        if level is None:
            return math.nan
        return self.exposed_on(world, nodes, buckets, k, bw, batch)

    def exposed_on(
        self, world: int, nodes: int, buckets: Sequence[float], k: int, bw: float, batch: float
    ) -> float:
        """The exposed communication per step at ``world`` ranks over ``nodes`` nodes (``world``
        > 1, buckets known, the network's level for ``nodes`` known): DDP's all-reduce of each
        bucket after backward, less what backward hides, on each micro-batch that syncs
        (:meth:`syncs`)."""
        level = self.network.level(nodes)
        assert level is not None
        times = collective_times(level, NETWORK_TERM, buckets, world, bw)
        backward = BACKWARD_SHARE * self.compute_s(batch, k) / k  # one micro-batch's
        ready = None
        if self.bucket_ready:
            ready = ready_shares(self.bucket_bytes, self.bucket_ready, buckets)
        return self.syncs(k) * exposed_after_backward(times, buckets, backward, ready)

    def parts(
        self,
        world: int,
        nodes: int,
        *,
        batch: float | None = None,
        k: int | None = None,
        buckets: Sequence[float] | None = None,
        bw: float | None = None,
    ) -> dict[str, float]:
        """The step's parts at ``world`` ranks over ``nodes`` nodes (seconds per step)."""
        b = self.per_device_batch if batch is None else batch
        k = self.accumulate if k is None else k
        buckets = self.bucket_bytes if buckets is None else buckets
        factor = self.network.factor(nodes) if bw is None else bw
        modelled = self.modelled_exposed(world, nodes, buckets, k, factor, b)
        exposed = max(0.0, modelled + self.exposed_offset_s) if world > 1 else 0.0
        if world > 1 and math.isnan(self.modelled_at_anchor):
            exposed = math.nan
        out_compute = self.compute_s(b, k)
        straggler = self.sigma_share * out_compute * expected_max(world)
        out = {
            "compute": out_compute,
            "input": self.input_per_sample_s * b,
            "overlap": self.overlap_s if world > 1 else 0.0,
            "exposed_comm": exposed,
            "straggler": straggler,
        }
        out["other"] = (
            self.carried_other(
                world, nodes, math.fsum(out.values()), out_compute, buckets, factor, k
            )
            if world > 1
            else 0.0
        )
        out["step"] = math.fsum(out.values())
        return out

    def carried_other(
        self,
        world: int,
        nodes: int,
        rest_s: float,
        compute_s: float,
        buckets: Sequence[float],
        bw: float,
        k: int | None = None,
    ) -> float:
        """``other`` at ``world`` ranks (``k`` micro-batches a step there: the anchor's where
        None), as :attr:`carry` says the anchor's carries:

        * ``one-time``: a fixed share of the step from the anchor on (a step the first
          inter-node scale took once: it shrinks with the step under strong scaling);
        * ``network``: communication the model does not see, growing as the all-reduce time
          does with the number of ranks at the anchor's network level (latency, bus factor,
          accumulation shrinking); a change of level (intra- to inter-node) is already in
          the modelled exposed time, and is not counted twice;
        * ``stragglers``: waiting for the slowest rank, growing as compute x m(N).

        Where the anchor gives the growth nothing to scale from (one device), one-time."""
        if self.other_s == 0.0:
            return 0.0
        if self.carry == "network":
            now = self.allreduce_total(world, self.anchor_nodes, buckets, k)
            then = self.allreduce_total(
                self.anchor_world, self.anchor_nodes, self.bucket_bytes, self.accumulate
            )
            if math.isfinite(now) and math.isfinite(then) and then > 0:
                return self.other_s * now / then
        if self.carry == "stragglers" and expected_max(self.anchor_world) > 0:
            then = self.compute_s(self.per_device_batch, self.accumulate)
            if then > 0:
                growth = expected_max(world) / expected_max(self.anchor_world)
                return self.other_s * compute_s / then * growth
        # one-time: the same share of the step as at the anchor
        anchor = self.anchor_step_s()
        share = self.other_s / anchor if anchor > 0 else 0.0
        return rest_s * share / (1.0 - share) if share < 1.0 else self.other_s

    def allreduce_total(
        self, world: int, nodes: int, buckets: Sequence[float], k: int | None = None
    ) -> float:
        """Every bucket's all-reduce at ``world`` ranks on the network level of ``nodes``
        nodes (as measured there), one after another (seconds), on each of the ``k``
        micro-batches (the anchor's where None) that syncs: DDP all-reduces once a step unless
        every micro-batch syncs (:meth:`syncs`; FSDP gathers every one of them)."""
        level = self.network.level(nodes)
        if world <= 1 or level is None:
            return math.nan if level is None else 0.0
        bw = self.network.factor(nodes)
        k = self.accumulate if k is None else k
        return self.syncs(k) * math.fsum(collective_times(level, NETWORK_TERM, buckets, world, bw))

    def anchor_step_s(self) -> float:
        return (
            self.compute_s(self.per_device_batch, self.accumulate)
            + self.input_per_sample_s * self.per_device_batch
            + self.overlap_s
            + self.exposed_at_anchor
            + self.anchor_straggler_s
            + self.other_s
        )

    @property
    def anchor_straggler_s(self) -> float:
        compute = self.compute_s(self.per_device_batch, self.accumulate)
        return self.sigma_share * compute * expected_max(self.anchor_world)

    @cached_property
    def modelled_at_anchor(self) -> float:
        """The model's exposed all-reduce at the anchor, before the measured offset (a
        constant of the model: computed once)."""
        return self.modelled_exposed(
            self.anchor_world,
            self.anchor_nodes,
            self.bucket_bytes,
            self.accumulate,
            self.network.factor(self.anchor_nodes),
            self.per_device_batch,
        )

    @property
    def exposed_at_anchor(self) -> float:
        return max(0.0, self.modelled_at_anchor + self.exposed_offset_s)

    def calibrated(self, exposed_s: float, step_s: float) -> StepModel:
        """This model made to reproduce its anchor: the offset takes what the all-reduce
        model misses of the measured exposed time ``exposed_s`` (none when not measured),
        ``other`` the rest of the measured step ``step_s``, never below 0 (a step faster
        than its parts is noise, not a speed to carry to every scale)."""
        offset = exposed_s - self.modelled_at_anchor if math.isfinite(exposed_s) else 0.0
        model = self.with_fields(exposed_offset_s=offset, other_s=0.0)
        other = step_s - model.anchor_step_s()
        return model.with_fields(other_s=max(0.0, other) if math.isfinite(other) else 0.0)

    def baseline_step(self, batch: float) -> float:
        """The baseline's step with another per-device batch: its compute and input change
        by the model's (micro-batches as at the anchor)."""
        db = batch - self.baseline_batch
        return self.baseline_step_s + db * (self.compute_per_sample_s + self.input_per_sample_s)

    def batch_at(self, world: int, batch: float | None = None) -> float:
        """The per-device batch at ``world`` ranks of a what-if whose per-device batch at
        the anchor is ``batch``: strong scaling keeps the global batch, weak the per-device."""
        b = self.per_device_batch if batch is None else batch
        return b * self.anchor_world / world if self.scaling_mode == "strong" else b

    def efficiency(
        self, world: int, nodes: int, *, batch: float | None = None, **kw: Any
    ) -> tuple[float, dict[str, float], float]:
        """(efficiency, parts, per-device batch) at ``world`` ranks over ``nodes`` nodes;
        NaN where a micro-batch would hold less than one sample."""
        b0 = self.per_device_batch if batch is None else batch
        b = self.batch_at(world, b0)
        k0 = kw.pop("k", None) or self.accumulate
        # strong scaling keeps the micro-batch and drops accumulation first
        k = max(1, math.floor(k0 * b / b0 + 1e-9)) if b < b0 else k0
        parts = self.parts(world, nodes, batch=b, k=k, **kw)
        parts = {**parts, "k": float(k)}
        if b / k < 1 or not parts["step"] > 0:
            return math.nan, parts, b
        base_b = self.baseline_batch * b0 / self.per_device_batch
        x_base = base_b / self.baseline_step(base_b)
        return (b / parts["step"]) / x_base, parts, b


# --- fitting a series ---------------------------------------------------------------------


@dataclass
class ScalePoint:
    """One measured scale of a series: its runs' parts (analysis.compute.run_parts.RunParts)."""

    world: int
    nodes: int
    devices_per_node: int
    parts: list[Any]
    """RunParts of each run with a breakdown (or, for the baseline, every run's)."""
    accumulate: int = 1


@dataclass
class Fit:
    model: StepModel | None
    reason: str = ""
    scaled_points: int = 0


@dataclass(frozen=True)
class CommTerm:
    """What a series' network term times and which step model times it. This one is DDP's:
    :class:`StepModel` on the anchor's recorded buckets and their readiness. Another
    strategy's (FSDP's per-unit gathers and reduce-scatters, :class:`.fsdp_comm.FsdpTerm`)
    gives its own ``messages`` and :meth:`build`."""

    messages: tuple[float, ...] | None = None
    """The messages in the order issued; None: the anchor's recorded DDP buckets."""
    needs: str = "exposed communication, the all-reduce sweep and DDP's buckets"
    """What a multi-device run's diagnosis must hold for the fit (the reason's words)."""

    def build(self, **fields: Any) -> StepModel:
        """The step model of this term with :class:`StepModel`'s ``fields``."""
        return StepModel(**fields)

    def drawn(self, rng: np.random.Generator) -> CommTerm:
        """This term as one draw of the interval takes it (DDP's: nothing drawn)."""
        return self


DDP_TERM = CommTerm()


def _step_of(p: Any) -> float:
    b = p.samples_per_step
    return p.t_s * b if b else math.nan


def fit_series(
    points: Sequence[ScalePoint],
    baseline: ScalePoint,
    scaling_mode: str,
    network: Network | None = None,
    carry: str = CARRIES[0],
    term: CommTerm = DDP_TERM,
) -> Fit:
    """A :class:`StepModel` from a series' measured points (any order): the anchor is the
    largest multi-device point with a recorded breakdown and an all-reduce fit; what its
    parts leave of its step carries as ``carry`` says; ``term`` says what the network term
    times and with which model (DDP's buckets by default)."""

    def usable(p: Any) -> bool:
        return bool(p.recorded and (term.messages is not None or p.bucket_bytes))

    multi = [pt for pt in points if pt.world > 1 and any(usable(p) for p in pt.parts)]
    if not multi:
        return Fit(
            None, f"no multi-device run with a diagnosis ({term.needs}): nothing to project from"
        )
    anchor = max(multi, key=lambda pt: (pt.world, pt.nodes))
    a_parts = [p for p in anchor.parts if usable(p)]
    b_parts = [p for p in baseline.parts if math.isfinite(p.t_s)]
    if not b_parts:
        return Fit(None, "the baseline has no steady-state throughput")
    net = network or network_from_points(multi)
    if (anchor.nodes > 1 and net.inter is None) or (anchor.nodes <= 1 and net.intra is None):
        return Fit(None, net.missing or "the anchor's all-reduce was not fitted")
    k = max(1, int(anchor.accumulate))
    batch = finite_mean([float(p.samples_per_step or math.nan) for p in a_parts])
    fixed, per_sample = _compute_line(multi)
    inputs = finite_mean([p.per_sample("input") for p in a_parts])
    overlap = finite_mean([p.overlap_step_s for p in a_parts])
    overlap = 0.0 if math.isnan(overlap) else overlap
    sigma_share = _straggler_share(multi)
    buckets = tuple(float(b) for b in term.messages or a_parts[0].bucket_bytes)
    exposed_meas = finite_mean([p.comm_step_s for p in a_parts])
    draft = term.build(
        per_device_batch=batch,
        accumulate=k,
        compute_fixed_s=fixed,
        compute_per_sample_s=per_sample,
        input_per_sample_s=inputs if math.isfinite(inputs) else 0.0,
        overlap_s=overlap,
        other_s=0.0,
        sigma_share=0.0,
        bucket_bytes=buckets,
        network=net,
        anchor_world=anchor.world,
        anchor_nodes=anchor.nodes,
        exposed_offset_s=0.0,
        baseline_step_s=finite_mean([_step_of(p) for p in b_parts]),
        baseline_batch=finite_mean([float(p.samples_per_step or 0) for p in b_parts]),
        baseline_world=baseline.world,
        scaling_mode=scaling_mode,
        carry=carry,
        bucket_ready=_bucket_ready(a_parts) if term.messages is None else (),
    )
    draft = replace(draft, sigma_share=sigma_share)
    model = draft.calibrated(exposed_meas, finite_mean([_step_of(p) for p in a_parts]))
    # scales beyond the baseline that the fit could use: a world size without a usable
    # breakdown checks nothing
    scaled = len({pt.world for pt in multi if pt.world != baseline.world})
    return Fit(model, "", scaled)


def _bucket_ready(a_parts: Sequence[Any]) -> tuple[float, ...]:
    """When each of the anchor's buckets (the first run's, as the model takes them) was
    ready, as a share of backward: per bucket, the median over the anchor's runs that
    recorded it for the same buckets; empty where none did (then in proportion to bytes)."""
    buckets = a_parts[0].bucket_bytes
    rows = [
        p.bucket_ready_share
        for p in a_parts
        if p.bucket_bytes == buckets and len(p.bucket_ready_share) == len(buckets)
    ]
    if not rows or not buckets:
        return ()
    return tuple(float(np.median([r[i] for r in rows])) for i in range(len(buckets)))


def _compute_line(multi: Sequence[ScalePoint]) -> tuple[float, float]:
    """Compute per micro-batch against its size, over the multi-device points: (fixed
    seconds, seconds per sample) of :func:`_line`."""
    xs, ys = [], []
    for pt in multi:
        rec = [p for p in pt.parts if p.recorded]
        kk = max(1, int(pt.accumulate))
        for p in rec:
            xs.append((p.samples_per_step or math.nan) / kk)
            ys.append(p.compute_step_s / kk)
    return _line(xs, ys)


def _straggler_share(multi: Sequence[ScalePoint]) -> float:
    """The straggler spread as a share of each point's own compute (under strong scaling the
    smaller scales have more compute per rank), against the expected maximum, through 0."""
    num = den = 0.0
    for pt in multi:
        rec = [p for p in pt.parts if p.recorded]
        w = finite_mean(
            [p.skew_step_s + (0.0 if math.isnan(p.jitter_step_s) else p.jitter_step_s) for p in rec]
        )
        c = finite_mean([p.compute_step_s for p in rec])
        if math.isfinite(w) and math.isfinite(c) and c > 0:
            m = expected_max(pt.world)
            num, den = num + max(w, 0.0) / c * m, den + m * m
    return num / den if den else 0.0


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(a, c) of y = a + c x: least squares where x varies, else through 0; a kept >= 0."""
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y) and x > 0]
    if not pairs:
        return 0.0, 0.0
    x = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    if np.ptp(x) > 0:
        c, a = np.polyfit(x, y, 1)
        if a >= 0 and c >= 0:
            return float(a), float(c)
    return 0.0, float(np.sum(x * y) / np.sum(x * x))
