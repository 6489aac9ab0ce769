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

from analysis.commands.main import COMMANDS, main
from analysis.commands.summarize import summarize_sweep

__all__ = ["COMMANDS", "main", "summarize_sweep"]

if __name__ == "__main__":
    sys.exit(main())
