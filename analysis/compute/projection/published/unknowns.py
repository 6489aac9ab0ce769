"""Unknowns spanned, never assumed: what a published case does not state and its interval
draws over (a communication pattern, a scaling mode, a gradient sync under accumulation), the
ends of each span (:func:`variants`, :mod:`.scoring` builds a step model at each), and, in
words, everything a case's interval spans (:func:`unknowns`)."""

from __future__ import annotations

from analysis.compute.projection.step_time.network import UNKNOWN_INTER_BAND
from analysis.read.cases import SHARDED_METHODS, Case, is_fsdp

PATTERNS = ("one message", "ddp")
"""The span of a communication pattern the file does not know (a method that is neither DDP,
Horovod nor FSDP and states no cap): every gradient in one message after backward, nothing
hidden, to DDP's buckets overlapping backward. Drawn over in the interval, the centre between
them: an unknown is spanned, never assumed."""
SCALINGS = ("strong", "weak")
"""The span of a scaling mode the source does not settle (``scaling: unknown``: a table of
throughput that prints no global batch): a fixed global batch, the per-device batch (its
accumulation first) shrinking as ranks grow, to a fixed per-device batch. Drawn over like
:data:`PATTERNS`, the centre between them."""
SYNCS = ("step", "micro-batch")
"""The span of when an accumulating case syncs its gradients where the source does not say
(``grad_sync: unknown``): once a step, on its last micro-batch (DDP's ``no_sync``, FSDP's
sync switched off while accumulating), to every micro-batch (a trainer that never turns the
sync off). Drawn over like :data:`PATTERNS`, the centre between them."""


def unknowns(case: Case) -> list[str]:
    """What a case's interval spans rather than assumes, in words: the network between nodes
    (the share of a stated line rate, or a band of the intra-node link where none is stated),
    a communication pattern the file does not know, a scaling mode or a gradient sync under
    accumulation its source does not state, how much of FSDP's communication prefetching
    hides, and which explanation carries what the model leaves of the anchor."""
    out = []
    if case.inter_busbw_gbps:
        out.append("the share of the stated inter-node line rate achieved (the learned band)")
    elif any(p.nodes > 1 for p in case.published):
        out.append(
            f"the inter-node bus bandwidth, not stated: {100 * UNKNOWN_INTER_BAND[0]:g}-"
            f"{100 * UNKNOWN_INTER_BAND[1]:g}% of the intra-node link"
        )
    if unknown_pattern(case):
        out.append("the communication pattern: one message after backward to DDP's buckets")
    if unknown_scaling(case):
        out.append("the scaling mode: a fixed global batch to a fixed per-device batch")
    if unknown_sync(case):
        out.append("when gradients are synced under accumulation: once a step to every micro-batch")
    if is_fsdp(case):
        out.append("how much of FSDP's communication prefetching hides")
    out.append("which explanation carries the rest of the anchor's step")
    return out


def centred_between(case: Case) -> list[str]:
    """The ends a case's centre sits between, in words, one per unknown it spans
    (:func:`variants`; :func:`.scoring.centre_carry` names them beside its explanation)."""
    return [
        text
        for text, unknown in (
            ("communication between one message and DDP's buckets", unknown_pattern(case)),
            (
                "scaling between a fixed global batch and a fixed per-device one",
                unknown_scaling(case),
            ),
            ("gradient sync between once a step and every micro-batch", unknown_sync(case)),
        )
        if unknown
    ]


def unknown_pattern(case: Case) -> bool:
    """Whether the file does not know how the case's method groups its gradients: neither
    DDP, Horovod nor FSDP, and no cap stated."""
    return case.method not in ("ddp", "horovod", *SHARDED_METHODS) and case.bucket_mb is None


def unknown_scaling(case: Case) -> bool:
    """Whether the source does not settle the case's scaling mode (``scaling: unknown``)."""
    return case.scaling == "unknown"


def unknown_sync(case: Case) -> bool:
    """Whether the case accumulates and its source does not say when it syncs its gradients
    (``grad_sync: unknown``)."""
    return case.grad_sync == "unknown" and case.grad_accum > 1


def variants(case: Case) -> list[dict[str, str]]:
    """The ends a case's unknowns span, each as :func:`.scoring.case_model`'s keywords (``pattern``,
    ``scaling``, ``sync``): :data:`PATTERNS` where its communication pattern is unknown,
    :data:`SCALINGS` where its scaling mode is, :data:`SYNCS` where its gradient sync is;
    one where it knows them all."""
    patterns = PATTERNS if unknown_pattern(case) else PATTERNS[:1]
    scalings = SCALINGS if unknown_scaling(case) else (case.scaling,)
    syncs = SYNCS if unknown_sync(case) else (case.grad_sync,)
    return [
        {"pattern": p, "scaling": m, "sync": y} for p in patterns for m in scalings for y in syncs
    ]
