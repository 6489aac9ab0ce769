"""One run, start to record: the entry (:mod:`.entry`) over the steps it names -- where the
process runs (:mod:`.topology`, :mod:`.rendezvous`, :mod:`.children`), the job plan
(:mod:`.startup`), the trainer (:mod:`.trainer_setup`), the measures riding on it
(:mod:`.measure`), the fit (:mod:`.fitting`), the record (:mod:`.record_build`) and the
run's Comet experiment (:mod:`.run_tracking`)."""
