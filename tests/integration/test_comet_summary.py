"""``python -m analysis.summarize --comet``: one scaling-summary experiment per series, as
the real command writes it (a subprocess) and Comet's own ``comet offline`` reads it.

The records are tests/fixtures/projection (one series at 1, 2 and 3 devices): the archive
must hold ``efficiency`` and ``speedup`` at steps 1, 2 and 3 (step = world size) equal to
summary.json's, the scaling table, the charts and report.html; the API key, set in the
environment, must appear in no file and no output line."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from analysis_helpers import REPO, run_summarize

from scalescope.job.tracking import read_offline_archive

FIXTURE = REPO / "tests" / "fixtures" / "projection"
SECRET = "fake-comet-key-4711-never-printed"

pytestmark = pytest.mark.timeout(300)


def test_offline_summary_experiment_is_read_by_comet_offline(tmp_path: Path) -> None:
    out = tmp_path / "results" / "summary"
    proc = run_summarize(FIXTURE, "--out", out, "--comet", "offline", env={"COMET_API_KEY": SECRET})
    assert proc.returncode == 0, proc.stderr
    (archive,) = (tmp_path / "results" / "comet").glob("*.zip")
    assert f"offline summary experiment {archive}" in proc.stderr
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "comet"), "offline", "--csv", str(archive)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert '"metric","efficiency"' in shown.stdout and '"metric","speedup"' in shown.stdout

    data = read_offline_archive(archive)
    doc = json.loads((out / "summary.json").read_text())
    assert data["project"] == "scalescope-scaling"
    assert "scaling-summary" in data["tags"]
    assert data["name"] == "scaling summary: spiral · weak · fp32"
    assert data["parameters"]["scaling_mode"] == "weak"
    effs = {m["step"]: m["value"] for m in data["metrics"]["efficiency"]}
    speedups = {m["step"]: m["value"] for m in data["metrics"]["speedup"]}
    assert sorted(effs) == [1, 2, 3]
    for r in doc["scaling"]:
        assert effs[r["world_size"]] == pytest.approx(r["per_device_throughput_efficiency"])
        assert speedups[r["world_size"]] == pytest.approx(r["speedup"])
    assert {m["step"] for m in data["metrics"]["comm_pts"]} == {2, 3}  # the waterfall's parts
    counts = data["message_counts"]
    assert counts.get("log_other", 0) >= 4, counts
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        assert len(names) >= 3 + 8, names  # metadata, the table, the charts, report.html
        blob = b"".join(zf.read(n) for n in names)
    assert b"Scaling report" in blob  # report.html is in it

    # the key: nowhere
    assert SECRET not in proc.stdout + proc.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET.encode() not in blob


def test_without_a_key_auto_logs_nothing_and_the_summary_stands(tmp_path: Path) -> None:
    out = tmp_path / "summary"
    proc = run_summarize(FIXTURE, "--out", out, "--comet", env={"COMET_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr
    assert "comet: spiral · weak · fp32: tracking: off" in proc.stderr
    assert (out / "report.html").exists() and not list(tmp_path.rglob("*.zip"))


def test_comet_with_no_write_is_one_line(tmp_path: Path) -> None:
    proc = run_summarize(FIXTURE, "--no-write", "--comet", "offline")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "python -m analysis.summarize: error: --comet logs the written summary: drop --no-write"
    )
