"""The network a series' step model runs on: the all-reduce cost at each level (within a
node, across nodes), as the series' own all-reduce sweeps measured it
(:func:`network_from_points`) or a cluster profile gives it (:func:`network_from_profile`),
with the band the interval draws the inter-node bus bandwidth from (see the module doc of
:mod:`.step_model`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analysis.compute.stats import finite_mean
from analysis.read.network_profile import LINE_RATE_KEY

UNKNOWN_INTER_BAND = (0.01, 1.0)
"""Where nothing measures or states the network between nodes (a sweep with no multi-node run
and no --network profile, a published case that states no link): its bus bandwidth spans
1-100% of the intra-node one (log scale, centre 10%). Clusters' links put it anywhere there:
NVLink's 300 GB/s a GPU beside 25-100 Gb/s of cloud Ethernet a node is 1-4% (the ptd_benchmark
cluster achieved about 1%, Horovod on AWS p3 about 2%), a DGX A100's 200 Gb/s InfiniBand rail a
GPU about 8%, PCIe beside InfiniBand or Ethernet beside Ethernet up to all of it. (10-100% before:
its floor was above every cloud and DGX cluster in the file.)"""

LINE_RATE_PRIOR = (0.05, 1.0)
"""The achieved inter-node bus bandwidth as a share of a stated line rate, before any case is
seen: a line rate is an upper bound, and a cluster can reach a twentieth of it (TCP over a
cloud's virtual network, one NIC shared by eight GPUs). The draws span it (log scale); the
error model narrows it to the band the training cases achieved
(:func:`analysis.compute.projection.scored.learn_share_band`)."""


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

    ``inter_band``: (low, high) factors on ``inter.busbw_gbps``; the central value is the
    point ``centre_u`` of it (log scale; 0.5, their geometric mean, unless a learned band
    says where its typical value lies). ``inter`` is None where nothing says what crosses
    nodes (then only single-node scales can be projected)."""

    intra: Level | None
    inter: Level | None
    inter_band: tuple[float, float] = (1.0, 1.0)
    note: str = ""
    measured_nodes: int = 1
    """Up to this many nodes the inter-node level is as measured (factor 1)."""
    missing: str = ""
    """Why a level the anchor needs is missing ('' when none is)."""
    centre_u: float = 0.5
    """Where in ``inter_band`` (log scale, 0 to 1) the central value lies."""

    def level(self, nodes: int) -> Level | None:
        return self.intra if nodes <= 1 else self.inter

    def factor(self, nodes: int, u: float | None = None) -> float:
        """The factor on the level's bus bandwidth at ``nodes``: 1 where measured, else the
        band's centre (:attr:`centre_u`), or the point ``u`` in [0, 1] of it (log scale)."""
        if nodes <= self.measured_nodes:
            return 1.0
        lo, hi = (math.log(b) for b in self.inter_band)
        return math.exp(lo + (self.centre_u if u is None else u) * (hi - lo))


def network_from_points(multi: Sequence[Any]) -> Network:
    """The levels the sweep measured (``multi``: its multi-device scale points,
    :class:`.step_model.ScalePoint`): intra-node from its largest single-node point,
    inter-node from its largest multi-node one, held beyond it (the error model carries the
    rest), or assumed within :data:`UNKNOWN_INTER_BAND` of the intra-node one where none is."""
    intra = _measured_level([p for p in multi if p.nodes <= 1], "intra-node")
    inter_pts = [p for p in multi if p.nodes > 1]
    inter = _measured_level(inter_pts, "inter-node")
    missing = (
        "the all-reduce sweep measured no bus bandwidth (latency-bound, or cut short by "
        "diagnosis.allreduce_budget_s): nothing says what a larger gradient costs; pass "
        "--network with the cluster's bus bandwidth"
    )
    if inter is None and inter_pts:
        return Network(intra, None, missing=missing)
    if inter is not None:
        most = max(p.nodes for p in inter_pts)
        # held beyond the largest measured node count, as the backtest scores a published
        # case measured across nodes: how it falls beyond is the error model's to carry (its
        # mean from an anchor across nodes, fitted on points projected from such anchors)
        return Network(
            intra,
            inter,
            (1.0, 1.0),
            measured_nodes=most,
            note=(
                f"inter-node bus bandwidth measured at {most} nodes, held beyond it; the "
                "interval's error model carries how published clusters fell beyond their "
                "largest measured scale"
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
    low, high = UNKNOWN_INTER_BAND
    return Network(
        intra,
        assumed,
        UNKNOWN_INTER_BAND,
        note=(
            "no multi-node run and no --network profile: inter-node bus bandwidth assumed at "
            f"{100 * low:g}-{100 * high:g}% of the intra-node one measured; run 2 nodes or pass "
            "--network for a narrower band"
        ),
    )


def _measured_level(pts: Sequence[Any], where: str) -> Level | None:
    """The level the all-reduce sweep of the largest of ``pts`` fitted (None without one)."""
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


def network_from_profile(
    profile: Mapping[str, Any],
    intra: Level | None,
    share_band: tuple[float, float, float] | None = None,
) -> Network:
    """A user's cluster profile (``--network FILE``): the inter-node bus bandwidth (GB/s)
    and latency at the target size, e.g. from nccl-tests there; band +-15%. A stated line
    rate instead (``inter_line_rate_gbit_s``) is an upper bound: :func:`from_line_rate`."""
    if profile.get(LINE_RATE_KEY) is not None:
        return from_line_rate(profile, intra, share_band)
    bw = float(profile["inter_busbw_gbps"])
    inter, source = _profile_level(profile, intra, bw, "inter-node: ")
    low, high = PROFILE_BAND
    return Network(
        intra,
        inter,
        PROFILE_BAND,
        note=(f"inter-node bus bandwidth {bw:g} GB/s from {source} (+-15%)"),
        centre_u=math.log(1 / low) / math.log(high / low),  # the centre is the profile's own
    )


PROFILE_BAND = (0.85, 1.15)
"""The band around a profile's inter-node bus bandwidth (``--network``): +-15%, its centre the
figure the profile gives (not the band's geometric middle, which is 1.1% below it)."""


def from_line_rate(
    profile: Mapping[str, Any],
    intra: Level | None,
    share_band: tuple[float, float, float] | None,
) -> Network:
    """A stated inter-node line rate (``inter_line_rate_gbit_s``, Gb/s a node, every NIC
    together; the published cases' ``inter_busbw_gbps`` is the same quantity in GB/s): the
    bus bandwidth achieved is a share of it, spanned over ``share_band`` (low, typical, high),
    the band the shipped error model learned from the published clusters that state a line
    rate, the centre at its typical share; :data:`LINE_RATE_PRIOR` where no band was
    learned."""
    gbit = float(profile[LINE_RATE_KEY])
    inter, source = _profile_level(profile, intra, gbit / 8.0, "inter-node: a stated line rate, ")
    # no learned band (an error model fitted without cases that state a line rate): the prior
    low, typical, high = share_band or (
        LINE_RATE_PRIOR[0],
        math.sqrt(LINE_RATE_PRIOR[0] * LINE_RATE_PRIOR[1]),
        LINE_RATE_PRIOR[1],
    )
    lo, hi = math.log(low), math.log(high)
    centre_u = (math.log(typical) - lo) / (hi - lo) if hi > lo else 0.5
    return Network(
        intra,
        inter,
        (low, high),
        centre_u=centre_u,
        note=(
            f"inter-node line rate {gbit:g} Gb/s a node stated in {source}: an upper bound; "
            f"the bus bandwidth achieved spans {100 * low:.0f}-{100 * high:.0f}% of it "
            f"(typical {100 * typical:.0f}%), the share published clusters on a stated line "
            "rate reached; run 2 nodes, or pass nccl-tests' output, to measure it"
        ),
    )


def _profile_level(
    profile: Mapping[str, Any], intra: Level | None, busbw_gbps: float, what: str
) -> tuple[Level, str]:
    """The inter-node level a profile gives at ``busbw_gbps``: its latency and rank count,
    else the intra-node level's; and where it came from (``source``), which the level's own
    source follows ``what`` with."""
    alpha = float(profile.get("inter_alpha_s") or (intra.alpha_s if intra else 0.0))
    at = int(profile.get("at_world_size") or (intra.at_world if intra else 2))
    source = str(profile.get("source") or "the --network profile")
    return Level(alpha, busbw_gbps, at, f"{what}{source}"), source
