"""A series' step time at a scale not run yet: the step model (:mod:`.step_model`) and the
bucket timeline of its exposed communication (:mod:`.bucket_overlap`). Another strategy's
collectives (named in :mod:`scalescope.collectives`) come in here beside DDP's."""
