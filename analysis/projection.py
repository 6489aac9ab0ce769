"""Projection: the scaling a sweep has not run yet, with an interval.

A step-time model of data-parallel training is fitted to each series' measured scale points
and evaluated at larger ones. Per optimizer step on the typical rank, at world size N over
``nodes`` nodes with a per-device batch b and k micro-batches per step:

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
  is about 2/3 of a micro-batch's compute, and a bucket is ready when the bytes up to it
  are); each all-reduce starts when its bucket is ready and the one before it is done, and
  modelled(N) is what of that timeline ends after backward does
  (:func:`exposed_after_backward`), and

      exposed(N) = max(0, modelled(N) + (exposed_p - modelled(p)))

  the offset measured at the anchor (the largest measured multi-device scale) carrying what
  the model misses there (contention, the framework).
* straggler(N) = sigma m(N): every rank waits each step for the slowest of N; with per-rank
  step times of spread sigma, the expected maximum of N draws is sigma m(N) above the mean
  (sigma is kept as a share of the step's compute, so it shrinks with the per-device batch)
  (m: the expected maximum of N standard normals, m(2) = 0.56, m(64) = 2.4, m(512) = 3.0).
  sigma is fitted (least squares through 0) to the measured waits (rank skew + rotating
  stragglers) at each multi-device scale.
* overlap (backward slowed by the all-reduce beside it) and other (the step's unexplained
  rest, never below 0: a step faster than its parts is noise) stay as at the anchor.

Efficiency at N is the per-device throughput b/T(N) over the baseline's (as in the scaling
table), speedup = efficiency x N / baseline world size. A what-if that changes the per-device
batch changes the baseline's step by the same compute and input.

The interval is a prediction interval: percentiles of draws that (1) resample each measured
scale's runs with replacement (bootstrap over repeats), (2) draw the network's bus bandwidth
log-uniformly within its band, and (3) scale the step time's growth beyond the anchor by a
model error, exp(s Z) with s = :data:`MODEL_ERROR` (doubled with a single scaled point,
whose model cannot be checked against another scale). Assumptions: data parallelism only;
no bottleneck at scale other than the network term (no I/O limit, no memory change).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scalescope.allreduce_model import bus_factor, ddp_bucket_bytes

from .metrics import EFFICIENCY_REFERENCE
from .model_error import ErrorModel, features
from .model_error import load as load_error_model
from .stats import finite_mean

CARRIES = ("one-time", "network", "stragglers")
"""The structural explanations of the loss the parts leave at the anchor (``other``):
measurements that lack the parts (published tables) cannot tell them apart, and the
interval spans them (see :meth:`StepModel.carried_other`)."""
CARRY_WORDS = {
    "one-time": "a one-time step that keeps its share of the step",
    "network": "communication the model does not see, growing as the all-reduce does",
    "stragglers": "waiting for the slowest rank, growing with the number of ranks",
}
DRAWS = 400
BACKWARD_SHARE = 2.0 / 3.0
"""Share of a micro-batch's compute that is backward (forward : backward about 1 : 2)."""
INTERVAL = (2.5, 97.5)
SCAN_NODES = tuple(2**i for i in range(13))
"""Node counts scanned for the 75% crossing (up to 4096)."""


# --- the network --------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """The all-reduce cost at one level of the network, as fitted at ``at_world`` ranks."""

    alpha_s: float
    busbw_gbps: float
    at_world: int
    source: str


@dataclass(frozen=True)
class Network:
    """Intra-node and inter-node levels, and the band of the inter-node bus bandwidth.

    ``inter_band``: (low, high) factors on ``inter.busbw_gbps``; the central value is their
    geometric mean. ``inter`` is None where nothing says what crosses nodes (then only
    single-node scales can be projected)."""

    intra: Level | None
    inter: Level | None
    inter_band: tuple[float, float] = (1.0, 1.0)
    note: str = ""
    measured_nodes: int = 1
    """Up to this many nodes the inter-node level is as measured (factor 1)."""
    missing: str = ""
    """Why a level the anchor needs is missing ('' when none is)."""

    def level(self, nodes: int) -> Level | None:
        return self.intra if nodes <= 1 else self.inter

    def factor(self, nodes: int, u: float | None = None) -> float:
        """The factor on the level's bus bandwidth at ``nodes``: 1 where measured, else the
        band's geometric middle, or the point ``u`` in [0, 1] of it (log scale)."""
        if nodes <= self.measured_nodes:
            return 1.0
        lo, hi = (math.log(b) for b in self.inter_band)
        return math.exp(lo + (0.5 if u is None else u) * (hi - lo))


def allreduce_s(level: Level, nbytes: float, world: int, bw_factor: float = 1.0) -> float:
    """t(n, N) of the module doc at ``world`` ranks (0 on one rank; NaN without a bandwidth,
    which is unknown, never infinite)."""
    if world <= 1:
        return 0.0
    scale = math.log2(world) / math.log2(level.at_world) if level.at_world > 1 else 1.0
    bw = level.busbw_gbps * bw_factor
    if not bw > 0:
        return math.nan
    return level.alpha_s * scale + nbytes * bus_factor(world) / (bw * 1e9)


def exposed_after_backward(
    times_s: Sequence[float], sizes: Sequence[float], backward_s: float
) -> float:
    """The all-reduce time left once backward ends, from a timeline of DDP's buckets.

    ``sizes`` and their all-reduce ``times_s`` in the order DDP sends them (the reverse of
    the parameters' order, which is the order backward produces their gradients). A bucket
    is ready when backward has produced all its bytes: at the share of ``backward_s`` that
    the bytes up to and including it are of the whole. The buckets run one after another on
    the communication stream, each starting when it is ready and its predecessor is done;
    what ends after backward is exposed. So one bucket holding every gradient is exposed
    whole, a large bucket that is ready near backward's end is exposed nearly whole, and many
    tiny buckets queue up behind their latencies."""
    total = math.fsum(sizes)
    if not times_s or total <= 0:
        return 0.0
    done = end = 0.0
    for t, nbytes in zip(times_s, sizes, strict=True):
        done += nbytes
        ready = backward_s * min(1.0, done / total)
        end = max(end, ready) + t
    return max(0.0, end - backward_s)


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
        times = [allreduce_s(level, b, world, bw) for b in buckets]
        backward = BACKWARD_SHARE * self.compute_s(batch, k) / k  # the last micro-batch's
        return exposed_after_backward(times, buckets, backward)

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
            self.carried_other(world, nodes, math.fsum(out.values()), out_compute, buckets, factor)
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
    ) -> float:
        """``other`` at ``world`` ranks, as :attr:`carry` says the anchor's carries:

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
            now = self.allreduce_total(world, self.anchor_nodes, buckets)
            then = self.allreduce_total(self.anchor_world, self.anchor_nodes, self.bucket_bytes)
            if math.isfinite(now) and math.isfinite(then) and then > 0:
                return self.other_s * now / then
        if self.carry == "stragglers" and expected_max(self.anchor_world) > 0:
            then = self.compute_s(self.per_device_batch, self.accumulate)
            if then > 0:
                growth = expected_max(world) / expected_max(self.anchor_world)
                return self.other_s * compute_s / then * growth
        # one-time: the same share of the step as at the anchor
        share = self.other_s / self.anchor_step_s() if self.anchor_step_s() > 0 else 0.0
        return rest_s * share / (1.0 - share) if share < 1.0 else self.other_s

    def allreduce_total(self, world: int, nodes: int, buckets: Sequence[float]) -> float:
        """Every bucket's all-reduce at ``world`` ranks on the network level of ``nodes``
        nodes (as measured there), one after another (seconds)."""
        level = self.network.level(nodes)
        if world <= 1 or level is None:
            return math.nan if level is None else 0.0
        bw = self.network.factor(nodes)
        return math.fsum(allreduce_s(level, b, world, bw) for b in buckets)

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
        model = replace(self, exposed_offset_s=offset, other_s=0.0)
        other = step_s - model.anchor_step_s()
        return replace(model, other_s=max(0.0, other) if math.isfinite(other) else 0.0)

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
    """One measured scale of a series: its runs' parts (analysis.waterfall.RunParts)."""

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


def _step_of(p: Any) -> float:
    b = p.per_device_batch_size
    return p.t_s * b if b else math.nan


def fit_series(
    points: Sequence[ScalePoint],
    baseline: ScalePoint,
    scaling_mode: str,
    network: Network | None = None,
    carry: str = CARRIES[0],
) -> Fit:
    """A :class:`StepModel` from a series' measured points (any order): the anchor is the
    largest multi-device point with a recorded breakdown and an all-reduce fit; what its
    parts leave of its step carries as ``carry`` says."""
    multi = [
        pt for pt in points if pt.world > 1 and any(p.recorded and p.bucket_bytes for p in pt.parts)
    ]
    if not multi:
        return Fit(
            None,
            "no multi-device run with a diagnosis (exposed communication, the "
            "all-reduce sweep and DDP's buckets): nothing to project from",
        )
    anchor = max(multi, key=lambda pt: (pt.world, pt.nodes))
    a_parts = [p for p in anchor.parts if p.recorded and p.bucket_bytes]
    b_parts = [p for p in baseline.parts if math.isfinite(p.t_s)]
    if not b_parts:
        return Fit(None, "the baseline has no steady-state throughput")
    net = network or network_from_points(multi)
    if (anchor.nodes > 1 and net.inter is None) or (anchor.nodes <= 1 and net.intra is None):
        return Fit(None, net.missing or "the anchor's all-reduce was not fitted")
    k = max(1, int(anchor.accumulate))
    batch = finite_mean([float(p.per_device_batch_size) for p in a_parts])
    # compute per micro-batch against its size, over the multi-device points
    xs, ys = [], []
    for pt in multi:
        rec = [p for p in pt.parts if p.recorded]
        kk = max(1, int(pt.accumulate))
        for p in rec:
            xs.append(p.per_device_batch_size / kk)
            ys.append(p.compute_step_s / kk)
    fixed, per_sample = _line(xs, ys)
    inputs = finite_mean([p.input_step_s / p.per_device_batch_size for p in a_parts])
    overlap = finite_mean([p.overlap_step_s for p in a_parts])
    overlap = 0.0 if math.isnan(overlap) else overlap
    # straggler spread as a share of each point's own compute (under strong scaling the
    # smaller scales have more compute per rank), against the expected maximum, through 0
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
    sigma_share = num / den if den else 0.0
    buckets = tuple(float(b) for b in a_parts[0].bucket_bytes)
    exposed_meas = finite_mean([p.comm_step_s for p in a_parts])
    draft = StepModel(
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
        baseline_batch=finite_mean([float(p.per_device_batch_size or 0) for p in b_parts]),
        baseline_world=baseline.world,
        scaling_mode=scaling_mode,
        carry=carry,
    )
    draft = replace(draft, sigma_share=sigma_share)
    model = draft.calibrated(exposed_meas, finite_mean([_step_of(p) for p in a_parts]))
    # scales beyond the baseline that the fit could use: a world size without a usable
    # breakdown checks nothing
    scaled = len({pt.world for pt in multi if pt.world != baseline.world})
    return Fit(model, "", scaled)


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


def network_from_points(multi: Sequence[ScalePoint]) -> Network:
    """The levels the sweep measured: intra-node from its largest single-node point,
    inter-node from its largest multi-node one, with the band the number of nodes allows."""

    def level(pts: Sequence[ScalePoint], where: str) -> Level | None:
        if not pts:
            return None
        pt = max(pts, key=lambda q: (q.nodes, q.world))
        rec = [p for p in pt.parts if p.recorded]
        alpha = finite_mean([p.alpha_s for p in rec])
        bw = finite_mean([p.fit_busbw_gbps for p in rec])
        source = f"{where}: the all-reduce sweep of the {pt.nodes}x{pt.devices_per_node} runs"
        if not math.isfinite(bw):  # a latency-only fit: never an infinite bandwidth
            bw = finite_mean([p.busbw_gbps for p in rec])
            source += " (its fit had no bandwidth term: the bus bandwidth of its largest message)"
        if not math.isfinite(alpha) or not math.isfinite(bw) or bw <= 0:
            return None
        return Level(alpha, bw, pt.world, source)

    intra = level([p for p in multi if p.nodes <= 1], "intra-node")
    inter_pts = [p for p in multi if p.nodes > 1]
    inter = level(inter_pts, "inter-node")
    missing = (
        "the all-reduce sweep measured no bus bandwidth (latency-bound, or cut short by "
        "diagnosis.allreduce_budget_s): nothing says what a larger gradient costs; pass "
        "--network with the cluster's bus bandwidth"
    )
    if inter is None and inter_pts:
        return Network(intra, None, missing=missing)
    if inter is not None:
        most = max(p.nodes for p in inter_pts)
        if most <= 2:
            return Network(
                intra,
                inter,
                (0.5, 1.0),
                measured_nodes=most,
                note=(
                    "inter-node bus bandwidth measured at 2 nodes only, taken at 50-100% of it "
                    "beyond: at 2 nodes NCCL's tree can show about twice the per-NIC figure, "
                    "and bus bandwidth falls from 2 to 6 nodes and across racks"
                ),
            )
        return Network(
            intra,
            inter,
            (0.7, 1.0),
            measured_nodes=most,
            note=(
                f"inter-node bus bandwidth measured at {most} nodes, taken at 70-100% of it "
                "beyond (it falls again across racks)"
            ),
        )
    if intra is None:
        return Network(None, None, missing=missing)
    assumed = Level(
        intra.alpha_s,
        intra.busbw_gbps,
        intra.at_world,
        "inter-node: assumed from the intra-node sweep (no multi-node run)",
    )
    return Network(
        intra,
        assumed,
        (0.1, 1.0),
        note=(
            "no multi-node run and no --network profile: inter-node bus bandwidth assumed at "
            "10-100% of the intra-node one measured; run 2 nodes or pass --network for a "
            "narrower band"
        ),
    )


def network_from_profile(profile: Mapping[str, Any], intra: Level | None) -> Network:
    """A user's cluster profile (``--network FILE``): the inter-node bus bandwidth (GB/s)
    and latency at the target size, e.g. from nccl-tests there; band +-15%."""
    bw = float(profile["inter_busbw_gbps"])
    alpha = float(profile.get("inter_alpha_s") or (intra.alpha_s if intra else 0.0))
    at = int(profile.get("at_world_size") or (intra.at_world if intra else 2))
    source = str(profile.get("source") or "the --network profile")
    inter = Level(alpha, bw, at, f"inter-node: {source}")
    return Network(
        intra,
        inter,
        (0.85, 1.15),
        note=(f"inter-node bus bandwidth {bw:g} GB/s from {source} (+-15%)"),
    )


# --- drawing the interval -----------------------------------------------------------------


@dataclass(frozen=True)
class WhatIf:
    name: str
    batch_factor: float = 1.0
    accumulate: int | None = None
    bucket_cap_bytes: float | None = None
    grad_bytes_factor: float = 1.0


def what_ifs(model: StepModel, precision: str = "") -> list[WhatIf]:
    """The settings that move data-parallel efficiency, as lines of the table."""
    out = [WhatIf("as measured")]
    out.append(WhatIf("per-device batch x2", batch_factor=2.0))
    k = 4 if model.accumulate < 4 else 2 * model.accumulate
    out.append(WhatIf(f"accumulation {k}", accumulate=k))
    out.append(WhatIf("DDP buckets of 100 MB", bucket_cap_bytes=100e6))
    if "bf16-true" not in precision and "16-true" not in precision:
        out.append(WhatIf("gradients in bf16", grad_bytes_factor=0.5))
    return out


def _apply(model: StepModel, w: WhatIf) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    if w.batch_factor != 1.0:
        kw["batch"] = model.per_device_batch * w.batch_factor
    if w.accumulate is not None:
        kw["k"] = w.accumulate
        # k micro-batches of the measured size: k times the samples per optimizer step
        kw["batch"] = kw.get("batch", model.per_device_batch) * w.accumulate / model.accumulate
    buckets = model.bucket_bytes
    if w.bucket_cap_bytes is not None:
        buckets = tuple(ddp_bucket_bytes(int(sum(buckets)), int(w.bucket_cap_bytes)))
    if w.grad_bytes_factor != 1.0:
        buckets = tuple(b * w.grad_bytes_factor for b in buckets)
    if buckets != model.bucket_bytes:
        kw["buckets"] = buckets
    return kw


def centre_of(
    model: StepModel, world: int, nodes: int, kw: Mapping[str, Any]
) -> tuple[str, tuple[float, dict[str, float], float]]:
    """The explanation the centre assumes at ``world`` ranks and its (efficiency, parts,
    per-device batch): the middle of :data:`CARRIES` by efficiency (the others bound it)."""
    got = [(c, replace(model, carry=c).efficiency(world, nodes, **kw)) for c in CARRIES]
    finite = sorted((r[0], c) for c, r in got if math.isfinite(r[0]))
    if not finite:
        return got[0][0], got[0][1]
    carry = finite[(len(finite) - 1) // 2][1]
    return carry, dict(got)[carry]


def run_noise(points: Sequence[ScalePoint], world: int) -> float:
    """The run-to-run noise of one run (relative s.d. of the per-device throughput) at the
    ``world``-rank point: its repeats' spread where there are two or more, never below the
    default (two runs that happen to agree say little about a third)."""
    from .model_error import NOISE_DEFAULT

    runs = [
        1.0 / p.t_s
        for pt in points
        if pt.world == world
        for p in pt.parts
        if math.isfinite(p.t_s) and p.t_s > 0
    ]
    if len(runs) < 2:
        return NOISE_DEFAULT
    mean = math.fsum(runs) / len(runs)
    sd = math.sqrt(math.fsum((r - mean) ** 2 for r in runs) / (len(runs) - 1))
    return max(NOISE_DEFAULT, sd / mean) if mean > 0 else NOISE_DEFAULT


def resample(points: Sequence[ScalePoint], rng: np.random.Generator) -> list[ScalePoint]:
    out = []
    for pt in points:
        if pt.parts:
            idx = rng.integers(0, len(pt.parts), len(pt.parts))
            out.append(replace(pt, parts=[pt.parts[i] for i in idx]))
        else:
            out.append(pt)
    return out


def project_points(
    fit: Fit,
    points: Sequence[ScalePoint],
    baseline: ScalePoint,
    scaling_mode: str,
    targets: Sequence[tuple[int, int]],
    *,
    profile: Mapping[str, Any] | None = None,
    precision: str = "",
    draws: int = DRAWS,
    seed: int = 0,
    error_model: ErrorModel | None = None,
) -> list[dict[str, Any]]:
    """Rows of (what-if, nodes, devices per node) with the central projection and its
    interval; ``targets`` are (nodes, devices per node).

    The centre is the middle of the structural explanations (:data:`CARRIES`) at the
    network band's middle, shifted by the error model's mean. Each draw resamples every
    measured scale's runs (the network's fit with them, unless ``profile`` gives it),
    takes the explanations in turn, a point of the network band and the error model's
    residual, with the run-to-run noise of one run (the anchor's repeats' spread where
    there are two or more, never below :data:`~.model_error.NOISE_DEFAULT`)."""
    model = fit.model
    assert model is not None
    # the shipped error model with this sweep's run-to-run noise; one given is used as it is
    em = error_model or replace(load_error_model(), noise=run_noise(points, model.anchor_world))
    rng = np.random.default_rng(seed)
    ifs = what_ifs(model, precision)
    samples: dict[tuple[str, int, int], list[float]] = {}
    for i in range(draws):
        base_draw = resample([baseline], rng)[0]
        pts = resample(points, rng)
        carry = CARRIES[i % len(CARRIES)]
        drawn = fit_series(pts, base_draw, scaling_mode, _network(pts, profile), carry).model
        u, z, z_noise = float(rng.uniform()), rng.standard_normal(), rng.standard_normal()
        if drawn is None:
            continue
        for w in ifs:
            kw = _apply(drawn, w)
            for nodes, dpn in targets:
                d, s = features(nodes * dpn, nodes, drawn.anchor_world, drawn.anchor_nodes)
                spread = math.sqrt(em.sd_d**2 * d + em.sd_s**2 * s)
                e, _, _ = drawn.efficiency(
                    nodes * dpn, nodes, bw=drawn.network.factor(nodes, u), **kw
                )
                e *= math.exp(float(em.mean(d, s)) + spread * z + em.noise * z_noise)
                samples.setdefault((w.name, nodes, dpn), []).append(e)
    rows = []
    for w in ifs:
        kw = _apply(model, w)
        for nodes, dpn in targets:
            world = nodes * dpn
            carry, (e, parts, batch) = centre_of(model, world, nodes, kw)
            d, s = features(world, nodes, model.anchor_world, model.anchor_nodes)
            e *= math.exp(float(em.mean(d, s)))
            k_used = int(parts.pop("k"))
            got = np.array([v for v in samples.get((w.name, nodes, dpn), []) if math.isfinite(v)])
            low, high = (
                (float(np.percentile(got, INTERVAL[0])), float(np.percentile(got, INTERVAL[1])))
                if len(got)
                else (math.nan, math.nan)
            )
            ratio = world / model.baseline_world
            x = batch / parts["step"] if parts["step"] > 0 else math.nan
            rows.append(
                {
                    "what_if": w.name,
                    "nodes": nodes,
                    "devices_per_node": dpn,
                    "world_size": world,
                    "per_device_batch_size": batch,
                    "accumulate_grad_batches": k_used,
                    "efficiency": e,
                    "efficiency_low": min(low, e),
                    "efficiency_high": max(high, e),
                    "speedup": e * ratio,
                    "speedup_low": min(low, e) * ratio,
                    "speedup_high": max(high, e) * ratio,
                    "throughput_per_device": x,
                    "throughput": x * world,
                    "centre_assumes": carry,
                    **{("step_s" if k == "step" else f"{k}_step_s"): v for k, v in parts.items()},
                }
            )
    return rows


# --- a summary's projection ---------------------------------------------------------------


PROJECTION_COLUMNS = [
    "series",
    "what_if",
    "nodes",
    "devices_per_node",
    "world_size",
    "per_device_batch_size",
    "accumulate_grad_batches",
    "efficiency",
    "efficiency_low",
    "efficiency_high",
    "speedup",
    "speedup_low",
    "speedup_high",
    "throughput_per_device",
    "throughput",
    "centre_assumes",
    "step_s",
    "compute_step_s",
    "input_step_s",
    "overlap_step_s",
    "exposed_comm_step_s",
    "straggler_step_s",
    "other_step_s",
    "network",
    "scaled_points",
]
"""Columns of ``projection.csv`` (and ``summary.json``'s ``projection``): efficiencies are
fractions, throughput in samples/s, ``_step_s`` seconds per optimizer step."""

CHECK_COLUMNS = [
    "series",
    "nodes",
    "devices_per_node",
    "world_size",
    "from_world_sizes",
    "measured",
    "predicted",
    "predicted_low",
    "predicted_high",
    "error_pts",
    "covered",
]
"""Columns of the leave-one-out self-check: the largest measured scale predicted from the
smaller ones (efficiencies as fractions)."""


@dataclass
class SeriesProjection:
    series: str
    fit: Fit
    network_note: str
    crossing: dict[str, tuple[int | None, int | None, int | None]]
    """what-if -> (central, earliest, latest) nodes below :data:`.metrics.EFFICIENCY_REFERENCE`."""
    devices_per_node: int


@dataclass
class ProjectionResult:
    table: pd.DataFrame
    checks: pd.DataFrame
    series: list[SeriesProjection]
    notes: list[str]


def _points_of(members: Sequence[Any], base: Any) -> tuple[list[ScalePoint], ScalePoint]:
    from .waterfall import group_parts

    def point(g: Any) -> ScalePoint:
        parts = [p for _, p in group_parts(g)]
        k = g.rows.get("accumulate_grad_batches", [1])
        kk = {int(v) for v in k if v == v and v is not None} or {1}
        if g is base:
            usable = [p for p in parts if math.isfinite(p.t_s) and p.per_device_batch_size]
        else:
            usable = [p for p in parts if p.recorded]
        return ScalePoint(g.world_size, g.nodes, g.devices_per_node, usable, max(kk))

    points = [point(g) for g in members]
    return points, points[members.index(base)]


def scan_crossing(
    model: StepModel, w: WhatIf, dpn: int, lows: Mapping[int, float], highs: Mapping[int, float]
) -> tuple[int | None, int | None, int | None]:
    """Nodes (of :data:`SCAN_NODES`) where efficiency first falls below the threshold: at the
    central projection, at its interval's low end (earliest), at its high end (latest)."""
    kw = _apply(model, w)
    central = next(
        (
            n
            for n in SCAN_NODES
            if n * dpn > model.baseline_world
            and model.efficiency(n * dpn, n, **kw)[0] < EFFICIENCY_REFERENCE
        ),
        None,
    )
    earliest = next((n for n in SCAN_NODES if lows.get(n, 1.0) < EFFICIENCY_REFERENCE), None)
    latest = next((n for n in SCAN_NODES if highs.get(n, 1.0) < EFFICIENCY_REFERENCE), None)
    return central, earliest, latest


def project(
    runs: pd.DataFrame,
    nodes: Sequence[int],
    *,
    devices_per_node: int | None = None,
    profile: Mapping[str, Any] | None = None,
    baseline: Any = None,
    confidence: float = 0.95,
    draws: int = DRAWS,
) -> ProjectionResult:
    """Every series' projection at ``nodes`` (devices per node: the sweep's largest, or
    ``devices_per_node``), its 75% crossing, and the leave-one-out self-check."""
    from .metrics import pick_baseline, series_scale_groups

    rows: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    out: list[SeriesProjection] = []
    notes: list[str] = []
    for _, label, members in series_scale_groups(runs, confidence):
        mode = str(members[0].rows["scaling_mode"].iloc[0])
        precision = str(members[0].rows["precision"].iloc[0])
        base, _ = pick_baseline(members, baseline)
        points, base_pt = _points_of(members, base)
        net = _network(points, profile)
        fit = fit_series(points, base_pt, mode, net)
        if fit.model is None:
            notes.append(f"{label}: no projection: {fit.reason}.")
            continue
        dpn = devices_per_node or max(g.devices_per_node for g in members)
        targets = [(n, dpn) for n in nodes]
        scan = [(n, dpn) for n in SCAN_NODES if n * dpn > base.world_size]
        all_targets = list(dict.fromkeys([*targets, *scan]))
        projected = project_points(
            fit,
            points,
            base_pt,
            mode,
            all_targets,
            profile=profile,
            precision=precision,
            draws=draws,
        )
        crossing = {}
        for w in what_ifs(fit.model, precision):
            these = [r for r in projected if r["what_if"] == w.name]
            lows = {r["nodes"]: r["efficiency_low"] for r in these}
            highs = {r["nodes"]: r["efficiency_high"] for r in these}
            crossing[w.name] = scan_crossing(fit.model, w, dpn, lows, highs)
        for r in projected:
            if (r["nodes"], r["devices_per_node"]) in targets:
                rows.append(
                    {
                        "series": label,
                        **r,
                        "network": fit.model.network.note,
                        "scaled_points": fit.scaled_points,
                    }
                )
        out.append(SeriesProjection(label, fit, fit.model.network.note, crossing, dpn))
        runs_at = min(len(pt.parts) for pt in points if pt.world > 1 and pt.parts)
        if runs_at < 3:
            notes.append(
                f"{label}: the projection's interval rests on {runs_at} run(s) at a scale; a "
                "bootstrap over so few repeats is too narrow: run 3 or more of each shape."
            )
        check = self_check(members, points, base, base_pt, mode, profile, precision, draws)
        if check is not None:
            checks.append({"series": label, **check})
    table = pd.DataFrame(rows, columns=PROJECTION_COLUMNS)
    return ProjectionResult(table, pd.DataFrame(checks, columns=CHECK_COLUMNS), out, notes)


def _network(points: Sequence[ScalePoint], profile: Mapping[str, Any] | None) -> Network:
    multi = [pt for pt in points if pt.world > 1 and any(p.recorded for p in pt.parts)]
    measured = network_from_points(multi)
    if profile is None:
        return measured
    return network_from_profile(profile, measured.intra)


def self_check(
    members: Sequence[Any],
    points: Sequence[ScalePoint],
    base: Any,
    base_pt: ScalePoint,
    mode: str,
    profile: Mapping[str, Any] | None,
    precision: str,
    draws: int,
) -> dict[str, Any] | None:
    """The largest measured scale predicted from the smaller ones (three scales or more,
    the baseline counted), against its measured efficiency."""
    worlds = sorted({pt.world for pt in points})
    if len(worlds) < 3:
        return None
    top = max(points, key=lambda pt: (pt.world, pt.nodes))
    # every scale as large as the one predicted is held out (a 1x4 beside a 2x2 too), so
    # the prediction comes from smaller world sizes alone, as it says
    rest = [pt for pt in points if pt.world < top.world]
    fit = fit_series(rest, base_pt, mode, _network(rest, profile))
    if fit.model is None or not top.parts:
        return None
    (row,) = project_points(
        fit,
        rest,
        base_pt,
        mode,
        [(top.nodes, top.devices_per_node)],
        profile=profile,
        precision=precision,
        draws=draws,
    )[:1]
    g = next(m for m in members if m.world_size == top.world and m.nodes == top.nodes)
    x = g.stats["steady_samples_per_s_per_device"].mean
    x_base = base.stats["steady_samples_per_s_per_device"].mean
    measured = x / x_base if x_base else math.nan
    return {
        "nodes": top.nodes,
        "devices_per_node": top.devices_per_node,
        "world_size": top.world,
        "from_world_sizes": ",".join(str(w) for w in worlds if w < top.world),
        "measured": measured,
        "predicted": row["efficiency"],
        "predicted_low": row["efficiency_low"],
        "predicted_high": row["efficiency_high"],
        "error_pts": 100.0 * (row["efficiency"] - measured),
        "covered": bool(row["efficiency_low"] <= measured <= row["efficiency_high"]),
    }


def _pc(fraction: float) -> str:
    """An efficiency in percent as the tables round it where it matters: whole points from
    10% up, one decimal below (a 0.5% must not read 0%)."""
    value = 100 * fraction
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:.3g} ms"


def _nodes_word(n: int) -> str:
    return f"{n} node{'s' if n != 1 else ''}"


def _explanation(model: StepModel, row: Any) -> str:
    """Which explanation of the anchor's unexplained loss the centre assumes, and how far
    apart the explanations put the projection (the interval spans them)."""
    if model.other_s <= 0:
        return (
            "The measured parts account for the largest measured scale's whole step, so no "
            "explanation of an unexplained loss enters the projection."
        )
    world, nodes = int(row["world_size"]), int(row["nodes"])
    alts = [replace(model, carry=c).efficiency(world, nodes)[0] for c in CARRIES]
    alts = [a for a in alts if math.isfinite(a)]
    share = model.other_s / model.anchor_step_s()
    lo, hi = (round(100 * min(alts)), round(100 * max(alts))) if alts else (0, 0)
    span = (
        f"; the explanations alone give {lo}-{hi}% there, and the interval spans them"
        if lo != hi
        else f"; the other explanations give about {lo}% there too"
        if alts
        else ""
    )
    return (
        f"Of the largest measured scale's step, {_ms(model.other_s)} ({100 * share:.0f}%) is "
        f"not explained by its parts; the centre takes it as "
        f"{CARRY_WORDS[str(row['centre_assumes'])]}{span}."
    )


def findings(result: ProjectionResult) -> list[dict[str, str]]:
    """A paragraph per projected series: where efficiency goes at the largest N, where it
    falls below 75%, and which what-if moves it most."""
    out = []
    for sp in result.series:
        rows = result.table[result.table["series"] == sp.series]
        if rows.empty:
            continue
        top = rows[rows["nodes"] == rows["nodes"].max()]
        plain = top[top["what_if"] == "as measured"].iloc[0]
        e, lo, hi = plain["efficiency"], plain["efficiency_low"], plain["efficiency_high"]
        text = [
            f"At {_nodes_word(int(plain['nodes']))} ({int(plain['world_size'])} devices) the "
            f"projected efficiency is {_pc(e)}% [{_pc(lo)}, {_pc(hi)}]"
            if math.isfinite(e)
            else f"At {_nodes_word(int(plain['nodes']))} no efficiency can be projected "
            "(less than one sample per device and micro-batch)"
        ]
        if math.isfinite(e):
            parts = {
                "exposed all-reduce": plain["exposed_comm_step_s"],
                "waiting for the slowest rank": plain["straggler_step_s"],
                "compute": plain["compute_step_s"],
                "input wait": plain["input_step_s"],
                "backward slowed by the all-reduce": plain["overlap_step_s"],
            }
            big = sorted(((v, k) for k, v in parts.items() if v > 0), reverse=True)[:3]
            text[0] += (
                f": a step of {_ms(plain['step_s'])}, of which "
                + ", ".join(f"{k} {_ms(v)}" for v, k in big)
                + "."
            )
        else:
            text[0] += "."
        central, earliest, latest = sp.crossing.get("as measured", (None, None, None))
        model = sp.fit.model
        assert model is not None
        if math.isfinite(e):
            text.append(_explanation(model, plain))
        if central is not None and central * sp.devices_per_node <= model.anchor_world:
            text.append(
                f"Efficiency is below 75% already at the largest measured scale "
                f"({model.anchor_world} devices)."
            )
        elif central is not None:
            span = ""
            if earliest is not None and (earliest, latest) != (central, central):
                end = _nodes_word(latest) if latest else f"beyond {_nodes_word(SCAN_NODES[-1])}"
                span = f" (between {_nodes_word(earliest)} and {end})"
            text.append(f"Efficiency falls below 75% at about {_nodes_word(central)}{span}.")
        elif earliest is not None:
            text.append(
                f"The central projection stays above 75% to {_nodes_word(SCAN_NODES[-1])}; "
                f"its interval reaches below it from {_nodes_word(earliest)}."
            )
        else:
            text.append(f"It stays above 75% to {_nodes_word(SCAN_NODES[-1])}.")
        others = top[top["what_if"] != "as measured"].dropna(subset=["efficiency"])
        if len(others) and math.isfinite(e):
            best = others.loc[others["efficiency"].idxmax()]
            gain = 100 * (best["efficiency"] - e)
            if gain >= 1:
                text.append(
                    f"Of the settings tried, {best['what_if']} moves it most: to "
                    f"{_pc(best['efficiency'])}% [{_pc(best['efficiency_low'])}, "
                    f"{_pc(best['efficiency_high'])}]."
                )
            else:
                text.append("None of the settings tried moves it by a point or more.")
        if sp.fit.scaled_points <= 1:
            text.append(
                "One scaled point only: the model cannot be checked against another scale; "
                "measure a second scale, and the self-check tests it there."
            )
        if sp.network_note:
            text.append(f"Network: {sp.network_note}.")
        out.append({"series": sp.series, "text": " ".join(text)})
    for _, c in result.checks.iterrows():
        verdict = "inside" if c["covered"] else "OUTSIDE"
        for item in out:
            if item["series"] == c["series"]:
                item["text"] += (
                    f" Self-check: {int(c['world_size'])} devices projected from "
                    f"{c['from_world_sizes']} alone gave {_pc(c['predicted'])}% "
                    f"[{_pc(c['predicted_low'])}, {_pc(c['predicted_high'])}], "
                    f"measured {_pc(c['measured'])}% ({c['error_pts']:+.0f} points, "
                    f"{verdict} the interval)."
                )
    return out


def check_notes(result: ProjectionResult) -> list[str]:
    """'Read this first' lines: series not projected, and self-checks the interval missed."""
    notes = list(result.notes)
    for _, c in result.checks.iterrows():
        if not c["covered"]:
            notes.append(
                f"{c['series']}: the projection's self-check missed: {int(c['world_size'])} "
                f"devices projected at {_pc(c['predicted'])}% "
                f"[{_pc(c['predicted_low'])}, {_pc(c['predicted_high'])}] from the "
                f"smaller scales, measured {_pc(c['measured'])}%: treat the projection "
                "with care."
            )
    return notes


def read_profile(path: str) -> dict[str, Any]:
    """A ``--network`` file: YAML with ``inter_busbw_gbps`` (GB/s, required) and optionally
    ``inter_alpha_s``, ``at_world_size`` and ``source``; or the output of nccl-tests'
    ``all_reduce_perf`` (or of ``benchmarks/allreduce.py``) run at the target size, to which
    the latency-bandwidth model is fitted. Raises ValueError naming what is wrong."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    table = allreduce_table(text)  # first: srun's "0: " prefixes make it a YAML mapping
    if table is not None:
        return _profile_from_table(path, *table)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: neither a YAML mapping with inter_busbw_gbps nor an all-reduce table "
            "(nccl-tests' all_reduce_perf output)"
        )
    known = {"inter_busbw_gbps", "inter_alpha_s", "at_world_size", "source"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(
            f"{path}: unknown key(s) {', '.join(map(str, unknown))}; known: "
            f"{', '.join(sorted(known))}"
        )
    for key in ("inter_busbw_gbps", "inter_alpha_s"):
        value = data.get(key)
        if key == "inter_busbw_gbps" and value is None:
            raise ValueError(f"{path}: inter_busbw_gbps is missing")
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
        ):
            raise ValueError(f"{path}: {key} must be a positive number, got {value!r}")
    at = data.get("at_world_size")
    if at is not None and (isinstance(at, bool) or not isinstance(at, int) or at < 2):
        raise ValueError(f"{path}: at_world_size must be an integer >= 2, got {at!r}")
    return data


_NCCL_ROW = (
    r"(\d+)\s+\d+\s+[a-z0-9_]+\s+[a-z]+\s+(?:-?\d+\s+)?"  # size, count, type, redop, root
    r"(\d+(?:\.\d+)?)\s+[\d.]+\s+[\d.]+\s+(?:\d+|N/A)"  # time (us), algbw, busbw, #wrong
)
"""A data row of nccl-tests' all_reduce_perf: size, count, type, redop, [root,] the
out-of-place time (us), algbw, busbw, #wrong -- after any prefix srun or mpirun adds."""
_TABLE_ROW = r"^\s*(\d+)\s+(\d+(?:\.\d+)?)\s+[\d.]+\s+[\d.]+\s*$"
"""A data row of benchmarks/allreduce.py: size, time (us), algbw, busbw."""


def allreduce_table(text: str) -> tuple[int | None, list[tuple[float, float]]] | None:
    """(ranks, [(bytes, seconds)]) from an all-reduce table: nccl-tests' ``all_reduce_perf``
    output (the out-of-place time) or ``benchmarks/allreduce.py``'s; None without a data row.
    Ranks: nccl-tests' ``#  Rank N`` lines, or the ``N ranks`` of the benchmark's header."""
    import re

    rows: list[tuple[float, float]] = []
    ranks: set[int] = set()
    declared = None
    for line in text.splitlines():
        rank = re.search(r"#\s+Rank\s+(\d+)\s", line)
        if rank:
            ranks.add(int(rank.group(1)))
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
    return (len(ranks) or declared), rows


def _profile_from_table(
    path: str, ranks: int | None, rows: list[tuple[float, float]]
) -> dict[str, Any]:
    from scalescope.allreduce_model import fit_model

    if ranks is None or ranks < 2:
        raise ValueError(f"{path}: the all-reduce table does not say how many ranks ran it")
    fit = fit_model(rows, ranks)
    if fit.get("busbw_gbps") is None or fit.get("alpha_s") is None:
        raise ValueError(f"{path}: no latency-bandwidth fit from its table ({fit.get('note')})")
    return {
        "inter_busbw_gbps": float(fit["busbw_gbps"]),
        "inter_alpha_s": max(float(fit["alpha_s"]), 1e-9),
        "at_world_size": ranks,
        "source": f"{Path(path).name} ({ranks} ranks, {len(rows)} sizes fitted)",
    }
