"""The all-reduce and DDP-bucket arithmetic that both sides need, without torch.

The job measures (:mod:`scalescope.job.diagnosis.allreduce` runs the collectives and reads DDP's
buckets) and the analysis projects (:mod:`analysis.compute.projection.project`, the backtest): both
use these formulas, and the analysis must not import the job's torch-side module to get them. Pure
functions of numbers only (numpy where a fit needs it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MIB = 1024 * 1024
DDP_FIRST_BUCKET_BYTES = MIB
DDP_BUCKET_CAP_BYTES = 25 * MIB
"""DDP's bucket caps by default: its first bucket's (1 MiB) and the others' (25 MiB)."""
HOROVOD_FUSION_THRESHOLD_BYTES = 64 * MIB
"""Horovod's tensor fusion buffer by default (``HOROVOD_FUSION_THRESHOLD``, 64 MiB in
``common/global_state.h``; 128 MiB from v0.21.0)."""
FLOAT32_BYTES = 4


def float32_size(nbytes: int) -> int:
    """``nbytes`` rounded down to whole float32 elements, at least one: the message swept."""
    return max(FLOAT32_BYTES, nbytes // FLOAT32_BYTES * FLOAT32_BYTES)


def bucket_caps(method: str = "ddp", cap_mb: float | None = None) -> tuple[float, float]:
    """(first bucket's cap, every other bucket's) in bytes, as ``method`` makes its buckets
    with the cap ``cap_mb`` (MiB, as the frameworks take it; None where none was set):

    * ``"ddp"``: DDP's rule (``_BucketCapacityConfig.create`` in
      ``torch/nn/parallel/distributed.py``): only the default cap (25 MiB) comes with a small
      first bucket (1 MiB, so that communication starts early in backward); an explicit
      ``bucket_cap_mb`` caps the first bucket too;
    * ``"horovod"``: tensor fusion fills buffers of the fusion threshold (by default
      :data:`HOROVOD_FUSION_THRESHOLD_BYTES`), with no small first one;
    * any other method: buckets of the stated cap, or none (every gradient in one message)
      where nothing says how it groups them.
    """
    if cap_mb is not None:  # DDP's and Horovod's alike: int(cap in MiB * 2**20) bytes
        cap = float(max(1, int(cap_mb * MIB)))
        return cap, cap
    if method == "ddp":
        return float(DDP_FIRST_BUCKET_BYTES), float(DDP_BUCKET_CAP_BYTES)
    if method == "horovod":
        return float(HOROVOD_FUSION_THRESHOLD_BYTES), float(HOROVOD_FUSION_THRESHOLD_BYTES)
    return math.inf, math.inf


def split_into_buckets(
    gradient_bytes: int, method: str = "ddp", cap_mb: float | None = None
) -> list[int]:
    """``gradient_bytes`` split at the caps :func:`bucket_caps` gives: the first bucket's,
    then the others', then the rest.

    The estimate when only a byte count is known (the benchmark; the projection's what-if of
    another ``bucket_cap_mb``; the backtest's published cases). DDP never splits a parameter,
    so its real buckets overshoot their caps (:func:`estimate_bucket_bytes` follows its rule
    where the parameters are known; ``scalescope.job.diagnosis.allreduce.read_ddp_buckets``
    reads them).
    """
    first, cap = bucket_caps(method, cap_mb)
    buckets: list[int] = []
    left = gradient_bytes
    limit = first
    while left > 0:
        take = int(min(limit, left))
        buckets.append(take)
        left -= take
        limit = cap
    return buckets


def estimate_bucket_bytes(
    params: Sequence[tuple[int, str]],
    first_cap: int = DDP_FIRST_BUCKET_BYTES,
    cap: int = DDP_BUCKET_CAP_BYTES,
) -> list[int]:
    """DDP's buckets as it rebuilds them after the first iteration, estimated from the
    parameters (``(bytes, dtype)`` in registration order, see :func:`parameter_bytes`).

    DDP's rule (``compute_bucket_assignment_by_size`` in its reducer): parameters in the order
    their gradients become ready, one open bucket per dtype; a parameter joins its dtype's
    bucket whole, and the bucket closes once it reaches its cap (``first_cap`` for a dtype's
    first bucket, ``cap`` after), so buckets overshoot their caps by up to one parameter.
    The ready order is estimated as the reverse of registration, which is backward's order
    for a model whose forward uses its layers in the order it defines them.
    """
    open_bytes: dict[str, int] = {}
    closed: dict[str, int] = {}
    buckets: list[int] = []
    for nbytes, dtype in reversed(params):
        size = open_bytes.get(dtype, 0) + nbytes
        limit = first_cap if closed.get(dtype, 0) == 0 else cap
        if size >= limit:
            buckets.append(size)
            closed[dtype] = closed.get(dtype, 0) + 1
            size = 0
        open_bytes[dtype] = size
    return buckets + [b for b in open_bytes.values() if b > 0]


def bus_factor(world_size: int) -> float:
    """busbw / algbw for a ring all-reduce over ``world_size`` ranks: 2 (n - 1) / n."""
    return 2 * (world_size - 1) / world_size


def fit_model(points: Sequence[tuple[float, float]], world_size: int) -> dict[str, Any]:
    """The latency + bandwidth model fitted to measured ``(bytes, seconds)`` points:

        t(n) = alpha + n * beta_bus * 2 (p - 1) / p        (beta_bus = 1 / busbw, in s/B)

    by least squares on *relative* residuals ``(t(n_i) - t_i) / t_i`` (each point weighted by
    1 / t_i), so the latency-bound small messages count as much as the large ones whose
    absolute times dwarf them. alpha and beta_bus are kept non-negative (a negative latency
    or bandwidth term is noise, not a network): where the free fit leaves that region, the
    best fit on its edge is taken and ``note`` says which. Two parameters, so the exact
    answer is the best of three candidates (free, alpha = 0, beta = 0).

    Returns ``alpha_s``, ``busbw_gbps`` (null where no bandwidth term was fitted), their
    standard errors ``alpha_se_s`` and ``busbw_se_gbps`` (from the residual variance; null
    without a degree of freedom left, or for a term held at 0), ``rel_rms`` (root mean square
    of the relative residuals), ``points`` and ``note``. Fewer than two distinct sizes fit
    nothing: every number is null and ``note`` says why.
    """
    import numpy as np

    pts = [(float(n), float(t)) for n, t in points if t > 0]
    fit: dict[str, Any] = {
        "alpha_s": None,
        "busbw_gbps": None,
        "rel_rms": None,
        "alpha_se_s": None,
        "busbw_se_gbps": None,
        "points": len(pts),
        "note": None,
    }
    if len({n for n, _ in pts}) < 2:
        fit["note"] = f"{len(pts)} size(s) measured: a latency + bandwidth fit needs two"
        return fit
    n = np.array([p[0] for p in pts])
    t = np.array([p[1] for p in pts])
    # Relative residuals: row i of the design is (1, n_i) / t_i against a target of 1.
    design = np.column_stack([1.0 / t, n / t])
    ones = np.ones(len(pts))

    def solve(cols: list[int]) -> tuple[Any, float]:
        a = design[:, cols]
        scale = np.linalg.norm(a, axis=0)  # columns of 1/t and n/t differ by ~1e6
        coef, *_ = np.linalg.lstsq(a / scale, ones, rcond=None)
        coef = coef / scale
        theta = np.zeros(2)
        theta[cols] = coef
        resid = design @ theta - ones
        return theta, float(resid @ resid)

    free, free_rss = solve([0, 1])
    if free[0] >= 0 and free[1] >= 0:
        (alpha, per_byte), rss, cols = free, free_rss, [0, 1]
    else:
        (lat, lat_rss), (bw, bw_rss) = solve([0]), solve([1])
        if bw_rss <= lat_rss:
            (alpha, per_byte), rss, cols = bw, bw_rss, [1]
            fit["note"] = "latency held at 0 (the free fit left alpha, beta >= 0)"
        else:
            (alpha, per_byte), rss, cols = lat, lat_rss, [0]
            fit["note"] = (
                "no bandwidth term: every size latency-bound (the free fit left alpha, beta >= 0)"
            )
    factor = bus_factor(world_size)
    fit["alpha_s"] = float(alpha)
    fit["rel_rms"] = math.sqrt(rss / len(pts))
    if per_byte > 0:
        fit["busbw_gbps"] = factor / float(per_byte) / 1e9
    dof = len(pts) - len(cols)
    if dof <= 0:
        fit["note"] = fit["note"] or "an exact fit through two sizes: no standard errors"
        return fit
    a = design[:, cols]
    cov = rss / dof * np.linalg.inv(a.T @ a)
    se = dict(zip(cols, np.sqrt(np.clip(np.diag(cov), 0.0, None)), strict=True))
    if 0 in se:
        fit["alpha_se_s"] = float(se[0])
    if 1 in se and per_byte > 0:
        # busbw = factor / per_byte: its standard error by the delta method.
        fit["busbw_se_gbps"] = factor * float(se[1]) / float(per_byte) ** 2 / 1e9
    return fit


def fit_usable(fit: dict[str, Any] | None) -> bool:
    """Whether ``fit`` predicts times (at least two sizes were fitted)."""
    return bool(fit) and fit.get("alpha_s") is not None  # type: ignore[union-attr]


def fit_time_s(fit: dict[str, Any], nbytes: float, world_size: int) -> float:
    """The all-reduce time of ``nbytes`` on the fitted model: alpha + n * 2(p-1)/p / busbw."""
    if not fit_usable(fit):
        raise ValueError(f"no fitted model to predict from ({fit.get('note')})")
    busbw = fit["busbw_gbps"]
    bandwidth_s = nbytes * bus_factor(world_size) / (busbw * 1e9) if busbw else 0.0
    return float(fit["alpha_s"]) + bandwidth_s


def predicted_step_s(fit: dict[str, Any], bucket_bytes: Sequence[int], world_size: int) -> float:
    """Expected all-reduce time of one step: DDP's buckets one after another on one stream,
    each bucket's time from the fitted model (whatever its size, inside the sweep or beyond
    it: the model, not a scale-up of one measured point)."""
    return sum(fit_time_s(fit, b, world_size) for b in bucket_bytes)


def busbw_at_gbps(
    rows: Sequence[dict[str, Any]], fit: dict[str, Any] | None, nbytes: int, world_size: int
) -> float | None:
    """busbw of an all-reduce of ``nbytes``: the measured row where that size was swept (as
    float32 elements), else the fitted model's ``nbytes / t(nbytes) * 2(p-1)/p``; null
    without either."""
    swept = float32_size(nbytes)
    for row in rows:
        if row["bytes"] == swept:
            return float(row["busbw_gbps"])
    if not fit_usable(fit):
        return None
    seconds = fit_time_s(fit, nbytes, world_size)  # type: ignore[arg-type]
    return nbytes / seconds * bus_factor(world_size) / 1e9 if seconds > 0 else None
