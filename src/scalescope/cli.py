"""``scalescope`` command line: a thin dispatcher that turns errors into one line.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this layer imports it lazily so that ``scalescope sweep --help`` or a
config error does not pay for importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from .errors import ScalescopeError

_ARGUMENT = re.compile(r"^argument ([^:]+): ")


def one_line(prog: str, message: str) -> str:
    """``prog: error: message`` and the hint, as the parser prints them (``argument --x: y``
    read as ``--x: y``)."""
    said = _ARGUMENT.sub(r"\1: ", message)
    return f"{prog}: error: {said}\ntry '{prog} --help'\n"


class OneLineParser(argparse.ArgumentParser):
    """An argument error in one line naming the option, then ``try 'PROG --help'``; exit 2.

    argparse prints the whole usage (a dozen lines and more) before its error, which pushes
    the one line that matters off a small terminal; ``--help`` still prints everything. The
    commands of ``python -m analysis.summarize`` build their parsers from it too (this module
    imports nothing heavy)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, one_line(self.prog, message))


# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "scalescope.job.run.entry",
        "train one configuration (one job; under srun, one task)",
    ),
    "sweep": ("scalescope.launch.sweep", "submit a scaling sweep with submitit (Slurm or local)"),
    "bench-data": (
        "scalescope.job.loader_bench.command",
        "time a workload's input pipeline alone over loader settings, against its step rate",
    ),
    "local-cluster": (
        "scalescope.launch.local_cluster",
        "a real two-node Slurm cluster on this machine",
    ),
    "config-reference": ("scalescope.reference", "print every config key with type and default"),
}


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """Only the selected command's module is imported (others may pull in heavy imports)."""
    parser = OneLineParser(
        prog="scalescope", description="How does your training scale on a SLURM cluster?"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == selected:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    selected = argv[0] if argv and argv[0] in COMMANDS else None
    args = build_parser(selected).parse_args(argv)
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except ScalescopeError as exc:
        if getattr(exc, "rank", 0) == 0:  # SameOnEveryRankError: rank 0 speaks for all
            print(f"scalescope {args.command}: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        print(f"scalescope {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
