"""The scaling-summary experiment's metrics (analysis.present.report.comet.series_metrics): one
value per metric and Comet step (step = world size), whatever shapes the series has."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from analysis.compute.waterfall import PARTS
from analysis.present.report.comet import series_metrics

SERIES = "spiral · strong · fp32"


def _row(nodes: int, dpn: int, *, mode: str = "strong") -> dict[str, Any]:
    world = nodes * dpn
    eff = 1.0 / (1 + 0.05 * (world - 1) + 0.1 * (nodes - 1))
    return {
        "series": SERIES,
        "scaling_mode": mode,
        "nodes": nodes,
        "devices_per_node": dpn,
        "world_size": world,
        "speedup": eff * world,
        "parallel_efficiency": eff,
        "parallel_efficiency_ci_low": eff - 0.02,
        "parallel_efficiency_ci_high": eff + 0.02,
        "per_device_throughput_efficiency": eff + 0.01,
        "per_device_throughput_efficiency_ci_low": eff - 0.01,
        "per_device_throughput_efficiency_ci_high": eff + 0.03,
        "samples_per_s_mean": 100.0 * eff * world,
        "samples_per_s_per_device_mean": 100.0 * eff,
    }


def _diag(nodes: int, dpn: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "series": SERIES,
        "nodes": nodes,
        "world_size": nodes * dpn,
        "is_baseline": nodes * dpn == 1,
        "lost_pts_mean": 7.0 * nodes,
    }
    row.update({f"{p}_pts_mean": float(i) for i, p in enumerate(PARTS)})
    return row


def _doc(shapes: list[tuple[int, int]], mode: str = "strong") -> dict[str, Any]:
    return {
        "scaling": [_row(n, d, mode=mode) for n, d in shapes],
        "diagnosis": [_diag(n, d) for n, d in shapes],
    }


def test_two_shapes_at_one_world_size_do_not_share_a_metric_at_a_step() -> None:
    doc = _doc([(2, 1), (1, 1), (2, 2), (1, 2)])
    out = series_metrics(doc, SERIES)
    assert [step for step, _ in out] == [1, 2, 2, 4]
    (_, one_node), (_, two_nodes) = out[1], out[2]
    # the fewest nodes keep the plain names: the curve through a full node
    assert one_node["efficiency"] == _row(1, 2)["parallel_efficiency"]
    assert one_node["lost_pts"] == 7.0
    # the other shape at world size 2 is there, under its shape's names
    assert all(name.endswith("@2x1") for name in two_nodes)
    assert two_nodes["efficiency@2x1"] == _row(2, 1)["parallel_efficiency"]
    assert two_nodes["lost_pts@2x1"] == 14.0
    assert out[3][1]["speedup"] == _row(2, 2)["speedup"]


def test_the_baseline_has_no_waterfall_and_weak_scaling_its_own_efficiency() -> None:
    out = dict(series_metrics(_doc([(1, 1), (1, 2)], mode="weak"), SERIES))
    assert "lost_pts" not in out[1] and not any(k.endswith("_pts") for k in out[1])
    assert out[2]["efficiency"] == _row(1, 2)["per_device_throughput_efficiency"]
    assert out[2]["efficiency_ci_high"] == _row(1, 2)["per_device_throughput_efficiency_ci_high"]
    assert {f"{p}_pts" for p in PARTS} <= set(out[2])


def test_a_value_that_is_not_a_finite_number_is_left_out() -> None:
    doc = _doc([(1, 1), (1, 2)])
    doc["scaling"][1]["parallel_efficiency_ci_low"] = math.nan
    doc["scaling"][1]["speedup"] = None
    out = dict(series_metrics(doc, SERIES))
    assert "efficiency_ci_low" not in out[2] and "speedup" not in out[2]
    assert out[2]["efficiency"] == _row(1, 2)["parallel_efficiency"]


@given(st.sets(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=10))
def test_every_metric_has_one_value_per_step(shapes: set[tuple[int, int]]) -> None:
    out = series_metrics(_doc(sorted(shapes, reverse=True)), SERIES)
    seen = [(step, name) for step, metrics in out for name in metrics]
    assert len(seen) == len(set(seen))
    assert sorted(step for step, _ in out) == sorted(n * d for n, d in shapes)
    for world in {n * d for n, d in shapes}:
        fewest = min(n for n, d in shapes if n * d == world)
        plain = [m for step, m in out if step == world and "efficiency" in m]
        assert len(plain) == 1
        assert plain[0]["efficiency"] == _row(fewest, world // fewest)["parallel_efficiency"]
