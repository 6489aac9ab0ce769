"""The job side: what runs inside one training job, on every rank.

* :mod:`.entry` -- ``scalescope train``: config -> Lightning fit -> one result record, in
  named steps over :mod:`.startup`, :mod:`.trainer_setup`, :mod:`.measure`, :mod:`.fitting`,
  :mod:`.record_build` and :mod:`.run_tracking`;
* :mod:`.topology` -- where this process runs (the one reader of SLURM variables);
* :mod:`.timing` -- interval timing, warm-up and steady state, agreed over ranks;
  :mod:`.peak_memory` -- training's and validation's peak device memory apart;
* :mod:`.diagnosis` -- the step-time breakdown's callbacks and record section, over
  :mod:`.step_clock`, :mod:`.step_breakdown`, :mod:`.cross_rank`, :mod:`.calibration` and
  :mod:`.compute_split`;
* :mod:`.profiling`, :mod:`.profile_plan` -- ``trainer.profile``: a trace of a few steps on
  the ranks that matter (read by :mod:`scalescope.traces`, which the analysis shares);
* :mod:`.allreduce` -- the all-reduce baseline on the job's own allocation;
* :mod:`.sampling` -- the NVML sampler (one per node);
* :mod:`.preemption` -- stop at SIGTERM on every rank at the same step;
* :mod:`.faults` -- deliberate faults for tests and demonstrations;
* :mod:`.tracking` -- Comet from rank 0 (:mod:`.comet_log`, :mod:`.comet_guards`);
* :mod:`.hardware` -- dense peak FLOP/s by exact device model, for MFU;
* :mod:`.loader_bench` -- times a workload's input pipeline alone, and the step it feeds;
* :mod:`.loader_bench_cli` -- ``scalescope bench-data``: that benchmark's command.
"""
