"""The run's clocks: timed intervals and the steady state (:mod:`.timing`), peak device memory
(:mod:`.peak_memory`), compilation time (:mod:`.compiling`), and the stop at SIGTERM on every
rank at the same step (:mod:`.preemption`), which the timing loop steers Lightning around."""
