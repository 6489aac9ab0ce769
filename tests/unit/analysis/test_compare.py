"""Two result sets compared scale by scale (analysis.compute.compare), and the command that
compares two folders (``summarize compare``, analysis.commands.compare), through its main in
this process."""

from __future__ import annotations

import json
from pathlib import Path

from analysis_helpers import REPO, summarize_main, write_runs
from metrics_helpers import frame

from analysis.compute.compare import METRIC_NAMES, compare_runs

QUICKSTART = REPO / "tests" / "fixtures" / "quickstart"


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


def test_compare_two_folders(tmp_path: Path) -> None:
    a = write_runs(tmp_path / "a", {1: [100.0, 101.0, 99.0], 2: [50.0, 51.0, 49.5], 4: [30.0]})
    b = write_runs(tmp_path / "b", {1: [120.0, 121.0, 119.0], 2: [50.2, 51.1, 49.6], 4: [20.0]})
    proc = summarize_main("compare", a, b, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    verdicts = {r["world_size"]: r["verdict"] for r in doc["rows"]}
    assert verdicts == {1: "worse", 2: "same (within tolerance)", 4: "not enough repeats"}
    assert "Welch" in doc["test"]
    table = summarize_main("compare", a, b, "--format", "markdown")
    assert "not enough repeats" in table.stdout and "p (Welch)" in table.stdout


def test_compare_with_an_empty_side_exits_1(tmp_path: Path) -> None:
    a = write_runs(tmp_path / "a", {1: [100.0]})
    (tmp_path / "b").mkdir()
    proc = summarize_main("compare", a, tmp_path / "b")
    assert proc.returncode == 1 and "no finished run" in proc.stderr


def test_compare_defaults_to_the_headlines_steady_state_and_names_it() -> None:
    """The quick start's logs against themselves: the headline's quantity (steady-state
    throughput per device, not the whole training), named in the output, changed by 0."""
    proc = summarize_main("compare", QUICKSTART, QUICKSTART, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["metric"] == "steady_samples_per_s_per_device"
    assert doc["metric_name"].startswith("steady-state throughput per device")
    assert [r["world_size"] for r in doc["rows"]] == [1, 2]
    assert all(r["metric"] == doc["metric"] and r["change_rel"] == 0.0 for r in doc["rows"])
    assert all(r["verdict"] == "same (within tolerance)" for r in doc["rows"])
    table = summarize_main("compare", QUICKSTART, QUICKSTART, "--format", "markdown").stdout
    assert "steady-state throughput per device" in table and "+0.0%" in table
    whole = summarize_main("compare", QUICKSTART, QUICKSTART, "--metric", "train_time_s")
    assert METRIC_NAMES["train_time_s"] in whole.stdout and "warm-up included" in whole.stdout
