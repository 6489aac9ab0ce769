"""FSDP2's side of the diagnosis: its waits on the step breakdown (:mod:`.waits`), its collective
baseline at the sizes it gathers and reduce-scatters (:mod:`.baseline`), and the calibration
windows that isolate one of its collectives (:mod:`.calibration`)."""
