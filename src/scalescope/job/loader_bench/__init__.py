"""``scalescope bench-data``: a workload's input pipeline timed alone, against the step it feeds
(:mod:`.bench`), and that benchmark's command (:mod:`.command`)."""
