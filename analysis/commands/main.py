"""``python -m analysis.summarize [compare|check|export] ...``: the first argument picks the
command (none of those: the summary itself), whose parser reads the rest."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from analysis.commands.check import build_check_parser, gate
from analysis.commands.common import guarded
from analysis.commands.compare import build_compare_parser, compare
from analysis.commands.export import build_export_parser, export
from analysis.commands.summarize import summarize
from analysis.commands.summarize_args import build_parser

COMMANDS: dict[str, tuple[Callable[[], argparse.ArgumentParser], Callable[..., int]]] = {
    "compare": (build_compare_parser, compare),
    "check": (build_check_parser, gate),
    "export": (build_export_parser, export),
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = COMMANDS.get(argv[0]) if argv else None
    if command is not None:
        args = command[0]().parse_args(argv[1:])
        run: Callable[[argparse.Namespace], int] = command[1]
    else:
        args = build_parser().parse_args(argv)
        run = summarize
    return guarded(run, args)
