"""Presenting: tables, charts, the report pages and the Comet summary, from a finished analysis."""
