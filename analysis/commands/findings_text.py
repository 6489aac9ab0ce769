"""The summary's paragraphs on the terminal: the verdicts report.md and report.html give in
words (:data:`analysis.present.report.report.FINDINGS_SECTIONS`), wrapped at the terminal's
width, so the answer to "which scales better?" is on the screen and not only in the files."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from analysis.commands.common import fill, rich_console
from analysis.present.report.report import FINDINGS_SECTIONS

TERMINAL_FINDINGS = ("strategy_findings",)
"""The paragraphs the terminal prints without --wide: the strategies' verdict (the rest are
one --wide away, and all of them in report.html)."""


def print_findings(doc: dict[str, Any], keys: Sequence[str] = TERMINAL_FINDINGS) -> None:
    """Each of ``keys``' paragraphs under its heading, wrapped at the terminal's width."""
    console = rich_console(sys.stdout)
    for key, _, heading, _ in FINDINGS_SECTIONS:
        if key not in keys or not doc.get(key):
            continue
        console.print()
        console.print(heading, markup=False, style="bold")
        for item in doc[key]:
            text = fill(console, f"{item['series']}: {item['text']}")
            console.print(text, markup=False, soft_wrap=True)
