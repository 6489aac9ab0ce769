"""Read scalescope results and measure how training scales.

For notebooks::

    import analysis
    runs = analysis.load("outputs/")                      # one row per finished job
    runs, failures, problems = analysis.load_all("outputs/")
    result = analysis.analyze(runs)                       # .groups, .scaling, .amdahl, .notes

From a shell: ``python -m analysis.summarize outputs/``. Nothing here imports torch,
lightning, submitit or comet_ml: results can be summarised on a laptop or a login node.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from analysis.analyze import Analysis, ProjectionRequest, analyze
    from analysis.compute.metrics import BaselineSpec, group_stats, scaling_table
    from analysis.read.frame import Loaded, load, load_all

_EXPORTS = {
    "Analysis": "analysis.analyze",
    "ProjectionRequest": "analysis.analyze",
    "analyze": "analysis.analyze",
    "BaselineSpec": "analysis.compute.metrics",
    "group_stats": "analysis.compute.metrics",
    "scaling_table": "analysis.compute.metrics",
    "Loaded": "analysis.read.frame",
    "load": "analysis.read.frame",
    "load_all": "analysis.read.frame",
}
"""Where each name lives: imported when first asked for, so that ``python -m
analysis.summarize`` loads pandas and the rest inside its own answer to a Ctrl-C."""

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


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
