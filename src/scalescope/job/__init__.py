"""The job side: what runs inside one training job, on every rank.

* :mod:`.entry` -- ``scalescope train``: config -> Lightning fit -> one result record;
* :mod:`.topology` -- where this process runs (the one reader of SLURM variables);
* :mod:`.timing` -- interval timing, warm-up and steady state, agreed over ranks;
* :mod:`.diagnosis` -- per-rank step-time breakdown and the calibration windows;
* :mod:`.allreduce` -- the all-reduce baseline on the job's own allocation;
* :mod:`.sampling` -- the NVML sampler (one per node);
* :mod:`.preemption` -- stop at SIGTERM on every rank at the same step;
* :mod:`.faults` -- deliberate faults for tests and demonstrations;
* :mod:`.tracking` -- Comet from rank 0;
* :mod:`.hardware` -- dense peak FLOP/s by exact device model, for MFU;
* :mod:`.loader_bench` -- times a workload's input pipeline alone, and the step it feeds;
* :mod:`.loader_bench_cli` -- ``scalescope bench-data``: that benchmark's command.
"""
