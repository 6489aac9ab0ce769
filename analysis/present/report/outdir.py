"""Replace an output folder all at once: readers see the old folder or the new, never a mix.

Everything is written into a fresh temporary folder next to the target; then the old folder
is renamed away, the new one renamed in, and the old one deleted. A folder that is not a
previous summary (no marker file) and not empty is never replaced: it may hold the logs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from analysis.read.files import SUMMARY_MARKER
from scalescope.atomic import replace_dir_atomic


class OutputError(RuntimeError):
    """The output folder cannot be (re)placed; the message says why and what to do."""


def check_replaceable(target: Path) -> None:
    if target.exists() and not target.is_dir():
        raise OutputError(f"{target} exists and is not a folder; choose another --out")
    if target.is_dir() and any(target.iterdir()) and not (target / SUMMARY_MARKER).exists():
        raise OutputError(
            f"{target} exists, is not empty and is not a scalescope summary folder "
            f"(no {SUMMARY_MARKER}); refusing to replace it. Choose another --out."
        )


def write_atomically(target: str | os.PathLike[str], fill: Callable[[Path], None]) -> Path:
    """Call ``fill(tmp_dir)`` then swap ``tmp_dir`` in as ``target``."""
    target = Path(target).absolute()
    check_replaceable(target)

    def marked(tmp: Path) -> None:
        (tmp / SUMMARY_MARKER).write_text(
            json.dumps({"kind": "scalescope-summary"}) + "\n", encoding="utf-8"
        )
        fill(tmp)

    return replace_dir_atomic(target, marked, check=check_replaceable)
