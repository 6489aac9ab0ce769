"""Comet from rank 0: starting the experiment and reading it back (:mod:`.comet`), what is
logged (:mod:`.comet_log`), and the bounds and redaction around every call
(:mod:`.comet_guards`)."""
