"""The published cases as the projection sees them: each case's step model, its draws and
the points they prepare for scoring (:mod:`.backtest` scores them).

Each case (format: ``benchmarks/projection_cases.yaml``, read by :mod:`analysis.read.cases`)
gives a model's gradient bytes and buckets, the hardware's devices per node and link
bandwidths, its ``measured`` small-scale throughputs (what a user would have run) and its
``published`` larger-scale ones (the truth).
From the measured points alone, the step model of :mod:`analysis.compute.projection.project`
predicts each published point's efficiency against one node (or one GPU), with its interval.

The step model needs what a scalescope record has and a published table lacks; a case fills
it from what it states, and the rest is an assumption, drawn over its band in the interval:

* compute per step: the 1-GPU point's step time when measured, else the 1-node step less the
  intra-node all-reduce the model exposes there;
* all-reduce: the case's buckets as its method makes them (``scalescope.allreduce_model.
  bucket_caps``: DDP's, Horovod's fusion buffers, or one message where the case says neither
  method nor cap; ``bucket_mb`` the cap it sets, else the method's default) on a latency-bandwidth
  model with latency ``ALPHA_INTRA_S`` / ``ALPHA_INTER_S`` at 2 ranks and the case's bus
  bandwidths: inter-node a share of the stated link (a line rate is an upper bound) within the
  band the error model learned from the training cases that state one (drawn within
  ``LINE_RATE_PRIOR``, kept within the learned band), or
  ``UNKNOWN_INTER_BAND`` of the intra-node one where the case states none. No case measures
  its inter-node bandwidth (a stated link is a line rate), so one draw from the band holds
  from the anchor to every target: a multi-node anchor's level is drawn too, never taken as
  measured, and no step appears between the anchor's nodes and more;
* stragglers: sigma = ``SIGMA_SHARE`` of the step's compute (drawn from 0 to twice that);
* the rest of the anchor's step (the whole loss, since a table has no parts) carried by each
  of the projection's explanations in turn
  (:data:`analysis.compute.projection.step_time.step_model.CARRIES`);
* FSDP's cases: the share of what prefetching can hide that it does, within
  ``FSDP_HIDDEN_BAND`` (:mod:`analysis.compute.projection.step_time.fsdp_comm`; the centre:
  all of it);
* the error model: the shipped one (:mod:`analysis.compute.projection.model_error`), or for
  cross-validation one fitted on the other sources.

FSDP's cases (``model.method: fsdp``) take the same steps with FSDP's communication for the
all-reduce (:mod:`analysis.compute.projection.step_time.fsdp_comm`: each of ``wrapped_blocks``
blocks gathers its share of ``grad_bytes`` before forward and backward and reduce-scatters it, the
next block's gather behind the current block's compute), and are scored apart
(:func:`.backtest.split`): never fitted into the shipped error model, and scored with its spreads
and the widest noise of its grid (:func:`.backtest.fsdp_error_model`) until there are enough of
them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from analysis.compute.projection.interval import DRAWS
from analysis.compute.projection.model_error import (
    MEASURED_NOISE,
    beyond_anchor,
    features,
    within_one_node,
)
from analysis.compute.projection.published.unknowns import (
    PATTERNS,
    SCALINGS,
    SYNCS,
    centred_between,
    unknown_pattern,
    unknown_scaling,
    unknown_sync,
    variants,
)
from analysis.compute.projection.scored import Scored
from analysis.compute.projection.step_time.fsdp_comm import (
    FSDP_HIDDEN_BAND,
    FsdpStepModel,
    block_bytes,
)
from analysis.compute.projection.step_time.network import (
    LINE_RATE_PRIOR,
    UNKNOWN_INTER_BAND,
    Level,
    Network,
)
from analysis.compute.projection.step_time.step_model import CARRIES, StepModel, expected_max
from analysis.read.cases import Case, CaseError, Point, is_fsdp, read_cases
from scalescope.allreduce_model import split_into_buckets

ALPHA_INTRA_S = 20e-6
ALPHA_INTER_S = 50e-6
UNKNOWN_INTER_SHARE = 1.0
INTRA_DEFAULT_GBPS = 100.0
SIGMA_SHARE = 0.01


def reference(case: Case) -> tuple[Point, str]:
    """The measured point efficiencies are scored against: one node where the published
    points give an efficiency against it, else one GPU; and the published field to use."""
    d = case.devices_per_node
    one_node = next((p for p in case.measured if p.nodes == 1 and p.devices_per_node == d), None)
    if one_node is not None and all(p.efficiency_vs_1node is not None for p in case.published):
        return one_node, "efficiency_vs_1node"
    one_gpu = next(p for p in case.measured if p.nodes * p.devices_per_node == 1)
    return one_gpu, "efficiency_vs_1gpu"


def case_model(
    case: Case,
    *,
    sigma_share: float = SIGMA_SHARE,
    carry: str = "one-time",
    band_u: float = 0.5,
    hidden: float = 1.0,
    pattern: str = PATTERNS[0],
    scaling: str = SCALINGS[0],
    sync: str = SYNCS[0],
) -> StepModel:
    """The step model a case's measured points give (see the module doc), with what it
    leaves of the anchor's step carried as ``carry`` says (:data:`~..step_time.step_model.CARRIES`),
    and its inter-node bus bandwidth at the point ``band_u`` in [0, 1] of its band (log
    scale; 0.5 its middle), the same at the anchor and every target. ``hidden``: for an
    FSDP case, the share of what prefetching can hide that it does hide (FSDP_HIDDEN_BAND).
    ``pattern``: for a method whose communication the file does not know, one of
    :data:`PATTERNS` (one message after backward, or DDP's buckets). ``scaling``: for a case
    whose scaling mode is unknown, one of :data:`SCALINGS`. ``sync``: for a case that does not
    say when it syncs its gradients under accumulation, one of :data:`SYNCS`."""
    if unknown_scaling(case):
        case = replace(case, scaling=scaling)
    if unknown_sync(case):
        case = replace(case, grad_sync=sync)
    d = case.devices_per_node
    b = case.per_device_batch
    ref, _ = reference(case)
    one_node = next((p for p in case.measured if p.nodes == 1 and p.devices_per_node == d), None)
    one_gpu = next((p for p in case.measured if p.nodes * p.devices_per_node == 1), None)
    t_node = b / (one_node or ref).throughput_per_device
    draft = _draft(case, ref, sigma_share, carry, band_u, hidden, pattern)
    compute = _compute_step(case, draft, one_gpu, t_node)
    model = draft.with_fields(compute_per_sample_s=compute / b)
    if one_node is None:  # only 1 GPU measured: it is the anchor, nothing to offset
        return model.with_fields(anchor_world=1, anchor_nodes=1)
    return _anchored(case, model, t_node)


def _draft(
    case: Case,
    ref: Point,
    sigma_share: float,
    carry: str,
    band_u: float,
    hidden: float = 1.0,
    pattern: str = "one message",
) -> StepModel:
    """The case's model before its compute is known: its buckets, its network (the stated
    links, or assumed ones, the inter-node one at ``band_u`` of its band) and its reference
    point's step, anchored at one node."""
    d = case.devices_per_node
    b, k = case.per_device_batch, case.grad_accum
    buckets = _messages(case, pattern)
    intra_bw = case.intra_busbw_gbps or INTRA_DEFAULT_GBPS
    intra = Level(
        ALPHA_INTRA_S,
        intra_bw,
        2,
        "intra-node: the case's link" if case.intra_busbw_gbps else "intra: assumed",
    )
    if case.inter_busbw_gbps:
        inter = Level(ALPHA_INTER_S, case.inter_busbw_gbps, 2, "inter-node: the case's link")
        band = LINE_RATE_PRIOR
    else:
        inter = Level(ALPHA_INTER_S, intra_bw * UNKNOWN_INTER_SHARE, 2, "inter-node: assumed")
        band = UNKNOWN_INTER_BAND
    # one bandwidth from the anchor to the targets: the band's draw fixed in the level
    drawn = Network(None, None, band).factor(2, band_u)
    inter = replace(inter, busbw_gbps=inter.busbw_gbps * drawn)
    net = Network(intra, inter, (1.0, 1.0), "", measured_nodes=1)
    strong = case.scaling == "strong"
    ref_world = ref.nodes * ref.devices_per_node
    return _model_class(case)(
        per_device_batch=b,
        accumulate=k,
        compute_fixed_s=0.0,
        compute_per_sample_s=0.0,
        input_per_sample_s=0.0,
        overlap_s=0.0,
        other_s=0.0,
        sigma_share=sigma_share,
        bucket_bytes=buckets,
        network=net,
        anchor_world=d,
        anchor_nodes=1,
        exposed_offset_s=0.0,
        # the reference's step: under strong scaling it holds the whole node's samples
        baseline_step_s=(b * d / ref_world if strong else b) / ref.throughput_per_device,
        baseline_batch=b * d / ref_world if strong else b,
        baseline_world=ref_world,
        scaling_mode=case.scaling,
        carry=carry,
        sync_every_micro_batch=case.grad_sync == "micro-batch",
        **_strategy_fields(case, hidden),
    )


def _messages(case: Case, pattern: str = "one message") -> tuple[float, ...]:
    """What the network term times: DDP's (or Horovod's) buckets, or FSDP's wrapped blocks'
    gathered bytes (``grad_bytes`` shared evenly over ``wrapped_blocks``); for a method the
    file does not know, ``pattern`` (:data:`PATTERNS`) says which end of the span."""
    if is_fsdp(case):
        return block_bytes(case.grad_bytes, case.wrapped_blocks or 1)
    if unknown_pattern(case) and pattern == "ddp":
        return tuple(split_into_buckets(int(case.grad_bytes), "ddp", None))
    return tuple(split_into_buckets(int(case.grad_bytes), case.method, case.bucket_mb))


def _model_class(case: Case) -> type[StepModel]:
    return FsdpStepModel if is_fsdp(case) else StepModel


def _strategy_fields(case: Case, hidden: float = 1.0) -> dict[str, Any]:
    """FSDP's fields of its step model (every published case ran on GPUs: prefetch hides a
    block's gather behind the block before, ``hidden`` of what it can; HSDP's shard groups);
    none for DDP's."""
    if not is_fsdp(case):
        return {}
    return {
        "reshard_after_forward": case.reshard_after_forward,
        "hidden_share": hidden,
        "shard_size": case.shard_size,
    }


def _compute_step(case: Case, draft: StepModel, one_gpu: Point | None, t_node: float) -> float:
    """Compute per step: the 1-GPU point's step time when measured, else the 1-node step
    ``t_node`` less what the model exposes there."""
    d = case.devices_per_node
    b, k = case.per_device_batch, case.grad_accum
    if one_gpu is not None:
        return b / one_gpu.throughput_per_device
    # a fixed point: the model hides less when compute is shorter
    compute = t_node
    for _ in range(20):
        trial = draft.with_fields(compute_per_sample_s=compute / b)
        exposed = trial.modelled_exposed(d, 1, draft.bucket_bytes, k, 1.0, b)
        compute = max((t_node - exposed) / (1 + draft.sigma_share * expected_max(d)), 0.1 * t_node)
    return compute


def _anchored(case: Case, model: StepModel, t_node: float) -> StepModel:
    """The model anchored at the largest measured multi-node point, else at the 1-node one
    (step ``t_node``), with what it leaves of the anchor's step carried."""
    d = case.devices_per_node
    b, k = case.per_device_batch, case.grad_accum
    strong = case.scaling == "strong"
    multi = [p for p in case.measured if p.nodes > 1]
    if multi:  # the largest measured multi-node point is the anchor
        top = max(multi, key=lambda p: p.nodes)
        world = top.nodes * top.devices_per_node
        # strong scaling: the anchor's per-device batch is the 1-node one over the ranks,
        # its accumulation shrinking first (the micro-batch kept)
        b_a = b * d / world if strong else b
        k_a = max(1, math.floor(k * d / world + 1e-9)) if strong else k
        model = model.with_fields(
            per_device_batch=b_a,
            accumulate=k_a,
            anchor_world=world,
            anchor_nodes=top.nodes,
        )
        # what the model leaves of the measured step is carried as `carry` says
        return model.calibrated(math.nan, b_a / top.throughput_per_device)
    # the 1-node point is the anchor: what the model leaves over there is carried
    return model.calibrated(math.nan, t_node)


def _predict(model: StepModel, p: Point, bw: float | None) -> float:
    world = p.nodes * p.devices_per_node
    e, _, _ = model.efficiency(world, p.nodes, bw=bw)
    return e


def centre_carry(case: Case, p: Point) -> tuple[str, float]:
    """The explanation the centre assumes, and its efficiency: of the structural
    alternatives, the middle one at the network band's middle (the others bound it)."""
    centres = []
    for ends in variants(case):
        got = sorted((_predict(case_model(case, carry=c, **ends), p, None), c) for c in CARRIES)
        finite = [(e, c) for e, c in got if math.isfinite(e)]
        if not finite:
            return CARRIES[0], math.nan
        centres.append(finite[(len(finite) - 1) // 2])
    if len(centres) == 1:
        e, c = centres[0]
        return c, e
    # an unknown: the centre between its ends (geometric; a pair's by sqrt, correctly
    # rounded, so a case with one unknown keeps the centre it had to the bit)
    product = math.prod(x for x, _ in centres)
    e = math.sqrt(product) if len(centres) == 2 else product ** (1 / len(centres))
    return "; ".join([centres[0][1], *centred_between(case)]), e


def evidence(case: Case) -> list[tuple[Point, float]]:
    """The measured scales a case's draws are checked against: where it measured several
    node counts, every measured point at or above the reference's size, with its efficiency
    against the reference (per-device throughput over the reference's). The reference is
    among them (its efficiency is 1 by definition, which a model calibrated at the anchor
    need not reproduce), and so is the anchor (the largest multi-node one): a draw whose
    modelled communication alone outlasts the anchor's measured step cannot be calibrated
    to it (the rest is never below 0), and is as inconsistent with it as with any other
    scale. None where only one node count was measured."""
    if not any(p.nodes > 1 for p in case.measured):
        return []
    ref, _ = reference(case)
    ref_world = ref.nodes * ref.devices_per_node
    return [
        (p, p.throughput_per_device / ref.throughput_per_device)
        for p in case.measured
        if p.nodes * p.devices_per_node >= ref_world
    ]


def evidence_weight(model: StepModel, checks: Sequence[tuple[Point, float]]) -> float:
    """How well one draw's model reproduces the measured scales it did not anchor on: the
    likelihood of their efficiencies under MEASURED_NOISE (relative, one s.d.)."""
    log_w = 0.0
    for q, measured in checks:
        e = _predict(model, q, None)
        if not (math.isfinite(e) and e > 0):
            return 0.0
        log_w -= 0.5 * (math.log(e / measured) / MEASURED_NOISE) ** 2
    return math.exp(log_w)


def anchor_ceiling(case: Case, anchor: StepModel, p: Point) -> float:
    """The most ``p``'s efficiency can be before its noise (``scored.Scored.ceiling``): where
    ``p`` is beyond the anchor (:func:`..model_error.beyond_anchor`), the anchor's efficiency
    (against the reference) as the measured full-node scales ``p`` is beyond say it is when
    efficiency never rises with scale (:func:`monotone_last`): ``p`` does their work per
    device and communicates more, and a table's one number a scale carries its noise (285
    images/s a GPU at 6 machines, 282 at 5: the bound is their mean, not the 6's); else no
    bound (inf)."""
    world = p.nodes * p.devices_per_node
    if not beyond_anchor(world, p.nodes, anchor.anchor_world, anchor.anchor_nodes):
        return math.inf
    ref, _ = reference(case)
    below = sorted(
        (q.nodes, q.throughput_per_device / ref.throughput_per_device)
        for q in case.measured
        if q.devices_per_node == case.devices_per_node
        and beyond_anchor(world, p.nodes, q.nodes * q.devices_per_node, q.nodes)
        and q.nodes < anchor.anchor_nodes
    )
    top = next(
        q
        for q in case.measured
        if q.nodes == anchor.anchor_nodes and q.nodes * q.devices_per_node == anchor.anchor_world
    )
    return monotone_last(
        [e for _, e in below] + [top.throughput_per_device / ref.throughput_per_device]
    )


def monotone_last(efficiencies: Sequence[float]) -> float:
    """The last of ``efficiencies`` (the smallest scale first) as their least-squares
    non-increasing fit puts it (pool-adjacent-violators' last value): the least mean of a run
    of them that ends with the last."""
    return min(float(np.mean(efficiencies[j:])) for j in range(len(efficiencies)))


def walk_forward(cases: Sequence[Case]) -> list[Case]:
    """Each case's published points projected as a user's sweep would be: every published
    point that has smaller published scales below it becomes a case of its own, whose
    measured points are the case's own and every smaller published scale (the largest the
    anchor, the rest evidence of what the network achieves, :func:`evidence`), and whose one
    published point is it. Named ``<case> @<nodes>``, in the same source and family (a fold
    holds them out with their case)."""
    out = []
    for case in cases:
        for p in case.published:
            smaller = tuple(q for q in case.published if q.nodes < p.nodes)
            if smaller:
                name = f"{case.name} @{p.nodes}"
                out.append(
                    replace(case, name=name, measured=case.measured + smaller, published=(p,))
                )
    return out


def line_share(case: Case, u: float) -> float:
    """The share of its stated line rate a draw at ``u`` gives a case (NaN where the case
    states no inter-node link)."""
    if not case.inter_busbw_gbps:
        return math.nan
    return Network(None, None, LINE_RATE_PRIOR).factor(2, u)


EVIDENCE_ESS = 0.25
"""The effective sample size, as a share of the draws, that the pool weighed by a case's
measured scales is grown towards before resampling (:func:`_drawn_models`): where they pin the
network sharply, 400 draws from the band left a handful carrying the weight (HKBU's
BERT-large over 10 GbE at 4 nodes: an effective size near 8, 7-11 distinct draws after
resampling). A Monte Carlo accuracy, not a setting any score chooses."""
EVIDENCE_POOL = 2
"""The most batches of draws the pool grows to (times the draws)."""


def _draw_batch(
    case: Case, first: int, n: int, rng: np.random.Generator, within: tuple[float, float]
) -> tuple[list[StepModel], list[float], list[float]]:
    """Draws ``first`` to ``first + n`` of a case (see :func:`_drawn_models`), their place in
    the network's band drawn within ``within`` (of 0-1): the models, their shares of a stated
    line rate and their places."""
    models, shares, places = [], [], []
    ends = variants(case)
    for i in range(first, first + n):
        sigma = float(rng.uniform(0.0, 2 * SIGMA_SHARE))
        u = float(rng.uniform(*within))
        # FSDP: how much of what prefetching can hide it does (no draw for DDP's cases)
        kw: dict[str, Any] = (
            {"hidden": float(rng.uniform(*FSDP_HIDDEN_BAND))} if is_fsdp(case) else {}
        )
        # an unknown pattern or scaling mode: each draw takes one end of the span in turn
        if len(ends) > 1:
            kw.update(ends[(i // len(CARRIES)) % len(ends)])
        models.append(
            case_model(case, sigma_share=sigma, carry=CARRIES[i % len(CARRIES)], band_u=u, **kw)
        )
        shares.append(line_share(case, u))
        places.append(u)
    return models, shares, places


def _drawn_models(
    case: Case, draws: int, rng: np.random.Generator
) -> tuple[list[StepModel], np.ndarray, bool]:
    """One model per draw, the share of the stated line rate each took (NaN where none is
    stated), and whether the draws were weighed by the case's measured scales: each of the
    explanations in turn, a straggler spread within 0-2x SIGMA_SHARE, an inter-node bandwidth
    within the band (the anchor's and the target's), for FSDP the share prefetching hides.
    Where the case measured several node counts, the draws are resampled by how well each
    reproduces the scales it did not anchor on (:func:`evidence`): the band is narrowed to
    what every measured point allows. Where a few draws carry the weight, more are drawn
    within the part of the band those allow (:func:`_narrowed`), up to
    :data:`EVIDENCE_POOL` batches or an effective size of :data:`EVIDENCE_ESS` of the draws,
    and every draw is weighed against the mixture it was drawn from, so the resampled draws
    are many distinct ones from the same distribution. Where no draw reproduces them, the
    draws stay as drawn, and say so (False)."""
    models, shares, places = _draw_batch(case, 0, draws, rng, (0.0, 1.0))
    checks = evidence(case)
    if not checks:
        return models, np.array(shares), False
    likelihood = np.array([evidence_weight(m, checks) for m in models])
    if not (np.isfinite(likelihood).all() and likelihood.sum() > 0):
        return models, np.array(shares), False  # no draw reproduces them: the band as assumed
    w, within, grown = likelihood, _narrowed(np.array(places), likelihood, draws), 0
    while _ess(w) < EVIDENCE_ESS * draws and grown + 1 < EVIDENCE_POOL and within[1] > within[0]:
        grown += 1
        more, more_shares, more_places = _draw_batch(case, len(models), draws, rng, within)
        models, shares, places = models + more, shares + more_shares, places + more_places
        likelihood = np.concatenate([likelihood, [evidence_weight(m, checks) for m in more]])
        u = np.array(places)
        inside = (u >= within[0]) & (u <= within[1])
        # the mixture the pool was drawn from: one batch over the band, the rest within
        mixture = (1.0 + grown * inside / (within[1] - within[0])) / (1 + grown)
        w = likelihood / mixture
    pick = rng.choice(len(models), size=draws, p=w / w.sum())
    return [models[j] for j in pick], np.array(shares)[pick], True


def _narrowed(places: np.ndarray, likelihood: np.ndarray, draws: int) -> tuple[float, float]:
    """The part of the network's band (0-1) the measured scales allow, read off the first
    batch: from the least to the greatest place of the draws within a thousandth of the best
    one's likelihood, widened by half its width each way (and at least one draw's spacing),
    so the likelihood's tails stay inside."""
    kept = places[likelihood >= 1e-3 * likelihood.max()]
    low, high = float(kept.min()), float(kept.max())
    pad = max(0.5 * (high - low), 1.0 / draws)
    return max(0.0, low - pad), min(1.0, high + pad)


def _ess(w: np.ndarray) -> float:
    """Kish's effective sample size of weights ``w`` (0 where none is positive or finite)."""
    if not (np.isfinite(w).all() and w.sum() > 0):
        return 0.0
    return float(w.sum() ** 2 / (w**2).sum())


def prepare(cases: Sequence[Case], draws: int = DRAWS, seed: int = 0) -> list[Scored]:
    """Every published point with its centre and structural draws (see scored.Scored,
    :func:`_drawn_models`). The centre: of the structural alternatives, the middle one at the
    band's middle (:func:`centre_carry`); where the case measured several node counts, the
    median of the draws they leave."""
    rng = np.random.default_rng(seed)
    out = []
    for case in cases:
        _, field = reference(case)
        anchor = case_model(case)
        models, shares, weighed = _drawn_models(case, draws, rng)
        for p in case.published:
            carry, centre = centre_carry(case, p)
            base = np.array([_predict(m, p, None) for m in models])
            finite = base[np.isfinite(base)]
            if weighed and len(finite):
                carry, centre = "the draws its measured scales leave", float(np.median(finite))
            d, s = features(
                p.nodes * p.devices_per_node, p.nodes, anchor.anchor_world, anchor.anchor_nodes
            )
            out.append(
                Scored(
                    case=case.name,
                    group=case.group,
                    d=d,
                    s=s,
                    truth=float(getattr(p, field)),
                    centre=centre,
                    base=base,
                    z=rng.standard_normal(draws),
                    z_noise=rng.standard_normal(draws),
                    explanation=carry,
                    family=case.family or case.group,
                    link=f"{case.group}: {case.inter_node}" if case.inter_node else "",
                    share=shares,
                    evidenced=weighed,
                    within=within_one_node(anchor.anchor_nodes),
                    ceiling=anchor_ceiling(case, anchor, p),
                )
            )
    return out


def prepare_walked(
    cases: Sequence[Case], draws: int = DRAWS, seed: int = 0
) -> tuple[list[Case], list[Scored]]:
    """``cases`` walked forward (:func:`walk_forward`) and their points prepared, with the
    seed after ``seed`` (the one every user of them takes: the backtest's scores and the
    fit's mean from an anchor across nodes are of the same draws)."""
    walked = walk_forward(cases)
    return walked, prepare(walked, draws, seed + 1) if walked else []


__all__ = [  # read_cases and CaseError: the cases are read in analysis.read.cases
    "ALPHA_INTER_S",
    "ALPHA_INTRA_S",
    "FSDP_HIDDEN_BAND",
    "INTRA_DEFAULT_GBPS",
    "LINE_RATE_PRIOR",
    "SIGMA_SHARE",
    "UNKNOWN_INTER_BAND",
    "UNKNOWN_INTER_SHARE",
    "Case",
    "CaseError",
    "Point",
    "case_model",
    "centre_carry",
    "prepare",
    "prepare_walked",
    "read_cases",
    "reference",
]
