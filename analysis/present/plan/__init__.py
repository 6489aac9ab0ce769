"""The plan's presentation: its table, answer paragraph and scaling-study text (``text``) and its
chart of time to train against node-hours (``chart``)."""
