"""``python -m scalescope.train``: the entry point sbatch scripts and ``srun`` start on every
task. The job itself lives in :mod:`scalescope.job.run.entry`."""

import sys

from .job.run.entry import main

if __name__ == "__main__":
    sys.exit(main())
