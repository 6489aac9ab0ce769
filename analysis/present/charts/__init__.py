"""The summary's charts: each a function from a frame to a matplotlib Figure, never saved or
shown (``charts``), and their drawing into the summary folder's ``charts/`` in a forked process,
with each one's SVG text handed back for report.html (``chart_files``)."""
