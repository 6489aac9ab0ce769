"""The summary written out for its readers: the JSON document and report.md (``report``),
report.html on one self-contained page (``html_report``), the projection in words for both
(``projection_text``), the summary folder's files (``summary_files``) swapped in whole
(``outdir``), and the per-series scaling experiments and project view on Comet (``comet``)."""
