"""The sealed test: a third of the published cases' sources set aside before any fit.

The backtest's cross-validation chooses the error model's noise inside its folds and fits it
on the rest, so its figures are honest about one source held out at a time; but every change
of the model since was made while looking at them. The sealed sources are the check no
choice has seen: drawn by :func:`draw` with a fixed seed, from the sources the case file held
then, and recorded in the file (``sealed:``, read by
:func:`analysis.read.cases.read_sealed`). The shipped error model is fitted on the other
sources alone, the cross-validation runs on them alone, and the sealed ones are scored once,
by that model, beside them (:func:`analysis.compute.projection.published.backtest.cross_validated`).

A source added to the file later is not sealed by the draws before it. Such sources are
pooled: once the pool holds a whole source's third (three sources, at a third), a new draw is
made over the pool, with the next seed (:func:`next_seed`), before the newest of them is
scored, and recorded beside the others (``sealed.later``); until then they are open
(:func:`due`). Sources added one at a time thus seal a third of them, rounded down: at most one
fewer than adding them together would (which rounds), never more.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

import numpy as np

SEAL_SEED = 2026
"""The seed of the first draw recorded in ``benchmarks/projection_cases.yaml`` (the later
ones: :func:`next_seed`)."""
SEALED_SHARE = 1 / 3


def draw(sources: Iterable[str], seed: int = SEAL_SEED, share: float = SEALED_SHARE) -> list[str]:
    """The sources set aside: ``round(share * n)`` of the ``n`` distinct ``sources`` (sorted
    first, so the draw depends on the set alone), drawn without replacement with ``seed``;
    returned sorted."""
    names = sorted(set(sources))
    k = round(share * len(names))
    if not k:
        return []
    picked = np.random.default_rng(seed).choice(len(names), size=k, replace=False)
    return sorted(names[int(i)] for i in picked)


def next_seed(draws_made: int) -> int:
    """The seed of the draw after ``draws_made`` draws: :data:`SEAL_SEED`, then one more
    each time."""
    return SEAL_SEED + draws_made


def due(
    sources: Iterable[str], drawn_from: Iterable[str], share: float = SEALED_SHARE
) -> list[str]:
    """The pool a new draw must be made over now: the ``sources`` no draw was made from
    (``drawn_from``), sorted, where a third of them makes at least one whole source; else
    none. (At two sources a third rounds to one, but a draw then would seal half of what
    arrives singly.)"""
    pool = sorted(set(sources) - set(drawn_from))
    return pool if share * len(pool) >= 1 - 1e-9 else []


class _FromSource(Protocol):
    @property
    def group(self) -> str: ...


T = TypeVar("T", bound=_FromSource)


def split_sealed(items: Sequence[T], sealed: Iterable[str]) -> tuple[list[T], list[T]]:
    """(the open items, the sealed ones), each in order: an item (a case, or a scored
    point) is sealed when its source (``group``) is one of ``sealed``."""
    shut = set(sealed)
    return [x for x in items if x.group not in shut], [x for x in items if x.group in shut]
