"""Why a job stopped without a result, or ended badly after one: what its logs printed, read
line by line (:mod:`.classify`) and in their context, tracebacks and torchrun's summaries
(:mod:`.collect`), the cause among the symptoms (:mod:`.cause`), and what a
finished job's other logs say (:mod:`.finished`)."""
