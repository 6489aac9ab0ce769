"""Why a job stopped without a result, or ended badly after one: what its logs printed, read
line by line (:mod:`.classify`), the cause among the symptoms (:mod:`.cause`), and what a
finished job's other logs say (:mod:`.finished`)."""
