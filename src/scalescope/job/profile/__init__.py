"""``trainer.profile``: which ranks and steps to trace (:mod:`.plan`) and the capture itself
(:mod:`.capture`); the trace is read by :mod:`scalescope.traces`, which the analysis shares."""
