"""``python -m analysis.summarize check PATH... --reference ref.yaml``: the regression gate
(``--write-reference ref.yaml`` writes a reference file from the results instead); the tests
are :mod:`analysis.compute.gate`'s.

Exit status: 0 when no value regressed, 1 on a significant regression (or a missing value
with ``--fail-on-missing``, or no finished run at all), 2 for a bad reference file or usage.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pandas as pd

from analysis.commands.common import (
    PROG,
    _fraction,
    add_jobs,
    add_paths,
    emit,
    finished_runs,
    say_shared_nodes,
)
from analysis.compute.gate import DEFAULT_ALPHA as GATE_ALPHA
from analysis.compute.gate import DEFAULT_TOLERANCE as GATE_TOLERANCE
from analysis.compute.gate import (
    MISSING as GATE_MISSING,
)
from analysis.compute.gate import (
    REGRESSION,
    BadReference,
    check,
    load_reference,
    reference_document,
    unreferenced,
    write_reference,
)
from analysis.present.display import MISSING, DisplayTable, pct, sig
from scalescope.cli import OneLineParser


def build_check_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=f"{PROG} check",
        description="Regression gate: check per-device throughput and scaling efficiency "
        "against a reference file. A value fails only when it is below reference x "
        "(1 - tolerance) AND significantly so (one-sided test at --alpha). Exit 0: nothing "
        "regressed; 1: a regression (or a missing value with --fail-on-missing, or no "
        "finished run); 2: a bad reference file or usage.",
    )
    add_paths(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--reference", metavar="FILE", help="the reference file (YAML) to check")
    which.add_argument(
        "--write-reference",
        metavar="FILE",
        help="write a reference file from these results (means per series and scale) "
        "instead of checking; refuses to replace FILE without --force",
    )
    p.add_argument("--force", action="store_true", help="let --write-reference replace FILE")
    p.add_argument(
        "--tolerance",
        type=_fraction,
        default=GATE_TOLERANCE,
        help="default relative tolerance written by --write-reference (0.05)",
    )
    p.add_argument(
        "--alpha",
        type=_fraction,
        default=GATE_ALPHA,
        help="significance level of the one-sided tests (0.05)",
    )
    p.add_argument(
        "--fail-on-missing",
        action="store_true",
        help="exit 1 when a referenced value has no matching result (default: shown, exit 0)",
    )
    p.add_argument("--format", choices=("table", "markdown", "json", "csv"), default="table")
    add_jobs(p)
    return p


def _gate_value(metric: str, x: Any) -> str:
    return (
        pct(x) if metric in ("parallel_efficiency", "per_device_throughput_efficiency") else sig(x)
    )


GATE_METRICS = {
    "samples_per_s": "throughput",
    "samples_per_s_per_device": "throughput/device",
    "parallel_efficiency": "efficiency",
    "per_device_throughput_efficiency": "efficiency (weak)",
}
"""Short names of the gate's metrics in its terminal and Markdown table (CSV and JSON keep
the record's names)."""


def _check_table(frame: pd.DataFrame, alpha: float, n_unchecked: int) -> DisplayTable:
    rows = []
    tolerances = {float(t) for t in frame["tolerance"]} if len(frame) else set()
    one_tolerance = len(tolerances) == 1
    for _, r in frame.iterrows():
        m = r["metric"]
        measured = _gate_value(m, r["measured"])
        if not (pd.isna(r["ci_low"]) or pd.isna(r["ci_high"])):
            measured += f" [{_gate_value(m, r['ci_low'])}, {_gate_value(m, r['ci_high'])}]"
        rows.append(
            [
                r["series"],
                f"{r['nodes']}x{r['devices_per_node']}",
                GATE_METRICS.get(m, m),
                _gate_value(m, r["reference"]),
                _gate_value(m, r["bound"])
                + ("" if one_tolerance else f" (-{100 * r['tolerance']:g}%)"),
                measured,
                str(r["n"]),
                MISSING if pd.isna(r["p_value"]) else f"{r['p_value']:.3g}",
                r["verdict"],
            ]
        )
    bound = f"Bound (-{100 * next(iter(tolerances)):g}%)" if one_tolerance else "Bound"
    cols = [
        "Series",
        "Scale",
        "Metric",
        "Reference",
        bound,
        "Measured [95% CI]",
        "n",
        "p",
        "Verdict",
    ]
    caption = [
        f"REGRESSION: below reference x (1 - tolerance) and significant (one-sided p < "
        f"{alpha:g}); p is tested only for values below their bound. Throughput: t-test of "
        "the repeats' log values against the bound; efficiency: the delta-method interval of "
        "the ratio of means (log scale, Welch df). One run per side: no test, never a "
        "regression."
    ]
    if n_unchecked:
        caption.append(f"{n_unchecked} measured value(s) have no reference and are not checked.")
    return DisplayTable(
        "check",
        "Regression gate",
        pd.DataFrame(rows, columns=cols, dtype="object"),
        caption=caption,
        right={"Reference", bound, "Measured [95% CI]", "n", "p"},
    )


def gate(args: argparse.Namespace) -> int:
    if args.reference:
        try:
            expected = load_reference(args.reference)
        except BadReference as exc:
            print(f"{PROG} check: error: {exc}", file=sys.stderr)
            return 2
    loaded = finished_runs(args, "check", "nothing to check")
    if loaded is None:
        return 1
    shared = say_shared_nodes("check", ", ".join(args.paths), loaded.runs)
    if args.write_reference:
        doc = reference_document(loaded.runs, args.tolerance)
        try:
            path = write_reference(args.write_reference, doc, args.force)
        except FileExistsError as exc:
            print(f"{PROG} check: error: {exc}", file=sys.stderr)
            return 2
        n = sum(len(s["scales"]) for s in doc["series"])
        print(
            f"{PROG} check: wrote {path} ({len(doc['series'])} series, {n} scale(s))",
            file=sys.stderr,
        )
        return 0
    frame = check(loaded.runs, expected, args.alpha)
    n_unchecked = len(unreferenced(loaded.runs, expected))
    table = _check_table(frame, args.alpha, n_unchecked)
    head = {
        "kind": "scalescope-check",
        "reference": args.reference,
        "alpha": args.alpha,
        "shared_nodes": shared,
    }
    emit(args.format, table, frame, "checks", head)
    regressions = int((frame["verdict"] == REGRESSION).sum())
    missing = int((frame["verdict"] == GATE_MISSING).sum())
    summary = f"{len(frame)} check(s): {regressions} regression(s), {missing} missing"
    failed = regressions > 0 or (args.fail_on_missing and missing > 0)
    print(f"{PROG} check: {summary}{'' if failed else '; passed'}", file=sys.stderr)
    return 1 if failed else 0
