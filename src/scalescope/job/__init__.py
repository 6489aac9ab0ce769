"""The job side: what runs inside one training job, on every rank, one room a concern.

Lowest first; a module imports only from its own room or the ones before it
(``tests/unit/test_import_rules.py`` reads the imports and keeps it so):

* :mod:`.tracking` -- Comet from rank 0 (:mod:`.tracking.comet`, :mod:`.tracking.comet_log`,
  :mod:`.tracking.comet_guards`);
* :mod:`.faults` -- deliberate faults for tests and demonstrations;
* :mod:`.clocks` -- interval timing, warm-up and steady state, agreed over ranks
  (:mod:`.clocks.timing`); peak device memory; the compile clock; the stop at SIGTERM on
  every rank at the same step (:mod:`.clocks.preemption`);
* :mod:`.diagnosis` -- where a step's time goes: the step clock and the per-collective waits,
  their reduction over ranks, the calibration, the collective baseline, the compute split,
  the NVML sampler, peak FLOP/s for MFU and the record's ``diagnosis`` section; a strategy's
  wait hooks and start-up sweep plug in through :mod:`.diagnosis.strategies` (its
  collectives are named in :mod:`scalescope.collectives`);
* :mod:`.profile` -- ``trainer.profile``: a trace of a few steps on the ranks that matter (read
  by :mod:`scalescope.traces`, which the analysis shares);
* :mod:`.run` -- ``scalescope train``: config -> Lightning fit -> one result record, in named
  steps (:mod:`.run.entry` over topology, start-up, trainer, measures, fit, record, tracking);
* :mod:`.loader_bench` -- ``scalescope bench-data``: a workload's input pipeline timed alone,
  against the step it feeds, and its command.
"""
