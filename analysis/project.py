"""``python -m analysis.project``: the projection scored on published results (``backtest``,
``fit-error``). The command is :mod:`analysis.commands.backtest`."""

from __future__ import annotations

import sys

from analysis.commands.backtest import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
