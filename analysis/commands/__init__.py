"""The command lines: ``python -m analysis.summarize`` (:mod:`.main` picks summarize, compare,
check or export) and ``python -m analysis.project`` (:mod:`.backtest`)."""

PROG = "python -m analysis.summarize"
"""The summary's program name in its messages: here, where the entry (:mod:`analysis.summarize`)
reads it without loading the commands, so a Ctrl-C while they load is answered alike."""
