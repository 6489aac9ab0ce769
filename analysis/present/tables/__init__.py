"""The summary's display tables: every table in reading order and its renderings as Markdown
and rich tables (``tables``: the runs, scaling, Amdahl, precision and failure tables), the
terminal's headline view and FSDP against DDP (``headline_tables``), where the efficiency went
(``diagnosis_tables``), the profiled ranks' top operations (``profile_tables``), the projection
and its self-check (``projection_tables``) and the runs table's GPU columns (``gpu_columns``)."""
