"""The projection's error model: how far published multi-node efficiencies fall from the step
model's centre, learned from the shipped published cases, never set by hand.

A projection from an anchor (the largest measured scale) to a larger one is off by a factor
the step model cannot see. In log efficiency, the residual ``r = log(truth) - log(centre)``
of a point of source (cluster) ``j`` is modelled as

    r = mu_d d + mu_s s + h (b_j + e),   b_j ~ N(0, sd_src^2),   e ~ N(0, sd_d^2 d + sd_s^2 s)

plus one run's noise, ``N(0, noise^2)``, on top. ``h`` is the loss the centre projects, ``1 -
centre`` plus one run's noise (:func:`loss_scale`): what the step model cannot see is mostly in
the step's communication and waiting, the part it projects as lost, so its error is a share of
that loss (to first order, a factor ``f`` on the lost time moves ``log efficiency`` by ``(1 -
efficiency) log f``). A centre near 100% then draws a few points either way, where one spread
in ``log efficiency`` for every point drew tens: on the shipped cases the one-node residuals
grow with the projected loss (rank correlation 0.74, against 0.19 with the doublings), median
1.8 points below 5% of loss and 15-19 points at 15-60%.

where ``d = log2(target world size / anchor world size)`` (how many doublings beyond the
anchor: the error of a model grows with how far it is carried) and ``s = 1`` where the
anchor is a single node and the target spans several (the first inter-node step, which a
single-node anchor has not seen), else 0. ``b_j`` is the cluster's own error: every point of
one cluster shares it (one cluster's points all high, say), so they are not independent
evidence, and a cluster not in the file carries the spread between clusters as well as the
spread within one. It applies where ``s = 1``: a cluster's own error is its network's, which a
multi-node anchor has measured.

The mean ``mu_d d + mu_s s`` is that of a projection whose anchor is within one node
(:func:`within_one_node`: one node or one GPU, the network between nodes never seen), fitted
on such points, as nearly every published point is. Where the anchor spans nodes, the step
model was calibrated on the network it projects, and its mean is ``mu_m d``, fitted on points
projected from such anchors: each training case's published points from its smaller published
scales (:func:`analysis.compute.projection.published.scoring.walk_forward`; ``spanning`` in
:func:`fit`), used for this slope and the spread there, below. (The one-node slope carried
there shifted every such centre down 5.7% a doubling, and their median signed error in the
folds was -2.9 points: the two regimes do not share a slope.) Its spread there is ``h e``
with ``e ~ N(0, sd_m^2 d)``, calibrated on the same points (:func:`fit`): the one-node spread
per doubling, ``sd_d``, is fitted on the within-cluster deviations of the training points
(nearly all projected from one node; the few whose case measured a multi-node anchor share
their source's stratum), came out zero in half the folds, and left the intervals from a
measured multi-node anchor one run's noise wide (11 points, covering 6 of FSDP's 10 such
points).
``noise`` is the run-to-run noise of one measured point: it is why a published 102% can be
reached.

Fitting (:func:`fit`), on the residuals of a training set:

* the means by least squares with each source weighted alike (a cluster's many points are
  one cluster);
* the spreads on the residuals' deviations from the mean divided by ``h``: within a source by
  non-negative least squares on the squared deviations from its own mean (the cluster's
  error taken out), and between sources by the method of moments on the sources' means
  (what their within spread leaves);
* where cases state an inter-node line rate, the share of it their clusters achieved
  (:func:`learn_share_band`): a line rate is an upper bound, and the band a cluster not yet
  seen may fall in is learned from the clusters that were, with the typical share the
  centre is taken at; the draws outside it are left out (:meth:`Scored.view`);
* then one factor ``kappa`` on the three spreads, the smallest that makes the training set's
  own 95% intervals from anchors within one node (which also span the structural alternatives
  and the network band) cover 95% of the points within their reach: a point beyond its anchor
  does the anchor's work per device and communicates more, so before its noise it is never
  above the anchor's efficiency (``Scored.ceiling``; the mean's lift stops there too), and a
  published point above that and its noise no spread can cover (counted, it widened every other
  interval until they covered it anyway: on the shipped cases the sweep's spreads tripled).
  (Calibrated leave one source out instead, ``kappa`` came out about three times larger on the
  shipped cases, for the same held-out coverage: a few points the step model cannot reach, a
  parameter server's collapse at 64-128 nodes, set it.)
* and ``sd_m`` on the training points projected from anchors that span nodes (a case's
  measured multi-node points, and ``spanning``): per point, the least ``sd_m`` whose interval
  covers it, and their 95th percentile (numpy's linear; :func:`_quantile_factor`). The
  smallest level covering 95% of them, as ``kappa`` is chosen, hangs on one point of about
  80: of the 78 open points, the 75th need (0.51) is a parameter server's at 128 nodes (TF's
  InceptionV3 on AWS p2), 2.5 times the quantile's level, and the three above it, which a 95%
  interval may miss, are EfficientNetV2 at 10 nodes (projected at 98.5% from 4, published at
  90.4%) and two more parameter servers' at 64-128 nodes.

The noise is the one setting chosen by a score, so it is chosen inside the folds
(:func:`.published.noise_selection.choose_noise`): from :data:`NOISE_GRID`, by a
leave-one-source-out over the training sources only, each held-out source scored on its points
projected from their cases' measured points and from their smaller published scales alike (one
noise serves both), picked by the least mean interval score
(:func:`.published.noise_selection.pick_noise`). The other settings are fitted on the training
set (the means, the spreads, ``kappa``, ``sd_m``) or are stated assumptions of the backtest (the
bands of :mod:`analysis.compute.projection.published.scoring`), never scored.
:func:`.published.noise_selection.cross_validate` is therefore nested: each source is held out in
turn and scored by a model whose noise and fit come from the others alone. The shipped model is
made the same way on every open source (:func:`.published.noise_selection.fit_selected`; the
sealed ones, :mod:`.published.sealed`, never), written with its grid and its selection by
``python -m analysis.project fit-error`` into ``analysis/compute/projection/model_error.json``
(:mod:`.error_file`).

That model scores published tables, whose noise is unknown. A sweep's projection knows its
own runs' noise, so it draws with the same fit calibrated beside one run's
(:func:`fit_sweep`, written beside it under ``sweep``), and the backtest scores that one too,
nested the same way, as what a sweep's intervals cover.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from analysis.compute.projection.scored import Scored, learn_share_band

MEASURED_NOISE = 0.03
"""One measured run's relative noise (one s.d.) where nothing measures it: a stated
assumption, never fitted or scored. A sweep's own projection takes it as the floor of its
repeats' spread (its run-to-run noise is measured, not a published table's); the backtest
checks a case's draws against its other measured scales with it."""
NOISE_GRID = (
    MEASURED_NOISE,
    0.045,
    0.06,
    0.08,
    0.1,
    0.13,
    0.16,
    0.2,
    0.25,
    0.3,
    0.4,
    0.5,
    0.6,
)
"""The noise of one published point (relative, one s.d.) the error model chooses from:
published tables state one number per point, an average over an unknown number of steps on
a cluster of unknown tuning, and say nothing of its spread, so the level is chosen by
:func:`.published.noise_selection.choose_noise`. The grid reaches far enough that no fold chooses
its widest level, and starts at :data:`MEASURED_NOISE`: a published point is one run's figure, no
less noisy than a measured run. (From 1%, two folds chose 1%, and their intervals from every
smaller scale, a few points wide there, covered 76% of them.)"""
COVERAGE_TARGET = 0.95
LOSS_FLOOR = MEASURED_NOISE
"""The least loss a spread is scaled by (:func:`loss_scale`): a centre projected at 100% is still
one run's figure away from its truth, and a loss the step model does not see at all (a loader,
a straggler) is not zero in the model's terms either."""


@dataclass(frozen=True)
class ErrorModel:
    mu_d: float = 0.0
    mu_s: float = 0.0
    sd_d: float = 0.0
    sd_s: float = 0.0
    noise: float = NOISE_GRID[0]
    fitted_on: str = ""
    """Which cases it was fitted on (a file and how many points), for the record."""
    sd_src: float = 0.0
    """The spread of a cluster's own error (between sources), where the model is carried."""
    share_band: tuple[float, float, float] | None = None
    """The share of a stated inter-node line rate clusters achieve, learned from the training
    cases that state one (:func:`learn_share_band`); None: not learned (the prior's span)."""
    mu_m: float = 0.0
    """The mean residual per doubling where the anchor spans nodes (see the module doc)."""
    sd_m: float = 0.0
    """The spread per doubling where the anchor spans nodes, calibrated on the points projected
    from such anchors (:func:`fit`)."""

    def mean(
        self, d: np.ndarray | float, s: np.ndarray | float, within: np.ndarray | float = 1.0
    ) -> np.ndarray | float:
        """The residual's mean: ``mu_d d + mu_s s`` where the anchor is within one node
        (``within`` = 1, :func:`within_one_node`), ``mu_m d`` where it spans nodes."""
        return (self.mu_d * d + self.mu_s * s) * within + self.mu_m * d * (1 - np.asarray(within))

    def spread(
        self, d: np.ndarray | float, s: np.ndarray | float, within: np.ndarray | float = 1.0
    ) -> np.ndarray | float:
        """The residual's spread beyond the run-to-run noise, per unit of :func:`loss_scale`.
        Where the anchor is within one node (``within`` = 1, :func:`within_one_node`): within
        a cluster and between clusters (the latter where the target crosses a node, s = 1: a
        cluster's own error is its network's, which a multi-node anchor measured). Where the
        anchor spans nodes: ``sd_m`` per doubling."""
        w = np.asarray(within, dtype=float)
        one_node = self.sd_d**2 * d + self.sd_s**2 * s + self.sd_src**2 * np.asarray(s)
        return np.sqrt(w * one_node + (1 - w) * self.sd_m**2 * np.asarray(d))

    def reach(
        self,
        d: np.ndarray | float,
        s: np.ndarray | float,
        centre: np.ndarray | float,
        within: np.ndarray | float = 1.0,
    ) -> np.ndarray | float:
        """The residual's spread (log) at a point whose centre, the mean's shift applied, is
        ``centre``: :meth:`spread` times :func:`loss_scale`."""
        return np.asarray(self.spread(d, s, within)) * loss_scale(centre)

    def scaled(self, kappa: float) -> ErrorModel:
        """The same model with its three spreads (not its noise) times ``kappa``."""
        return replace(
            self, sd_d=self.sd_d * kappa, sd_s=self.sd_s * kappa, sd_src=self.sd_src * kappa
        )


def loss_scale(centre: np.ndarray | float) -> np.ndarray | float:
    """``h`` of the module doc: the share of the step a centre projects as lost (``1 -
    centre``, never below 0 or above 1; NaN stays NaN) plus :data:`LOSS_FLOOR`."""
    lost = 1.0 - np.asarray(centre, dtype=float)
    return np.where(np.isnan(lost), np.nan, np.clip(lost, 0.0, 1.0)) + LOSS_FLOOR


def lifted(
    centre: np.ndarray | float, shift: np.ndarray | float, ceiling: np.ndarray | float
) -> np.ndarray:
    """A centre with the error model's mean ``shift`` (log) applied, never past ``ceiling``
    (:func:`beyond_anchor`; inf where there is none): the centre a point's interval is drawn
    around and its spread scaled by (:func:`loss_scale`)."""
    return np.minimum(np.asarray(centre, dtype=float) * np.exp(shift), ceiling)


def features(
    target_world: int, target_nodes: int, anchor_world: int, anchor_nodes: int
) -> tuple[float, float]:
    """(d, s) of the module doc."""
    d = max(0.0, math.log2(target_world / anchor_world)) if anchor_world > 0 else 0.0
    s = 1.0 if anchor_nodes <= 1 < target_nodes else 0.0
    return d, s


def beyond_anchor(world: int, nodes: int, anchor_world: int, anchor_nodes: int) -> bool:
    """Whether a scale is beyond its anchor in the sense of ``Scored.ceiling``: at least as
    many ranks on at least as many nodes, and more of one. Its ranks do the anchor's work
    (or less, under strong scaling) and communicate at least as much over links no faster,
    so its step is never shorter. More ranks on fewer nodes (2x2 to 1x8) is not: it leaves
    the link between nodes, and may be faster."""
    more = world > anchor_world or nodes > anchor_nodes
    return world >= anchor_world and nodes >= anchor_nodes and more


def within_one_node(anchor_nodes: int) -> float:
    """1.0 where the anchor is within one node (one node, or one GPU: the network between
    nodes not measured), where the error model's one-node mean applies; else 0.0, where its
    mean from an anchor across nodes does (:meth:`ErrorModel.mean`)."""
    return 1.0 if anchor_nodes <= 1 else 0.0


def apply_error(
    base: np.ndarray | float,
    shift: np.ndarray | float,
    spread_z: np.ndarray | float,
    ceiling: np.ndarray | float,
    noise_z: np.ndarray | float,
) -> np.ndarray | float:
    """The error model's draws of a projection, the one rule every interval is made by: the
    structural draws ``base`` lifted by the mean ``shift`` and the spread's draws
    ``spread_z`` (log), never past ``ceiling`` (the anchor's own efficiency beyond it,
    :func:`beyond_anchor`; else inf), then one run's noise ``noise_z`` (log) on top."""
    return np.minimum(base * np.exp(shift + spread_z), ceiling) * np.exp(noise_z)


def finite_percentiles(rows: np.ndarray, qs: Sequence[float]) -> list[np.ndarray]:
    """Per row of ``rows``, each percentile in ``qs`` of its finite values (NaN where it has
    none), as numpy's (linear) would give of them one row at a time: ``np.nanpercentile``
    loops over the rows in Python, and the bisection of ``kappa`` asks thousands of times.
    Where every value is finite, every row reads the same places; where none is infinite,
    the NaNs (draws outside a band) sort last as they are."""
    finite = np.isfinite(rows)
    if rows.size and finite.all():
        a = np.sort(rows, axis=1)
        out = []
        for q in qs:
            i, j, gamma = _places(rows.shape[1], q)
            lo, hi = a[:, i], a[:, j]
            diff = hi - lo
            out.append(hi - diff * (1 - gamma) if gamma >= 0.5 else lo + diff * gamma)
        return out
    a = np.sort(rows if not np.isinf(rows).any() else np.where(finite, rows, np.nan), axis=1)
    n = finite.sum(axis=1)
    at = np.arange(a.shape[0])
    out = []
    for q in qs:
        virtual = (n - 1) * (q / 100)  # numpy's linear method, its lerp below (as _places)
        below = np.floor(virtual)
        gamma = virtual - below
        i = np.clip(below, 0, None).astype(int)
        j = np.minimum(i + 1, np.maximum(n - 1, 0))
        lo, hi = a[at, i], a[at, j]
        diff = hi - lo
        got = np.where(gamma >= 0.5, hi - diff * (1 - gamma), lo + diff * gamma)
        out.append(np.where(n > 0, got, np.nan))
    return out


def _places(n: int, q: float) -> tuple[int, int, float]:
    """Where numpy's linear method reads the ``q``-th percentile of ``n`` sorted values: the
    two places it interpolates between, and the weight of the upper one."""
    virtual = (n - 1) * (q / 100)
    below = math.floor(virtual)
    i = max(below, 0)
    return i, min(i + 1, max(n - 1, 0)), virtual - below


def interval(point: Scored, em: ErrorModel, kappa: float = 1.0) -> tuple[float, float, float]:
    """(centre, low, high) of one point's 95% prediction interval under ``em``."""
    centre, low, high = _Stacked([point], em).intervals(kappa)
    return float(centre[0]), float(low[0]), float(high[0])


def within_reach(points: Sequence[Scored], noise: float) -> np.ndarray:
    """Per point, whether any spread can cover it: a point above its ceiling by more than
    the top of its noise draws (at ``noise``) cannot be, however wide the spread below. The
    calibration of ``kappa`` counts the others (such a point is still scored, a miss)."""
    if not points:
        return np.zeros(0, dtype=bool)
    truth = np.array([p.truth for p in points])
    ceiling = np.array([p.ceiling for p in points])
    z_noise = np.stack([p.z_noise for p in points])
    return ~(truth > ceiling * np.percentile(np.exp(noise * z_noise), 97.5, axis=1))


class _Stacked:
    """Points under one error model as arrays (one row a point), so that the bisection of
    ``kappa`` and the scoring take them all at once: each row's centre and draws are within
    the model's band of the line rate (:meth:`Scored.view`)."""

    def __init__(self, points: Sequence[Scored], em: ErrorModel) -> None:
        views = [p.view(em.share_band) for p in points]
        self.truth = np.array([p.truth for p in points])
        self.ceiling = np.array([p.ceiling for p in points])
        self.centre = np.array([c for c, _ in views])
        self.base = np.stack([b for _, b in views]) if points else np.empty((0, 0))
        self.z = np.stack([p.z for p in points]) if points else np.empty((0, 0))
        self.z_noise = np.stack([p.z_noise for p in points]) if points else np.empty((0, 0))
        d, s = np.array([p.d for p in points]), np.array([p.s for p in points])
        within = np.array([p.within for p in points])
        self.shift = np.asarray(em.mean(d, s, within), dtype=float)
        self.lifted = lifted(self.centre, self.shift, self.ceiling)
        self.spread = np.asarray(em.reach(d, s, self.lifted, within), dtype=float)
        self.noise = em.noise
        self.reachable = within_reach(points, em.noise)

    def intervals(
        self, kappa: float | np.ndarray = 1.0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(centre, low, high) per row: the 95% prediction interval under the spreads times
        ``kappa`` (one factor, or one a row; :func:`apply_error`; the finite draws only), never
        narrower than its centre; low and high NaN where no draw is finite or the centre is
        not."""
        draws = apply_error(
            self.base,
            self.shift[:, None],
            (self.spread * kappa)[:, None] * self.z,
            self.ceiling[:, None],
            self.noise * self.z_noise,
        )
        low, high = finite_percentiles(draws, (2.5, 97.5))
        centre = self.lifted
        return centre, np.minimum(low, centre), np.maximum(high, centre)

    def covers(self, kappa: float | np.ndarray) -> np.ndarray:
        """Per row, whether its interval under the spreads times ``kappa`` (one factor, or
        one a row) covers its truth (a row with no interval, or no centre, never does)."""
        centre, low, high = self.intervals(kappa)
        return (low <= self.truth) & (self.truth <= high) & np.isfinite(centre)

    def coverage(self, kappa: float) -> float:
        """The share of the points within reach (:attr:`reachable`) whose interval under
        the spreads times ``kappa`` covers them (a point with no interval, or no centre, is
        never covered)."""
        if not self.reachable.any():
            return math.nan
        return float(np.mean(self.covers(kappa)[self.reachable]))


def _usable(points: Sequence[Scored]) -> list[Scored]:
    return [p for p in points if math.isfinite(p.centre) and p.centre > 0 and p.truth > 0]


def _spanning_slope(
    points: Sequence[Scored], band: tuple[float, float, float] | None = None
) -> float:
    """``mu_m``: the mean log residual per doubling of ``points`` whose anchor spans nodes
    (``within`` = 0), by least squares through the origin with each source weighted alike;
    0.0 where there are none."""
    got = [(p, p.view(band)[0]) for p in points if p.within == 0 and p.d > 0 and p.truth > 0]
    got = [(p, c) for p, c in got if math.isfinite(c) and c > 0]
    if not got:
        return 0.0
    groups = [p.group for p, _ in got]
    w = np.array([1.0 / groups.count(g) for g in groups])
    d = np.array([p.d for p, _ in got])
    r = np.array([math.log(p.truth / c) for p, c in got])
    return float(np.sum(w * d * r) / np.sum(w * d * d))


def _components(
    points: Sequence[Scored],
    noise: float,
    fitted_on: str = "",
    band: tuple[float, float, float] | None = None,
    spanning: Sequence[Scored] = (),
) -> ErrorModel:
    """The means and the three spreads of ``points`` (usable ones) with their draws within
    ``band`` of a stated line rate, before ``kappa`` (see the module doc); ``spanning``: more
    points from anchors that span nodes, for ``mu_m`` alone."""
    from scipy.optimize import nnls

    mu_m = _spanning_slope([*points, *spanning], band)
    centres = [p.view(band)[0] for p in points]
    points = [p for p, c in zip(points, centres, strict=True) if math.isfinite(c) and c > 0]
    centres = [c for c in centres if math.isfinite(c) and c > 0]
    if not points:
        return ErrorModel(noise=noise, fitted_on=fitted_on, share_band=band, mu_m=mu_m)
    d = np.array([p.d for p in points])
    s = np.array([p.s for p in points])
    r = np.array([math.log(p.truth / c) for p, c in zip(points, centres, strict=True)])
    groups = [p.group for p in points]
    n_of = {g: groups.count(g) for g in set(groups)}
    w = np.array([1.0 / n_of[g] for g in groups])  # each source counts once
    design = np.column_stack([d, s])
    if not np.any(design):
        return ErrorModel(noise=noise, fitted_on=fitted_on, share_band=band, mu_m=mu_m)
    root = np.sqrt(w)[:, None]
    # the mean where the anchor is within one node (ErrorModel.mean); mu_m's where it spans
    one_node = np.array([p.within for p in points])
    carried = design * one_node[:, None]
    mu, *_ = np.linalg.lstsq(carried * root, r * root[:, 0], rcond=None)
    shift = carried @ mu + mu_m * d * (1 - one_node)
    # the spreads are per unit of the loss each centre projects (loss_scale), as is the noise
    # they are fitted beside
    ceiling = np.array([p.ceiling for p in points])
    h = np.asarray(loss_scale(lifted(np.array(centres), shift, ceiling)))
    e = (r - shift) / h
    noise2 = (noise / h) ** 2
    # a source's own error is its network's: its mean residual is taken over the points
    # whose anchor had not crossed a node (s = 1) apart from those whose had (s = 0)
    strata = [(g, bool(x > 0)) for g, x in zip(groups, s, strict=True)]
    n_in = {k: strata.count(k) for k in sorted(set(strata))}  # one order: sums repeat to the bit
    own = {k: float(np.mean(e[[x == k for x in strata]])) for k in n_in}
    # within a source: squared deviations from its stratum's mean (unbiased for its n)
    repeated = np.array([n_in[k] > 1 for k in strata])
    var = np.zeros(2)
    if repeated.any():
        dev2 = (
            np.array(
                [
                    (e[i] - own[k]) ** 2 * n_in[k] / (n_in[k] - 1) if n_in[k] > 1 else 0.0
                    for i, k in enumerate(strata)
                ]
            )
            - noise2
        )
        rw = root[repeated]
        var, _ = nnls(design[repeated] * rw, np.maximum(dev2[repeated], 0.0) * rw[:, 0])
    # between sources: what the sources' mean residuals across the first inter-node step
    # spread beyond their within spread
    per_point = var[0] * d + var[1] * s + noise2
    crossing = [k for k in n_in if k[1]]
    excess = [
        own[k] ** 2 - float(np.mean(per_point[[x == k for x in strata]])) / n_in[k]
        for k in crossing
    ]
    between = max(0.0, float(np.mean(excess))) if len(crossing) > 1 else 0.0
    return ErrorModel(
        float(mu[0]),
        float(mu[1]),
        float(math.sqrt(var[0])),
        float(math.sqrt(var[1])),
        noise,
        fitted_on,
        float(math.sqrt(between)),
        band,
        mu_m,
    )


def fit(
    points: Sequence[Scored],
    fitted_on: str = "",
    noise: float = NOISE_GRID[0],
    spanning: Sequence[Scored] = (),
) -> ErrorModel:
    """The error model of ``points`` (see the module doc): the band of a stated line rate
    their clusters achieved, the components within it, then ``kappa`` on the training set's
    own intervals from anchors within one node, and ``sd_m`` on theirs from anchors that span
    nodes. ``spanning``: the training cases' points projected from their smaller published
    scales, for the mean (``mu_m``) and the spread (``sd_m``) where the anchor spans nodes."""
    usable, more = _usable(points), _usable(spanning)
    band = learn_share_band(usable)
    em = _components(usable, noise, fitted_on, band, more)
    if not usable:
        return em
    stacked = _Stacked([p for p in usable if p.within], em)
    # kappa: the smallest factor whose training intervals cover COVERAGE_TARGET
    lo, hi = 0.0, 1.0
    while stacked.coverage(hi) < COVERAGE_TARGET and hi < 64:
        lo, hi = hi, hi * 2
    for _ in range(20):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if stacked.coverage(mid) >= COVERAGE_TARGET else (mid, hi)
    em = em.scaled(hi)
    across = [p for p in [*usable, *more] if not p.within]
    unit = _Stacked(across, replace(em, sd_m=1.0))
    return replace(em, sd_m=_quantile_factor(unit))


def _quantile_factor(stacked: _Stacked, top: float = 64.0) -> float:
    """The :data:`COVERAGE_TARGET` quantile (numpy's linear) of the factors on the spreads of
    ``stacked`` that each point within reach needs for its interval to cover it (``top``
    where it needs more; 0.0 where no point is within reach)."""
    if not stacked.reachable.any():
        return 0.0
    n = len(stacked.truth)
    lo, hi = np.zeros(n), np.full(n, top)
    for _ in range(30):
        mid = (lo + hi) / 2
        covered = stacked.covers(mid)
        lo, hi = np.where(covered, lo, mid), np.where(covered, mid, hi)
    need = np.where(stacked.covers(hi), hi, top)[stacked.reachable]
    return float(np.percentile(need, 100 * COVERAGE_TARGET))


def score(points: Sequence[Scored], em: ErrorModel) -> list[dict[str, float | bool | str]]:
    """Each point's interval under ``em`` (:meth:`_Stacked.intervals`), its error and width."""
    if not points:
        return []
    centres, lows, highs = _Stacked(points, em).intervals()
    out: list[dict[str, float | bool | str]] = []
    for p, centre, low, high in zip(points, centres, lows, highs, strict=True):
        centre, low, high = float(centre), float(low), float(high)
        out.append(
            {
                "case": p.case,
                "group": p.group,
                "predicted": centre,
                "low": low,
                "high": high,
                "covered": bool(low <= p.truth <= high),
                "error_pts": 100.0 * (centre - p.truth),
                "width_pts": 100.0 * (high - low),
                "miss_pts": 100.0 * (max(0.0, low - p.truth) + max(0.0, p.truth - high)),
            }
        )
    return out


def fit_sweep(
    points: Sequence[Scored], fitted_on: str = "", spanning: Sequence[Scored] = ()
) -> ErrorModel:
    """The error model a sweep's projection draws with: ``points``' fit with its spreads
    calibrated beside one measured run's noise (:data:`MEASURED_NOISE`), not a published
    table's.

    A sweep's projection replaces the noise with its own runs' (never below
    :data:`MEASURED_NOISE`). The spreads of :func:`.published.noise_selection.fit_selected`'s
    model were calibrated beside the table's noise the folds chose, which at its usual level
    carries nearly all the width (``kappa`` near 0); with a run's noise in its place, the
    intervals a sweep drew covered 83% of the held-out points from one node and 82% from
    several, where the same folds' published-noise intervals covered 95% and 91%. Calibrated
    beside a run's noise instead, ``kappa`` puts the width where the error grows: with the carry
    and the first step across nodes."""
    return fit(points, fitted_on, MEASURED_NOISE, spanning)
