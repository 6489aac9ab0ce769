"""What bounds Comet's waits (scalescope.job.tracking.comet_guards): the settings
follow the config."""

from __future__ import annotations

from scalescope.config import TrackingConfig
from scalescope.job.tracking import comet_guards


def test_bounds_follow_the_config() -> None:
    bounds = comet_guards.comet_bounds(TrackingConfig(connect_timeout_s=2.5, end_timeout_s=30))
    assert bounds["COMET_TIMEOUT_HTTP"] == "3"
    assert bounds["COMET_TIMEOUT_CLEANING"] == bounds["COMET_TIMEOUT_UPLOAD"] == "30"
    assert bounds["COMET_ERROR_TRACKING_ENABLE"] == "false"
    assert int(bounds["COMET_GET_OR_ADD_EXPERIMENT_RETRY_TOTAL"]) <= 2
