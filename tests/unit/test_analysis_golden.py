"""Golden tests: the real command on committed logs against committed expected output.

Refresh after an intended change with ``SCALESCOPE_UPDATE_GOLDEN=1 pytest
tests/test_analysis_golden.py`` and review the diff like code.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from analysis_helpers import GOLDEN, run_summarize

INPUT = "tests/fixtures/logs"  # relative: paths in the output are relative to it
UPDATE = os.environ.get("SCALESCOPE_UPDATE_GOLDEN") == "1"


def _check_text(name: str, actual: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
    assert path.exists(), f"{path} missing: run with SCALESCOPE_UPDATE_GOLDEN=1"
    assert actual == path.read_text(encoding="utf-8"), (
        f"output differs from {path}; if intended, refresh with SCALESCOPE_UPDATE_GOLDEN=1"
    )


def _close(a: Any, b: Any, where: str = "$") -> None:
    """Equal JSON, floats to 1e-9 relative (last-digit noise across platforms)."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {a} != {b}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a.keys() ^ b.keys())}"
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def test_markdown_summary_matches_golden() -> None:
    proc = run_summarize(INPUT, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    _check_text("summary.md", proc.stdout)


def test_json_summary_matches_golden() -> None:
    proc = run_summarize(INPUT, "--no-write", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    actual = json.loads(proc.stdout)
    path = GOLDEN / "summary.json"
    if UPDATE:
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    _close(actual, json.loads(path.read_text(encoding="utf-8")))


def test_json_carries_every_table_and_its_versions() -> None:
    doc = json.loads((GOLDEN / "summary.json").read_text(encoding="utf-8"))
    assert doc["schema_version"] == 1 and doc["record_schema_version"] == 1
    assert {
        "runs",
        "groups",
        "scaling",
        "amdahl",
        "failures",
        "problems",
        "notes",
        "environment",
        "methods",
        "settings",
    } <= doc.keys()
    reasons = {f["job_id"]: f["reason"] for f in doc["failures"]}
    assert reasons["5007"] == "cuda_oom" and reasons["5012"] == "unknown"
    assert {r["job_id"]: r["restart_count"] for r in doc["runs"]}["5004"] == 1


def test_written_summary_folder(tmp_path: Path) -> None:
    out = tmp_path / "summary"
    proc = run_summarize(INPUT, "--out", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    expected = {
        "runs.csv",
        "groups.csv",
        "scaling.csv",
        "amdahl.csv",
        "failures.csv",
        "problems.csv",
        "summary.json",
        "report.md",
        "charts",
    }
    assert expected <= {p.name for p in out.iterdir()}
    charts = sorted(p.name for p in (out / "charts").iterdir())
    # The recorded runs carry a step breakdown: the waterfall's two charts (PNG) join in.
    breakdown = ["diagnosis_spiral-strong-fp32.png", "ranks_spiral-strong-fp32.png"]
    assert charts == sorted(
        [
            f"{n}.{e}"
            for n in ("speedup", "efficiency", "throughput", "epoch_time", "val_loss")
            for e in ("png", "svg")
        ]
        + breakdown
    )
    report = (out / "report.md").read_text(encoding="utf-8")
    for link in ("charts/speedup.png", "charts/val_loss.png", *(f"charts/{b}" for b in breakdown)):
        assert f"]({link})" in report
    assert "## Where the efficiency went, in words" in report
    assert "NVIDIA H200" in report and "2.13.0+cpu" in report
    assert json.loads((out / "summary.json").read_text()) == json.loads(proc.stdout)
