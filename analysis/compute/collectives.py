"""The step model's view of a strategy's collectives (named in :mod:`scalescope.collectives`).

The projection's network term times, per optimizer step, the messages of the collectives a
strategy registers as modelled, each from its bytes and its bus factor at N ranks
(:func:`link_bytes`); the wait in any other stays in what the anchor measured. DDP is the
first: its gradient all-reduce, bucket by bucket (:data:`NETWORK_TERM`), while its buffer
broadcast is not modelled. Another strategy's collectives (FSDP's all-gather and
reduce-scatter, (N - 1) / N each) come in through the same registry, beside DDP's.
"""

from __future__ import annotations

from scalescope.collectives import STRATEGIES, Collective


def modelled(strategy: str) -> tuple[Collective, ...]:
    """The collectives of ``strategy`` that the step model times from their bytes."""
    return tuple(c for c in STRATEGIES[strategy] if c.modelled)


def link_bytes(collective: Collective, nbytes: float, world: int) -> float:
    """Bytes over the busiest link for one message of ``nbytes`` at ``world`` ranks."""
    return nbytes * collective.bus_factor(world)


(NETWORK_TERM,) = modelled("ddp")
"""What the step model's network term times today: DDP's gradient all-reduce."""
