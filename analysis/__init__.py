"""Read scalescope results and measure how training scales.

For notebooks::

    import analysis
    runs = analysis.load("outputs/")                      # one row per finished job
    runs, failures, problems = analysis.load_all("outputs/")
    result = analysis.analyze(runs)                       # .groups, .scaling, .amdahl, .notes

From a shell: ``python -m analysis.summarize outputs/``. Nothing here imports torch,
lightning, submitit or comet_ml: results can be summarised on a laptop or a login node.
"""

from analysis.analyze import Analysis, ProjectionRequest, analyze
from analysis.compute.metrics import BaselineSpec, group_stats, scaling_table
from analysis.read.frame import Loaded, load, load_all

__all__ = [
    "Analysis",
    "BaselineSpec",
    "Loaded",
    "ProjectionRequest",
    "analyze",
    "group_stats",
    "load",
    "load_all",
    "scaling_table",
]
