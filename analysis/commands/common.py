"""What the ``python -m analysis.summarize`` commands share: the program name in their
messages, the argument types, the console, the warnings about unreadable files, the one-table
output of compare and check, and the answers to what can go wrong outside a command."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from analysis.commands import PROG
from analysis.present.display import DisplayTable
from analysis.present.report.outdir import OutputError
from analysis.present.tables.tables import markdown, rich_table
from analysis.read.files import Problem
from analysis.read.frame import Loaded, load_all
from analysis.read.overlap import node_overlaps, side_note

FORMATS = ("table", "markdown", "json", "csv")
LOOKED_FOR = (
    "looked for ':::SCALESCOPE' event lines in job logs (slurm-*.out, submitit *_log.out / "
    "*_log.err, any other text file) and for result.json files in run directories"
)

# --- argument types -------------------------------------------------------------------------
# argparse names the type in its message for a value the type cannot convert ("invalid
# _positive_int value: 'x'"): these names are part of the command line's output.


def _fraction(text: str) -> float:
    """A fraction strictly between 0 and 1: the docs' "70%" is 0.7 here."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"a fraction between 0 and 1 (70% is 0.7), got {text}"
        ) from None
    return value


def _tolerance(text: str) -> float:
    """A tolerance: a finite number >= 0 (below 0, a run would be worse than itself)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"a number >= 0 (0.05 is 5%), got {text}") from None
    return value


def _number(text: str) -> float:
    """A plain number (``2e11``): the unit is an option of its own."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a number, e.g. 2e11 (the unit goes in --plan-unit), got {text!r}"
        ) from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected an integer >= 1")
    return value


def _node_list(text: str) -> list[int]:
    """``4,8,16,32``: node counts, each an integer >= 1."""
    values = []
    for part in text.split(","):
        try:
            value = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected node counts separated by commas, e.g. 4,8,16,32"
            ) from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{text!r}: a node count must be >= 1")
        values.append(value)
    return sorted(set(values))


def add_paths(p: argparse.ArgumentParser) -> None:
    """The result folders or files a command reads (``PATH...``)."""
    p.add_argument("paths", nargs="+", metavar="PATH", help="result folders (walked) or files")


def add_jobs(p: argparse.ArgumentParser, help_text: str | None = None) -> None:
    """``--jobs N``: every command takes it (the tests run each with ``--jobs 1``)."""
    p.add_argument("--jobs", type=_positive_int, default=None, help=help_text)


# --- printing -------------------------------------------------------------------------------


TABLE_WIDTH = 160
"""The width of the tables printed to a file or a pipe without COLUMNS: a table needs one,
and wider than a terminal's default it cuts fewer columns."""


def rich_console(stream: Any) -> Any:
    """A rich console on ``stream`` whose closed pipe (``| head``) is the caller's to answer:
    rich's own answer exits with status 1 at once, before anything else is written. Its
    ``prose_width`` is the width sentences wrap at (:func:`fill`): the terminal's, or COLUMNS
    where set (a width asked for); None for a file or a pipe without COLUMNS, where no width
    is known: a pager or an editor wraps each line at its own, and grep finds a sentence
    whole. Its tables take :data:`TABLE_WIDTH` there."""
    from rich.console import Console

    class _Console(Console):
        prose_width: int | None = None

        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    columns = os.environ.get("COLUMNS") or None
    terminal = stream.isatty()
    width = None if terminal else int(columns or TABLE_WIDTH)
    console = _Console(file=stream, width=width, highlight=False, soft_wrap=False)
    console.prose_width = console.width if terminal or columns else None
    return console


def fill(console: Any, text: str, initial_indent: str = "", subsequent_indent: str = "") -> str:
    """``text`` wrapped at ``console``'s ``prose_width`` (at least 40 columns), continuation
    lines indented by ``subsequent_indent``; on one line where it has none
    (:func:`rich_console`). Printed with ``soft_wrap=True``, rich leaves it as it is."""
    width = console.prose_width
    return textwrap.fill(
        text,
        width=max(40, width) if width is not None else sys.maxsize,
        initial_indent=initial_indent,
        subsequent_indent=subsequent_indent,
        break_on_hyphens=False,
    )


def warn(problems: Sequence[Problem]) -> None:
    for p in problems:
        word = "warning" if p.severity == "warning" else "note"
        print(f"{PROG}: {word}: {p.file}: {p.message}", file=sys.stderr)


def say_shared_nodes(command: str, name: str, runs: pd.DataFrame) -> list[dict[str, Any]]:
    """One line on stderr when ``runs`` (named ``name``) hold runs timed beside another job
    on their node; the overlaps, as the JSON output carries them (empty when none)."""
    from analysis.present.report.report import records

    overlaps = node_overlaps(runs)
    line = side_note(name, overlaps)
    if line is not None:
        print(f"{PROG} {command}: note: {line}", file=sys.stderr)
    return records(overlaps, drop=("row", "other_row"))


def emit(
    fmt: str, table: DisplayTable, frame: pd.DataFrame, rows_key: str, head: dict[str, Any]
) -> None:
    """One result table on stdout as a rich table, Markdown, JSON (``head`` plus the rows
    under ``rows_key``) or CSV."""
    if fmt == "table":
        rich_console(sys.stdout).print(rich_table(table, narrow=True))
    elif fmt == "markdown":
        sys.stdout.write(markdown(table))
    elif fmt == "json":
        from analysis.present.report.report import SUMMARY_SCHEMA_VERSION, records

        doc = {"schema_version": SUMMARY_SCHEMA_VERSION, **head, rows_key: records(frame)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        from analysis.read.frame import written

        written(frame).to_csv(sys.stdout, index=False)


# --- reading and running ----------------------------------------------------------------------


def finished_runs(args: argparse.Namespace, command: str, consequence: str) -> Loaded | None:
    """The records under ``args.paths`` (problems warned on stderr), or None with one line
    saying there was no finished run."""
    loaded = load_all(args.paths, jobs=args.jobs)
    warn(loaded.problems)
    if loaded.runs.empty:
        print(
            f"{PROG} {command}: no finished run in {', '.join(args.paths)}: {consequence}; "
            f"{LOOKED_FOR}.",
            file=sys.stderr,
        )
        return None
    return loaded


def guarded(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``run(args)`` with the command line's answers to what can go wrong outside it."""
    try:
        return run(args)
    except OutputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (| head): not an error
        return 0
    except OSError as exc:  # writing the summary: disk full, permissions...
        print(f"{PROG}: error: cannot write the summary: {exc}", file=sys.stderr)
        return 2
