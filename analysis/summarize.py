"""Summarise scaling runs: ``python -m analysis.summarize PATH [PATH...]``.

``python -m analysis.summarize compare A B`` compares two result folders,
``python -m analysis.summarize check PATH... --reference ref.yaml`` is the regression gate and
``python -m analysis.summarize export PATH... --format github-action-benchmark|bencher``
writes the headline figures for CI benchmark trackers. The commands are in
:mod:`analysis.commands` (:mod:`~analysis.commands.main` picks one); a sweep calls
:func:`summarize_sweep`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from analysis.commands import PROG

if TYPE_CHECKING:
    from analysis.commands.main import COMMANDS, main
    from analysis.commands.summarize import summarize_sweep

__all__ = ["COMMANDS", "main", "summarize_sweep"]


def __getattr__(name: str) -> Any:
    """The commands, imported when first asked for (they load pandas, matplotlib and rich)."""
    if name in ("COMMANDS", "main"):
        from analysis.commands import main as commands

        return getattr(commands, name)
    if name == "summarize_sweep":
        from analysis.commands.summarize import summarize_sweep

        return summarize_sweep
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _entry() -> int:
    """``python -m analysis.summarize``: a Ctrl-C while the commands load (a second or two)
    is answered in one line, as one while they run is."""
    try:
        from analysis.commands.main import main
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(_entry())
