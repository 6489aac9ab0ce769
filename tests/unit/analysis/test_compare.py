"""Two result sets compared scale by scale (analysis.compute.compare)."""

from __future__ import annotations

from metrics_helpers import frame

from analysis.compute.compare import compare_runs


def test_compare_marks_only_large_and_significant_changes() -> None:
    a = frame({1: [100.0, 101.0, 99.0, 100.5], 2: [50.0, 51.0, 49.0], 4: [30.0]})
    b = frame({1: [120.0, 121.0, 119.0, 120.5], 2: [50.5, 51.2, 49.3], 4: [20.0]})
    c = compare_runs(a, b).set_index("world_size")
    assert c.loc[1, "verdict"] == "worse" and c.loc[1, "p_value"] < 0.05
    assert c.loc[2, "verdict"] == "same (within tolerance)"
    assert c.loc[4, "verdict"] == "not enough repeats"
    noisy = frame({1: [80.0, 160.0, 120.0]})
    assert compare_runs(frame({1: [100.0, 101.0, 99.0]}), noisy)["verdict"].tolist() == [
        "not significant"
    ]
    faster = compare_runs(a, b, metric="samples_per_s").set_index("world_size")
    assert faster.loc[1, "verdict"] == "worse"  # lower throughput is worse too
