"""The projection: everything that turns a sweep's measured scales into an interval at scales
not run. The step model (:mod:`.step_time`: DDP's buckets, FSDP's collectives, the network)
predicts a step's time at a node count; :mod:`.project` fits it to each series, draws its
interval and what-ifs and checks it against the largest measured scale; :mod:`.model_error`
is the error model learned from published cases (shipped as ``model_error.json``, written and
read by :mod:`.error_file`), and :mod:`.published` the backtest that scores the whole on those
cases."""
