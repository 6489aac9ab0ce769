"""The command lines: ``python -m analysis.summarize`` (:mod:`.main` picks summarize, compare,
check or export) and ``python -m analysis.project`` (:mod:`.backtest`)."""
