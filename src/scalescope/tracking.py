"""Experiment tracking (Comet) from rank 0.

Interface used by the trainer (rank 0 only):

* :func:`start_tracking` decides the mode once at start-up and returns a tracker plus the one
  line to print about it;
* ``tracker.log_metrics(metrics, step=..., epoch=...)``, ``tracker.log_result(record_dict)``,
  ``tracker.info()`` (what goes into the result record's ``tracking`` field; never secrets)
  and ``tracker.end()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import TrackingConfig


class NullTracker:
    """Tracking is off: every call is a no-op."""

    mode = "off"

    def log_metrics(self, metrics: Mapping[str, float], *, step: int, epoch: int | None = None) -> None:
        pass

    def log_result(self, record: Mapping[str, Any]) -> None:
        pass

    def info(self) -> dict[str, Any]:
        return {"mode": self.mode}

    def end(self) -> None:
        pass


def start_tracking(
    cfg: TrackingConfig,
    *,
    output_dir: str,
    experiment_name: str,
    tags: list[str],
    params: Mapping[str, Any],
    others: Mapping[str, Any],
) -> tuple[NullTracker, str]:
    return NullTracker(), "tracking: off (Comet not set up in this build)"
