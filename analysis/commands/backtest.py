"""``python -m analysis.project``: the projection scored on published results.

``backtest CASES.yaml`` predicts every published point of the cases from their measured points
and prints, per point and in total, the error and whether the interval covered the published
value (``--cross-validate``: nested, with the error model whose noise and fit come from the
other sources alone; ``--json`` records each fold's choice under ``folds``); FSDP's cases are
scored and printed apart (``fsdp`` in the JSON), never fitted into the shipped error model;
``fit-error CASES.yaml`` fits the projection's error model on them, its noise level chosen by
a leave-one-source-out over them, and writes the shipped one with its selection.
The work is :mod:`analysis.compute.projection.published.backtest`'s; this module is the
command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.commands.common import _positive_int
from analysis.compute.projection.error_file import SHIPPED_PATH
from analysis.compute.projection.error_file import write as write_error_model
from analysis.compute.projection.interval import DRAWS
from analysis.compute.projection.model_error import fit_sweep
from analysis.compute.projection.published.backtest import backtest, cross_validated, split
from analysis.compute.projection.published.noise_selection import fit_selected
from analysis.compute.projection.published.scoring import (
    CaseError,
    prepare,
    prepare_walked,
    read_cases,
)
from analysis.compute.projection.published.sealed import split_sealed
from analysis.read.cases import Case, read_sealed
from scalescope.cli import OneLineParser

PROG = "python -m analysis.project"


def _print(
    result: dict[str, Any],
    how: str = "",
    title: str = "Projection backtest: published multi-node efficiency",
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in (
        "Case",
        "From",
        "Against",
        "Nodes",
        "Devices",
        "Published",
        "Projected [95% PI]",
        "Error (pts)",
        "Covered",
    ):
        table.add_column(col, justify="left" if col == "Case" else "right")
    for p in result["points"]:
        table.add_row(
            p["case"],
            _nodes(p["measured_nodes"]),
            p["against"],
            str(p["nodes"]),
            str(p["nodes"] * p["devices_per_node"]),
            f"{100 * p['published']:.1f}%",
            f"{100 * p['predicted']:.1f}% [{100 * p['low']:.1f}, {100 * p['high']:.1f}]",
            f"{100 * (p['predicted'] - p['published']):+.1f}",
            "yes" if p["covered"] else "no",
        )
    console = Console(width=120, highlight=False)
    console.print(table)
    t = result["totals"]
    console.print(
        f"{t['cases']} case(s), {t['points']} published point(s): interval coverage "
        f"{100 * t['coverage']:.0f}%, median absolute error {t['median_abs_error_pts']:.1f} "
        f"points of efficiency, median interval width {t['median_width_pts']:.1f} points"
        + (f" ({how})" if how else ""),
        markup=False,
    )
    parts = [
        f"{name} ({t['points']} point(s)): coverage {100 * t['coverage']:.0f}%, median error "
        f"{t['median_abs_error_pts']:.1f}, median width {t['median_width_pts']:.1f} points"
        for name, t in (
            ("network between nodes measured", result["totals_by_network"]["measured"]),
            ("stated", result["totals_by_network"]["stated"]),
            ("assumed", result["totals_by_network"]["assumed"]),
        )
        if t["points"]
    ]
    if parts:
        console.print("By what was known of the network: " + "; ".join(parts), markup=False)
    spans: dict[str, int] = {}
    for p in result["points"]:
        for what in p.get("spans", ()):
            spans[what] = spans.get(what, 0) + 1
    if spans:
        console.print(
            "The intervals span, rather than assume: "
            + "; ".join(f"{what} ({n} point(s))" for what, n in spans.items()),
            markup=False,
        )


def _nodes(counts: Sequence[int]) -> str:
    """The node counts a point was projected from, short: ``1,2`` or ``1,2…64``."""
    if len(counts) <= 3:
        return ",".join(str(n) for n in counts)
    return f"{counts[0]},{counts[1]}…{counts[-1]}"


def _nested_words(result: dict[str, Any]) -> str:
    """How the cross-validated figures were made, and what the folds chose."""
    chosen = [f"{100 * f['noise']:g}%" for f in result["folds"]]
    counts = {c: chosen.count(c) for c in sorted(set(chosen), key=lambda c: float(c[:-1]))}
    picks = ", ".join(f"{c} in {n}" for c, n in counts.items())
    return (
        f"nested leave one source out: each of {len(chosen)} folds chose its noise level "
        f"from the other sources alone: {picks}"
    )


def _family_words(result: dict[str, Any], held: str = "") -> str:
    """Leave one family out: a whole kind of system held out at a time (``held``: the folds
    in words, from ``family_folds`` where not given)."""
    t = result["family_totals"]
    held = held or ", ".join(f"{f['held_out']} ({f['points']})" for f in result["family_folds"])
    return (
        f"Leave one family out (nested the same way; a kind of system held out whole: {held}): "
        + _figures(t)
    )


WALKED_TITLE = "Every measured scale used: each published point from the case's smaller ones"
WALKED_WORDS = (
    "each point projected from its case's measured points and every smaller published scale, "
    "the largest the anchor, the rest evidence of what the network achieves"
)


def _print_walked(result: dict[str, Any], nested: bool) -> None:
    """The walked-forward points (the network measured), and their leave one family out."""
    from rich.console import Console

    walked = result["walked"]
    how = WALKED_WORDS + (
        "; each by its source's fold's model, whose mean from an anchor across nodes the other "
        "sources' such points fitted"
        if nested
        else "; the shipped model's mean from an anchor across nodes was fitted on the open ones"
    )
    _print(walked, how, WALKED_TITLE)
    if "family_totals" in walked:
        Console(width=120, highlight=False).print(
            _family_words(walked, "the same folds"), markup=False
        )


SWEEP_WORDS = (
    "As a sweep's projection draws them (the same fit, its spreads calibrated beside one "
    "measured run's noise, 3%, not a published table's)"
)


def _print_sweep(result: dict[str, Any], what: str = "") -> None:
    """The figures of the model a sweep's projection draws with (``sweep``), from one node
    and from every smaller scale, where the result has them."""
    from rich.console import Console

    sweep = result.get("sweep")
    if not sweep:
        return
    parts = [f"{what}{_figures(sweep['totals'])}"] if sweep["totals"]["points"] else []
    if "family_totals" in sweep:
        parts.append("a kind of system held out " + _figures(sweep["family_totals"]))
    if "walked" in sweep:
        parts.append("from every smaller scale " + _figures(sweep["walked"]["totals"]))
        if "family_totals" in sweep["walked"]:
            parts.append("the same, a kind held out " + _figures(sweep["walked"]["family_totals"]))
    Console(width=120, highlight=False).print(f"{SWEEP_WORDS}: " + "; ".join(parts), markup=False)


def _figures(t: dict[str, Any]) -> str:
    return (
        f"interval coverage {100 * t['coverage']:.0f}%, median absolute error "
        f"{t['median_abs_error_pts']:.1f} points, median interval width "
        f"{t['median_width_pts']:.1f} points over {t['points']} point(s)"
    )


def _print_fsdp_own(own: dict[str, Any]) -> None:
    """What FSDP's points would give with an error model of their own (backtest.fsdp_own),
    beside the figures above of the model they are projected with."""
    from rich.console import Console

    n = len(own["sources"])
    parts = []
    for name, words in (("published", ""), ("sweep", "as a sweep's projection draws them ")):
        got = own[name]
        parts.append(words + _figures(got["totals"]))
        if got["walked_totals"]:
            parts.append(f"{words}from every smaller scale " + _figures(got["walked_totals"]))
    Console(width=120, highlight=False).print(
        f"FSDP's own error model, for comparison (the same fit on the {n} open FSDP sources "
        f"alone, nested leave one source out: each fold fits on {n - 1}): "
        + "; ".join(parts)
        + ". FSDP's points are projected with the all-reduce cases' model, whose figures are"
        " above",
        markup=False,
    )


def _print_sealed(sealed: dict[str, Any]) -> None:
    """The sealed test's figures: one line for the all-reduce cases, one for FSDP's."""
    from rich.console import Console

    line = (
        f"Sealed test ({len(sealed['sources'])} source(s) set aside before any fit, scored once "
        f"by the model fitted on the others: {', '.join(sealed['sources'])}): "
    )
    parts = []
    if sealed["totals"]["points"]:
        parts.append(_figures(sealed["totals"]))
    if "walked" in sealed:
        parts.append("from every smaller scale " + _figures(sealed["walked"]["totals"]))
    if "fsdp" in sealed:
        parts.append("FSDP's " + _figures(sealed["fsdp"]["totals"]))
        if "walked" in sealed["fsdp"]:
            parts.append(
                "FSDP's from every smaller scale " + _figures(sealed["fsdp"]["walked"]["totals"])
            )
    Console(width=120, highlight=False).print(line + "; ".join(parts), markup=False)
    _print_sweep(sealed, "the sealed test ")
    if "fsdp" in sealed:
        _print_sweep(sealed["fsdp"], "the sealed test's FSDP ")


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    bt = sub.add_parser("backtest", help="score the projection on published multi-node cases")
    bt.add_argument("cases", metavar="CASES.yaml")
    bt.add_argument("--json", metavar="FILE", help="also write the points and totals here")
    bt.add_argument(
        "--cross-validate",
        action="store_true",
        help="score each source's points with the error model whose noise and fit come from "
        "the other sources alone (nested leave one source out) instead of the shipped one",
    )
    bt.add_argument("--draws", type=_positive_int, default=DRAWS, help=argparse.SUPPRESS)
    fe = sub.add_parser(
        "fit-error",
        help="fit the projection's error model on published cases and write it "
        f"({SHIPPED_PATH.name}, shipped with the analysis)",
    )
    fe.add_argument("cases", metavar="CASES.yaml")
    fe.add_argument("--out", metavar="FILE", default=str(SHIPPED_PATH), help=argparse.SUPPRESS)
    fe.add_argument("--draws", type=_positive_int, default=DRAWS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        cases = read_cases(args.cases)
        sealed = read_sealed(args.cases)
    except CaseError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    shut = sealed.sources if sealed else ()
    if args.command == "fit-error":
        return _fit_error(cases, shut, args)
    try:
        result = (
            cross_validated(cases, draws=args.draws, sealed=shut)
            if args.cross_validate
            else backtest(cases, draws=args.draws)
        )
    except CaseError as exc:
        print(f"{PROG}: error: {args.cases}: {exc}", file=sys.stderr)
        return 2
    _print_result(result, args.cross_validate)
    if args.json:
        from scalescope.atomic import write_text_atomic

        write_text_atomic(Path(args.json), json.dumps(result, indent=2) + "\n")
    return 0


def _fit_error(cases: Sequence[Case], shut: Sequence[str], args: argparse.Namespace) -> int:
    """``fit-error``: the error model fitted on the open all-reduce cases, written."""
    # FSDP's cases stay out of the shipped model until enough; the sealed ones always
    ddp, _ = split(split_sealed(cases, shut)[0])
    prepared = prepare(ddp, draws=args.draws)
    n = len(prepared)
    on = f"{Path(args.cases).name}: {len(ddp)} cases, {n} points" + (
        f" ({len(shut)} sealed source(s) left out)" if shut else ""
    )
    _, spanning = prepare_walked(ddp, draws=args.draws)  # the mean across nodes
    em, selection = fit_selected(prepared, on, spanning=spanning)
    sweep = fit_sweep(prepared, on, spanning)
    write_error_model(em, Path(args.out), selection, sweep=sweep)
    print(f"{PROG}: wrote {args.out}: {em}")
    return 0


def _print_result(result: dict[str, Any], nested: bool) -> None:
    """Every table and line of a backtest's ``result`` (``nested``: cross-validated)."""
    _print(result, _nested_words(result) if nested else "")
    if "family_totals" in result:
        from rich.console import Console

        Console(width=120, highlight=False).print(_family_words(result), markup=False)
    _print_sweep(result)
    if "walked" in result:
        _print_walked(result, nested)
    if "fsdp" in result:
        _print(
            result["fsdp"],
            "scored apart, not in the shipped error model: its spreads with noise "
            f"{result['fsdp']['error_model'].rsplit('noise ', 1)[-1]}",
            "FSDP projection backtest: published efficiency, scored apart",
        )
        _print_sweep(result["fsdp"], "FSDP's ")
        if "walked" in result["fsdp"]:
            _print(
                result["fsdp"]["walked"],
                WALKED_WORDS + "; scored, never fitted on",
                "FSDP: " + WALKED_TITLE,
            )
        if "own" in result["fsdp"]:
            _print_fsdp_own(result["fsdp"]["own"])
    if "sealed" in result:
        _print_sealed(result["sealed"])


if __name__ == "__main__":
    sys.exit(main())
