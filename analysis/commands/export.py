"""``python -m analysis.summarize export PATH... --format github-action-benchmark|bencher``:
the headline figures for CI benchmark trackers (see :mod:`analysis.compute.gate`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from analysis.commands.common import PROG, add_jobs, add_paths, finished_runs
from analysis.compute.gate import EXPORT_FORMATS, export_bencher, export_github_action_benchmark
from scalescope.atomic import write_text_atomic
from scalescope.cli import OneLineParser


def build_export_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=f"{PROG} export",
        description="Write per-device throughput and scaling efficiency (means with 95%% "
        "intervals) for a CI benchmark tracker: github-action-benchmark (tool: "
        "customBiggerIsBetter) or Bencher (Bencher Metric Format, adapter json).",
    )
    add_paths(p)
    p.add_argument("--format", choices=EXPORT_FORMATS, required=True)
    p.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    add_jobs(p)
    return p


def export(args: argparse.Namespace) -> int:
    loaded = finished_runs(args, "export", "nothing to export")
    if loaded is None:
        return 1
    if args.format == "bencher":
        data: Any = export_bencher(loaded.runs)
    else:
        data = export_github_action_benchmark(loaded.runs)
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if args.output:
        write_text_atomic(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0
