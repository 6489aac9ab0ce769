"""Where a step's time goes: the step clock and the per-collective waits (:mod:`.step_clock`,
:mod:`.step_breakdown`), their reduction over ranks (:mod:`.cross_rank`), the calibration
windows (:mod:`.calibration`), the collective baseline (:mod:`.allreduce`), the compute split
(:mod:`.compute_split`), the NVML sampler (:mod:`.sampling`), peak FLOP/s for MFU
(:mod:`.hardware`), and the record's ``diagnosis`` section that gathers them (:mod:`.section`).
A strategy's collectives plug in through :mod:`.strategies`: DDP's first."""
