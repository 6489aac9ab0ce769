"""Deliberate faults for tests and demonstrations, injected through Lightning callbacks and DDP
communication hooks (:mod:`.injection`)."""
