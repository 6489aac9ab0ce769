"""Presenting, from a finished analysis, in rooms by concern: the display tables (``tables``),
the charts (``charts``), the summary's files, report pages and Comet experiments (``report``)
and the plan's words and chart (``plan``); ``display`` is what a display table is and how its
numbers are written, shared by them all."""
