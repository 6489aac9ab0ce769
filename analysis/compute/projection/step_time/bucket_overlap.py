"""How much of DDP's all-reduce ends after backward: the bucket timeline of the step model
(:mod:`.step_model`), and when each bucket is ready.

DDP sends its buckets one after another, in the order backward produces their gradients;
each all-reduce starts when its bucket is ready and the one before it is done, on one
communication stream. What of that timeline ends after backward is exposed
(:func:`exposed_after_backward`).

When a bucket is ready:

* **recorded** (scalescope's own runs, ``diagnosis.bucket_ready`` of the record): the share
  of backward at which its last gradient was computed, measured over a few steady steps.
  Buckets of another size (a what-if) are read off the same record as a curve of the bytes
  ready against time (:func:`ready_shares`): the recorded buckets are its knots, and within
  one recorded bucket its bytes are taken in proportion;
* **in proportion to bytes** (published cases, which have no layers, and records from before
  the readiness was recorded): a bucket is ready when backward has produced the share of
  all bytes that the bytes up to and including it are. Biased where the large layers come
  last in forward: VGG's fully connected layers hold about 74% of its gradient bytes and are
  the first gradients backward produces, so in proportion to bytes they would be ready near
  the end and their all-reduce exposed, where they are really ready early and hidden.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache


def ready_shares(
    recorded_bytes: Sequence[float], recorded_ready: Sequence[float], sizes: Sequence[float]
) -> list[float]:
    """When each of the buckets ``sizes`` (in the order DDP sends them) is ready, as a share
    of backward, from buckets ``recorded_bytes`` recorded ready at ``recorded_ready``.

    A bucket is ready when every byte up to and including it is: the curve of bytes ready
    against time has a knot at the end of each recorded bucket, at the latest of the shares
    up to it (DDP launches its buckets in order, so one ready early still waits for those
    before it), and is linear between knots, from (0, 0). The same buckets get the recorded
    shares back (with that running maximum); buckets scaled by one factor (gradients in
    another dtype) too; other buckets, the curve at their ends."""
    total_rec = math.fsum(recorded_bytes)
    total = math.fsum(sizes)
    if total_rec <= 0 or total <= 0:
        return [1.0] * len(sizes)
    xs, ys = [0.0], [0.0]
    done = latest = 0.0
    for nbytes, share in zip(recorded_bytes, recorded_ready, strict=True):
        done += nbytes
        latest = max(latest, share)
        xs.append(min(1.0, done / total_rec))
        ys.append(latest)
    out = []
    done = 0.0
    for nbytes in sizes:
        done += nbytes
        out.append(_interpolate(xs, ys, min(1.0, done / total)))
    return out


def _interpolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """The piecewise-linear curve through (xs, ys) (xs ascending) at ``x``."""
    for i in range(1, len(xs)):
        if x <= xs[i]:
            span = xs[i] - xs[i - 1]
            if span <= 0:
                return ys[i]
            return ys[i - 1] + (x - xs[i - 1]) / span * (ys[i] - ys[i - 1])
    return ys[-1]


def exposed_after_backward(
    times_s: Sequence[float],
    sizes: Sequence[float],
    backward_s: float,
    ready: Sequence[float] | None = None,
) -> float:
    """The all-reduce time left once backward ends, from a timeline of DDP's buckets.

    ``sizes`` and their all-reduce ``times_s`` in the order DDP sends them (the reverse of
    the parameters' order, which is the order backward produces their gradients). A bucket
    is ready at the share ``ready`` of ``backward_s`` where that is known (see
    :func:`ready_shares`), else when backward has produced all its bytes: at the share of
    ``backward_s`` that the bytes up to and including it are of the whole. The buckets run
    one after another on the communication stream, each starting when it is ready and its
    predecessor is done; what ends after backward is exposed. So one bucket holding every
    gradient is exposed whole, a large bucket that is ready near backward's end is exposed
    nearly whole, and many tiny buckets queue up behind their latencies."""
    by_bytes = _byte_shares(tuple(sizes))
    if not times_s or not by_bytes:
        return 0.0
    shares = by_bytes if ready is None else [min(1.0, share) for share in ready]
    end = 0.0
    for t, share in zip(times_s, shares, strict=True):
        at = backward_s * share
        end = (at if at > end else end) + t  # max(end, at), as fast as the step model asks
    return max(0.0, end - backward_s)


@lru_cache(maxsize=1024)
def _byte_shares(sizes: tuple[float, ...]) -> tuple[float, ...]:
    """When each bucket of ``sizes`` is ready in proportion to bytes: the share of all bytes
    up to and including it (the same buckets for every draw of a case); empty where there
    are no bytes."""
    total = math.fsum(sizes)
    if total <= 0:
        return ()
    out = []
    done = 0.0
    for nbytes in sizes:
        done += nbytes
        out.append(min(1.0, done / total))
    return tuple(out)
