"""The sweep's config and its plan (scalescope.launch.sweep_config): the axes a sweep runs
over (shapes, precisions, gradient accumulation), what it refuses before anything is
submitted, and the node counts it projects to."""

from __future__ import annotations

import pytest

from scalescope.errors import ConfigError
from scalescope.launch.sweep_config import SweepConfig
from scalescope.schema import build


def test_a_sweep_names_its_projection_nodes() -> None:
    base = {"name": "s", "train_config": "t.yaml", "shapes": [{"nodes": 1, "devices_per_node": 1}]}
    assert build(SweepConfig, {**base, "project_nodes": [2, 8]}).project_nodes == [2, 8]
    with pytest.raises(ConfigError, match="project_nodes: 0 is not a node count"):
        build(SweepConfig, {**base, "project_nodes": [0]}).validate("s.yaml")
