"""``python -m analysis.project backtest`` and ``fit-error`` (:mod:`analysis.commands.backtest`),
in-process, on the shipped published cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.commands import backtest

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "benchmarks" / "projection_cases.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """rc, stdout and stderr of the command with ``argv``."""
    rc = backtest.main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_backtest_scores_every_published_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bt.json"
    rc, text, err = run(capsys, "backtest", str(CASES), "--json", str(out), "--draws", "60")
    assert rc == 0, err
    doc = json.loads(out.read_text())
    import yaml

    cases = yaml.safe_load(CASES.read_text())["cases"]
    assert len(doc["points"]) == sum(len(c["published"]) for c in cases)
    for p in doc["points"]:
        assert set(p) >= {
            "case",
            "nodes",
            "devices_per_node",
            "published",
            "predicted",
            "low",
            "high",
            "covered",
        }
    # every published point of the case file is scored once, at its own shape
    shapes = sorted(
        (c["name"], pt["nodes"], pt["devices_per_node"]) for c in cases for pt in c["published"]
    )
    assert sorted((p["case"], p["nodes"], p["devices_per_node"]) for p in doc["points"]) == shapes
    assert set(doc["totals"]) == {
        "cases",
        "points",
        "coverage",
        "median_abs_error_pts",
        "median_width_pts",
    }
    assert "median absolute error" in text


def test_cross_validated_backtest_meets_its_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Leave one source out on the shipped cases: each source's points scored by the error
    model fitted on the others. The bounds are the ones the projection is held to on
    published results it has never seen: coverage of its 95% intervals >= 80%, median
    width <= 20 points, median absolute error <= 5 points."""
    out = tmp_path / "cv.json"
    rc, text, err = run(
        capsys,
        "backtest",
        str(CASES),
        "--cross-validate",
        "--json",
        str(out),
        "--draws",
        "120",
    )
    assert rc == 0, err
    totals = json.loads(out.read_text())["totals"]
    print(totals)
    assert totals["coverage"] >= 0.8, totals
    assert totals["median_width_pts"] <= 20.0, totals
    assert totals["median_abs_error_pts"] <= 5.0, totals
    assert "(leave one source out)" in text
    assert "median absolute error" in text


def test_a_case_file_with_a_missing_field_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "cases.yaml"
    bad.write_text(
        "cases:\n  - name: x\n    hardware: {devices_per_node: 8}\n    model: {}\n"
        "    per_device_batch: 32\n    measured: [{nodes: 1, devices_per_node: 8, "
        "throughput_per_device: 100}]\n    published: [{nodes: 2, devices_per_node: 8, "
        "throughput_per_device: 99, efficiency_vs_1node: 0.99}]\n"
    )
    rc, _, err = run(capsys, "backtest", str(bad))
    assert rc == 2 and "case 'x': model.grad_bytes must be a positive number" in err, err


def test_the_shipped_error_model_is_the_fit_on_the_shipped_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """analysis/compute/model_error.json is what 'fit-error' makes of
    benchmarks/projection_cases.yaml (never set by hand): refit, every parameter equal to within
    floating-point noise (other numpy and scipy builds differ in the last digits). A case
    added without refitting fails here."""
    from analysis.compute.model_error import SHIPPED_PATH

    out = tmp_path / "model_error.json"
    rc, _, err = run(capsys, "fit-error", str(CASES), "--out", str(out))
    assert rc == 0, err
    refit, shipped = json.loads(out.read_text()), json.loads(SHIPPED_PATH.read_text())
    hint = "refit with: python -m analysis.project fit-error benchmarks/projection_cases.yaml"
    assert refit.keys() == shipped.keys() and refit["fitted_on"] == shipped["fitted_on"], hint
    for key in set(refit) - {"fitted_on"}:
        assert refit[key] == pytest.approx(shipped[key], rel=1e-6, abs=1e-12), (key, hint)
