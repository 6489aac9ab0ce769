"""The command lines' parser: an argument error is one line and a hint, not the usage.

argparse prints the whole usage (a dozen lines and more) before its error, which pushes the
one line that matters off a small terminal. Every command of ``scalescope`` and of
``python -m analysis.summarize`` builds its parser from :class:`OneLineParser`; ``--help``
still prints everything.
"""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

_ARGUMENT = re.compile(r"^argument ([^:]+): ")


def one_line(prog: str, message: str) -> str:
    """``prog: error: message`` and the hint, as the parser prints them (``argument --x: y``
    read as ``--x: y``)."""
    said = _ARGUMENT.sub(r"\1: ", message)
    return f"{prog}: error: {said}\ntry '{prog} --help'\n"


class OneLineParser(argparse.ArgumentParser):
    """An argument error in one line naming the option, then ``try 'PROG --help'``; exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, one_line(self.prog, message))
