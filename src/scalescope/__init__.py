"""scalescope: how deep-learning training scales on a SLURM cluster.

Importing the package is cheap (no torch): the analysis side and login-node tools use it.
"""

__version__ = "0.1.0"
