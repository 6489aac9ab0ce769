"""What scoring needs of one published point (:class:`Scored`), and the band of shares of a
stated inter-node line rate that the clusters of such points achieved (:func:`learn_share_band`):
the points the error model (:mod:`.model_error`) is fitted on and scores, apart from the model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class Scored:
    """What scoring needs of one published point, independent of the error model: its
    features, the truth, the centre, and the structural draws (efficiencies from the
    step model over the alternatives and the network band) with fixed normal draws."""

    case: str
    group: str
    d: float
    s: float
    truth: float
    centre: float
    base: np.ndarray
    z: np.ndarray
    z_noise: np.ndarray
    explanation: str = ""
    """Which structural explanation the centre assumes (for the report)."""
    family: str = ""
    """The kind of system the point's case ran on (its case's ``family``, else its source)."""
    link: str = ""
    """The network the point's case crossed between nodes: its source and the link the case
    names (:func:`learn_share_band` learns one share of a line rate per network; '' counts
    the point with its source's)."""
    share: np.ndarray | None = None
    """Per draw, the share of the case's stated inter-node line rate it took (NaN, or None,
    where the case states none): the error model keeps the draws within its learned band."""
    within: float = 1.0
    """:func:`.model_error.within_one_node` of the point's anchor: which of the error model's
    means applies."""
    evidenced: bool = False
    """Whether the draws were already weighed by the case's other measured scales
    (:func:`analysis.compute.projection.published.scoring.evidence`): the centre is then theirs, not
    the typical share's, since what the cluster achieved was measured."""
    ceiling: float = math.inf
    """The most the point's efficiency can be before its run-to-run noise: the anchor's own
    (against the same reference), where the point is beyond the anchor
    (:func:`.model_error.beyond_anchor`: the same work per device, more communication, so its
    step is never shorter); else no bound."""

    def view(self, band: tuple[float, float, float] | None) -> tuple[float, np.ndarray]:
        """(centre, draws) within ``band`` (low, typical, high) of the stated line rate: where
        the point's case states one and a band is learned, the draws outside it are left out
        (NaN), and the centre is the median of those near the typical share (within
        :data:`TYPICAL_WINDOW`; of all kept where none is, or where the draws were weighed by
        the case's measured scales, :attr:`evidenced`); else the point's own centre and
        draws.

        One fit asks each point for its view under one band three or four times (the mean,
        the spreads, ``kappa``, ``sd_m``), and the nested cross-validation fits thousands of
        times: the last band's view is kept (outside the fields: ``replace`` starts afresh;
        the draws returned are not to be written to)."""
        last = self.__dict__.get("_last_view")
        if last is not None and last[0] == band:
            return last[1]
        got = self._view(band)
        self.__dict__["_last_view"] = (band, got)
        return got

    def _view(self, band: tuple[float, float, float] | None) -> tuple[float, np.ndarray]:
        if band is None or self.share is None or not np.isfinite(self.share).any():
            return self.centre, self.base
        low, typical, high = band
        kept = (self.share >= low * (1 - 1e-9)) & (self.share <= high * (1 + 1e-9))
        base = np.where(kept, self.base, np.nan)
        near = kept & (np.abs(np.log(self.share / typical)) <= TYPICAL_WINDOW)
        for pick in (kept,) if self.evidenced else (near, kept):
            finite = self.base[pick & np.isfinite(self.base)]
            if len(finite):
                return _median(finite), base
        return math.nan, base


def _median(values: np.ndarray) -> float:
    """``np.median`` of finite ``values`` (1-D, not empty), to the bit, without its checks
    and dispatch: the views of the cross-validation ask hundreds of thousands of times."""
    a = np.sort(values)
    mid = len(a) // 2
    return float(a[mid]) if len(a) % 2 else float((a[mid - 1] + a[mid]) / 2)


TYPICAL_WINDOW = math.log(1.25)
"""How far (log) a draw's share of the line rate may be from the typical one to count for
the centre (:meth:`Scored.view`)."""
SHARE_KERNEL = 0.05
"""How near (log efficiency, one s.d.) a draw's efficiency must come to a published one to
speak for its share of the line rate (:func:`learn_share_band`)."""


def _share_of(point: Scored) -> float:
    """The share of its stated line rate a published point's cluster achieved: the median of
    its draws' shares, each weighted by how near its efficiency comes to the published one
    (NaN where the case states no line rate, or no draw comes near). Kept on the point (it
    depends on its fields alone, and every fit of the cross-validation asks again)."""
    got = point.__dict__.get("_share_of")
    if got is None:
        got = point.__dict__["_share_of"] = _compute_share_of(point)
    return got


def _compute_share_of(point: Scored) -> float:
    if point.share is None:
        return math.nan
    ok = np.isfinite(point.share) & np.isfinite(point.base) & (point.base > 0)
    if not ok.any():
        return math.nan
    share, base = point.share[ok], point.base[ok]
    w = np.exp(-0.5 * (np.log(base / point.truth) / SHARE_KERNEL) ** 2)
    if not w.sum() > 1e-12:
        return math.nan
    order = np.argsort(share)
    cum = np.cumsum(w[order]) / w.sum()
    return float(share[order][np.searchsorted(cum, 0.5)])


def learn_share_band(points: Sequence[Scored]) -> tuple[float, float, float] | None:
    """The band of shares of a stated inter-node line rate a cluster not yet seen achieves,
    learned from the clusters of ``points``: each network's share (the median of its points',
    :func:`_share_of`; a network is a source's cases on one link, :attr:`Scored.link`, so that
    one cluster measured on its Ethernet and its InfiniBand counts each), and the 95%
    prediction interval of one more network's from theirs
    (log-normal, Student's t on their spread: a few clusters leave the band wide), at most
    the whole line rate, with the typical share (their geometric mean) the centre is taken
    at: (low, typical, high). None with fewer than two such networks: a band needs more than one
    cluster (the draws then keep the prior's span)."""
    from scipy import stats

    by_network: dict[str, list[float]] = {}
    for p in points:
        got = _share_of(p)
        if math.isfinite(got) and got > 0:
            by_network.setdefault(p.link or p.group, []).append(got)
    n = len(by_network)
    if n < 2:
        return None
    logs = np.log([float(np.median(v)) for v in by_network.values()])
    half = float(stats.t.ppf(0.975, n - 1)) * float(np.std(logs, ddof=1)) * math.sqrt(1 + 1 / n)
    centre = float(np.mean(logs))
    return math.exp(centre - half), math.exp(centre), min(1.0, math.exp(centre + half))
