"""The backtest: every published point of the cases scored by the projection
(``python -m analysis.project backtest``), with the shipped error model or nested
cross-validated, FSDP's cases apart.

The cases' step models, their draws and the points they prepare are :mod:`.scoring`'s; this
module scores them and lays out the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from analysis.compute.projection.error_file import load as load_error_model
from analysis.compute.projection.error_file import load_sweep
from analysis.compute.projection.interval import DRAWS
from analysis.compute.projection.model_error import (
    MEASURED_NOISE,
    NOISE_GRID,
    ErrorModel,
    score,
)
from analysis.compute.projection.published.noise_selection import cross_validate
from analysis.compute.projection.published.scoring import (
    evidence,
    prepare,
    prepare_walked,
    reference,
)
from analysis.compute.projection.published.sealed import split_sealed
from analysis.compute.projection.published.totals import totals
from analysis.compute.projection.published.unknowns import unknowns
from analysis.compute.projection.scored import Scored
from analysis.read.cases import Case, CaseError, is_fsdp


def backtest(
    cases: Sequence[Case],
    draws: int = DRAWS,
    seed: int = 0,
    error_model: ErrorModel | None = None,
) -> dict[str, Any]:
    """Every published point predicted from its case's measured points, with the shipped
    error model (or ``error_model``), and under ``walked`` every published point predicted
    from the case's smaller published scales as well (:func:`~.scoring.walk_forward`: the
    network measured); FSDP's cases apart, under ``fsdp`` (:func:`split`). With the shipped
    model, the same points also under ``sweep``, scored by the model a sweep's projection
    draws with (:func:`~..model_error.fit_sweep`)."""
    em = error_model or load_error_model()
    sweep = None if error_model else load_sweep()
    ddp, fsdp = split(cases)
    result = _scored(_prepare(ddp, draws, seed), em, sweep)
    return _with_fsdp(result, _prepare(fsdp, draws, seed), em, sweep)


SEALED_SEED_OFFSET = 1000
"""The sealed test's draws start from a seed of their own (the backtest's seed plus this; its
walked points the one after), so that no sealed point draws the random numbers an open point
the model was fitted on drew: each prepared set starts its stream at its seed, and the
sealed cases drew, until 2026-11-30, the open cases' (the first of each the same)."""


class Prepared(NamedTuple):
    """Cases with their points prepared (:func:`~.scoring.prepare`, the costly part), and
    the same cases walked forward with theirs (:func:`~.scoring.prepare_walked`)."""

    cases: list[Case]
    points: list[Scored]
    walked: list[Case]
    more: list[Scored]


def _prepare(cases: Sequence[Case], draws: int, seed: int) -> Prepared:
    return Prepared(list(cases), prepare(cases, draws, seed), *prepare_walked(cases, draws, seed))


def _scored(got: Prepared, em: ErrorModel, sweep: ErrorModel | None = None) -> dict[str, Any]:
    """The prepared cases' points scored by ``em``, and their walked-forward ones under
    ``walked``; with ``sweep``, the same points scored by it under ``sweep`` (its ``walked``
    within)."""
    cases, prepared, walked, more = got
    result = _result(cases, prepared, score(prepared, em))
    if walked:
        result["walked"] = _result(walked, more, score(more, em))
    if sweep is not None:
        result["sweep"] = _result(cases, prepared, score(prepared, sweep))
        if walked:
            result["sweep"]["walked"] = _result(walked, more, score(more, sweep))
    return result


def split(cases: Sequence[Case]) -> tuple[list[Case], list[Case]]:
    """(the all-reduce cases, the FSDP ones), each in the file's order: FSDP's are scored
    apart and never fitted into the shipped error model until there are enough of them."""
    return [c for c in cases if not is_fsdp(c)], [c for c in cases if is_fsdp(c)]


FSDP_NOISE_FLOOR = 0.03
"""The least run-to-run noise FSDP's points are scored with, since too few FSDP cases exist
to fit or check their own (three open sources, a fourth sealed; fitted on two a fold, their
own model misses the third by tens of points, :func:`fsdp_own`): a stated level, the widest
the noise grid held before the grid was widened to cover clusters of every kind."""


def fsdp_error_model(em: ErrorModel) -> ErrorModel:
    """The error model FSDP's points are scored with: the shipped one (fitted on the
    all-reduce cases alone, none of FSDP's), its noise at least :data:`FSDP_NOISE_FLOOR`,
    since too few FSDP cases exist to fit or check their own."""
    noise = max(em.noise, FSDP_NOISE_FLOOR)
    return replace(em, noise=noise, fitted_on=f"{em.fitted_on}; FSDP: noise {noise:g}")


def _with_fsdp(
    result: dict[str, Any],
    fsdp: Prepared,
    em: ErrorModel,
    sweep: ErrorModel | None = None,
) -> dict[str, Any]:
    """``result`` (the all-reduce cases') with the ``fsdp`` cases' own points and totals
    under ``fsdp`` where there are any (none: ``result`` as it was); with ``sweep``, scored
    by it as well (:func:`_scored`)."""
    if not fsdp.cases:
        return result
    fem = fsdp_error_model(em)
    got = _scored(fsdp, fem, sweep)
    return {**result, "fsdp": {**got, "error_model": fem.fitted_on}}


def _result(
    cases: Sequence[Case], prepared: Sequence[Scored], scored: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    i = 0
    for case in cases:
        _, field = reference(case)
        for p in case.published:
            got, prep = scored[i], prepared[i]
            assert got["case"] == case.name and prep.case == case.name
            points.append(
                {
                    "case": case.name,
                    "nodes": p.nodes,
                    "devices_per_node": p.devices_per_node,
                    "published": prep.truth,
                    "against": "1 node" if field == "efficiency_vs_1node" else "1 GPU",
                    "predicted": got["predicted"],
                    "low": got["low"],
                    "high": got["high"],
                    "covered": got["covered"],
                    "centre_assumes": prep.explanation,
                    "group": case.group,
                    "network": network_known(case),
                    "measured_nodes": sorted({q.nodes for q in case.measured}),
                    "spans": unknowns(case),
                }
            )
            i += 1
    t = totals(scored)
    known = [network_known(case) for case in cases for _ in case.published]
    return {
        "points": points,
        "totals": {
            "cases": len(cases),
            "points": len(points),
            "coverage": t["coverage"],
            "median_abs_error_pts": t["median_abs_error_pts"],
            "median_width_pts": t["median_width_pts"],
        },
        # the bar an interval is held to depends on what was known of the network between
        # nodes: measured, stated or assumed (network_known)
        "totals_by_network": {
            name: {
                **totals([x for x, k in zip(scored, known, strict=True) if k == name]),
                "points": known.count(name),
            }
            for name in NETWORK_KNOWN
        },
    }


NETWORK_KNOWN = ("measured", "stated", "assumed")


def network_known(case: Case) -> str:
    """What a case's projection knew of the network between nodes (:data:`NETWORK_KNOWN`):
    ``measured`` where it measured several node counts, one of them across nodes (what the
    network achieves is in them, :func:`~.scoring.evidence`), else ``stated`` where the case
    states a line rate, else ``assumed`` (a band of the intra-node link)."""
    if evidence(case):
        return "measured"
    return "stated" if case.inter_busbw_gbps else "assumed"


def cross_validated(
    cases: Sequence[Case],
    draws: int = DRAWS,
    seed: int = 0,
    prepared: Sequence[Scored] = (),
    sealed: Sequence[str] = (),
) -> dict[str, Any]:
    """Nested leave one source out: each source's points with the error model whose noise
    and fit come from the other sources alone (noise_selection.cross_validate), in the
    backtest's layout, with each fold's chosen settings under ``folds``; and leave one family
    out the same way (``family_totals``, ``family_folds``: a kind of system held out whole,
    :data:`analysis.read.cases.FAMILIES`); under ``sweep``, each source's points (and its
    walked ones) by its fold's fit calibrated beside one run's noise, as a sweep's projection
    draws (:func:`~..model_error.fit_sweep`); FSDP's cases apart,
    as :func:`backtest` scores them. ``prepared``: the open all-reduce cases' prepared points
    where already made (:func:`prepare`, the costly part).

    ``sealed``: the sources set aside as the sealed test (:mod:`.sealed`): left out of every
    fold, and scored once, under ``sealed``, by the shipped error model (fitted on the open
    sources alone, ``fit-error``), as :func:`backtest` scores them. :class:`CaseError` where
    the open all-reduce cases are all of one source (a fold would be fitted on nothing)."""
    open_cases, shut = split_sealed(cases, sealed)
    ddp, fsdp = split(open_cases)
    sources = sorted({c.group for c in ddp})
    if len(sources) == 1:  # a fold would be fitted on nothing
        raise CaseError(
            "cross-validation holds out one source (source_group) at a time and fits on the "
            f"others: the open all-reduce cases are all of one, {sources[0]!r}"
        )
    prepared = list(prepared) or prepare(ddp, draws, seed)
    walked, more = prepare_walked(ddp, draws, seed)
    result, folds, family_folds = _nested(ddp, prepared, walked, more)
    result["folds"] = _bare(folds, "also")
    result["family_folds"] = _bare(family_folds, "inner", "also")
    # what a sweep's intervals cover: each fold's fit calibrated beside one run's noise
    # (model_error.fit_sweep), the model a sweep's projection draws with
    result["sweep"] = _nested(ddp, prepared, walked, more, (MEASURED_NOISE,))[0]
    # no FSDP source is in the shipped model's fit: each is already held out of it
    fsdp_prepared = _prepare(fsdp, draws, seed)  # scored by the pooled model and their own
    result = _with_fsdp(result, fsdp_prepared, load_error_model(), load_sweep())
    own = fsdp_own(fsdp_prepared)
    if own is not None:
        result["fsdp"]["own"] = own
    if shut:  # scored once, by the model no choice made on them, with draws of their own
        result["sealed"] = {
            **backtest(shut, draws, seed + SEALED_SEED_OFFSET),
            "sources": sorted({c.group for c in shut}),
        }
    return result


def fsdp_own(fsdp: Prepared) -> dict[str, Any] | None:
    """How FSDP's points would do with an error model of their own: the same fit on the FSDP
    sources alone, nested leave one source out (each fold's noise and fit from the other FSDP
    sources), from one node and from every smaller scale, with the published grid and as a
    sweep draws. Scored beside the figures of the model they are projected with
    (:func:`fsdp_error_model`), to say what their own would give; None with fewer than two
    FSDP sources (a fold needs one to fit on)."""
    cases, prepared, walked, more = fsdp
    sources = sorted({c.group for c in cases})
    if len(sources) < 2:
        return None
    out: dict[str, Any] = {"sources": sources}
    for name, grid in (("published", NOISE_GRID), ("sweep", (MEASURED_NOISE,))):
        got, folds, _ = _nested(cases, prepared, walked, more, grid, by_family=False)
        out[name] = {
            "totals": got["totals"],
            "walked_totals": got["walked"]["totals"] if walked else None,
            "folds": _bare(folds, "also"),
        }
    return out


def _nested(
    cases: Sequence[Case],
    prepared: Sequence[Scored],
    walked: Sequence[Case],
    more: Sequence[Scored],
    grid: Sequence[float] = NOISE_GRID,
    by_family: bool = True,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """``cases``' ``prepared`` points nested leave one source out, in the backtest's layout,
    with leave one family out's totals under ``family_totals`` (a whole kind of system held
    out, its sources' noise and fit from the other kinds alone, as a cluster unlike any in
    the file would be), each fold's noise chosen from ``grid``; and under ``walked`` the
    ``walked`` cases' points ``more``, each scored by its fold's model, both ways. Also the
    folds of each way. ``by_family`` False: leave one source out only (the cases are of one
    kind, which a family fold would leave nothing to fit on)."""
    scored, folds = cross_validate(prepared, grid, also=more)
    # cross_validate groups the points by fold: put them back in the cases' order
    result = _result(cases, prepared, _in_order(cases, scored))
    if walked:
        result["walked"] = _result(walked, more, _in_order(walked, _also(folds)))
    if not by_family:
        return result, folds, []
    by_kind, kind_folds = cross_validate(prepared, grid, key=lambda p: p.family, also=more)
    result["family_totals"] = {**totals(by_kind), "points": len(by_kind)}
    if walked:
        result["walked"]["family_totals"] = {**totals(_also(kind_folds)), "points": len(more)}
    return result, folds, kind_folds


def _bare(folds: Sequence[dict[str, Any]], *drop: str) -> list[dict[str, Any]]:
    """The folds' records without the keys ``drop`` (what the JSON need not repeat)."""
    return [{k: v for k, v in f.items() if k not in drop} for f in folds]


def _also(folds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points the folds scored under ``also``, fold after fold."""
    return [p for fold in folds for p in fold.get("also", ())]


def _in_order(cases: Sequence[Case], scored: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``scored`` (points of ``cases``, in any order of cases) in the order of ``cases``'
    points (a case's own points keep their order)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for s in scored:
        by_key.setdefault(str(s["case"]), []).append(s)
    return [by_key[c.name].pop(0) for c in cases for _ in c.published]
