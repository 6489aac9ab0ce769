"""``python -m analysis.summarize --project``, in-process, on real records
(tests/fixtures/projection: an emulated network whose all-reduce cost grows as log2 of the
world size). The backtest on the shipped published cases: test_backtest.py; reading a network
profile: test_network_profile.py."""

from __future__ import annotations

import csv
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from projection_helpers import FIXTURE, first_projection, run

from analysis import summarize


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sum") / "summary"
    rc, _, err = run(
        summarize.main, str(FIXTURE), "--project", "2,4", "--out", str(out), "--jobs", "1"
    )
    assert rc == 0, err
    return out


def test_summary_json_holds_one_row_per_series_scale_and_what_if(summary: Path) -> None:
    doc = json.loads((summary / "summary.json").read_text())
    rows = doc["projection"]
    assert {r["what_if"] for r in rows} >= {"as measured", "accumulation 4", "gradients in bf16"}
    plain = [r for r in rows if r["what_if"] == "as measured"]
    assert [(r["nodes"], r["devices_per_node"], r["world_size"]) for r in plain] == [
        (2, 3, 6),
        (4, 3, 12),
    ]
    for r in rows:
        for key in (
            "efficiency",
            "efficiency_low",
            "efficiency_high",
            "speedup",
            "throughput_per_device",
        ):
            assert isinstance(r[key], float), (key, r)
        assert r["efficiency_low"] > 0 and r["efficiency_high"] < 1.5, r
        assert r["speedup"] == pytest.approx(r["efficiency"] * r["world_size"])
    # the emulated network's cost grows with scale: efficiency falls from 6 to 12 devices
    assert plain[1]["efficiency"] < plain[0]["efficiency"]
    with (summary / "projection.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)


def test_the_largest_measured_scale_is_predicted_from_the_smaller_ones(summary: Path) -> None:
    """The mechanics: fitted from 1 and 2 processes, the model's all-reduce latency grows
    as log2 of the world size, as the emulated network's does; 3 processes fall inside."""
    (check,) = json.loads((summary / "summary.json").read_text())["projection_check"]
    assert check["world_size"] == 3 and check["from_world_sizes"] == "1,2"
    assert check["covered"] is True, check
    assert abs(check["error_pts"]) < 2.0, check  # of an efficiency of about 4%


def test_report_says_where_efficiency_goes_and_draws_the_chart(summary: Path) -> None:
    report = (summary / "report.md").read_text()
    words = report.split("## Projection, in words", 1)[1]
    assert "projected efficiency is" in words and "exposed all-reduce" in words
    assert "75%" in words and "Self-check:" in words
    assert "Projection to scales not yet run" in report
    png = summary / "charts" / "projection_spiral-weak-fp32.png"
    assert png.stat().st_size > 10_000
    page = (summary / "report.html").read_text()
    assert "Projected scaling" in page and "<h2>Projection, in words</h2>" in page


def test_a_network_profile_replaces_the_assumed_band(tmp_path: Path) -> None:
    profile = tmp_path / "net.yaml"
    profile.write_text("inter_busbw_gbps: 12.5\nsource: nccl-tests at 16 nodes\n")
    with_profile = first_projection("--network", str(profile))
    assumed = first_projection()
    assert "nccl-tests at 16 nodes" in with_profile["network"]
    assert "(+-15%)" in with_profile["network"]  # the band the profile's number allows
    assert "assumed at 1-100% of the intra-node one" in assumed["network"]


def test_the_paragraph_reads_the_centre_the_table_shows(tmp_path: Path) -> None:
    """The quickstart's 1x1 and 1x2 runs on a 2 GB/s network profile, projected to 8-32
    nodes: where the 75% crossing falls, the explanations' span and the step at the largest
    scale are the centre's, the error model's mean in them, as the table's efficiency is (they
    were the step model's own: the crossing read 32 nodes where the table fell below 75% at
    16, and a step the stated efficiency did not imply)."""
    import re

    from projection_helpers import REPO

    profile = tmp_path / "net.yaml"
    profile.write_text("inter_busbw_gbps: 2\nsource: test\n")
    out = tmp_path / "out"
    rc, _, err = run(
        summarize.main,
        str(REPO / "tests" / "fixtures" / "quickstart"),
        "--project",
        "8,16,32",
        "--network",
        str(profile),
        "--out",
        str(out),
        "--jobs",
        "1",
    )
    assert rc == 0, err
    rows = json.loads((out / "summary.json").read_text())["projection"]
    plain = sorted((r for r in rows if r["what_if"] == "as measured"), key=lambda r: r["nodes"])
    below = next(r["nodes"] for r in plain if r["efficiency"] < 0.75)
    words = (out / "report.md").read_text().split("## Projection, in words", 1)[1]
    assert f"falls below 75% at about {below} nodes" in words
    top = plain[-1]
    assert top["explanations_low"] <= top["efficiency"] <= top["explanations_high"]
    lo, hi = round(100 * top["explanations_low"]), round(100 * top["explanations_high"])
    assert (f"give {lo}-{hi}% there" if lo != hi else f"give about {lo}% there") in words
    step = top["per_device_batch_size"] / top["throughput_per_device"]
    assert abs(step / top["step_s"] - 1) >= 0.01  # the mean moves it here
    said = re.search(r"makes it ([0-9.]+) ms", words)
    assert said is not None and float(said.group(1)) == pytest.approx(1000 * step, rel=0.01)


def run_exit(*argv: str) -> tuple[int, str]:
    """rc and stderr of summarize's main, whether it returns or argparse exits."""
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        try:
            rc = summarize.main(list(argv))
        except SystemExit as exc:
            rc = int(exc.code or 0)
    return rc, err.getvalue()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--project", "0"], "a node count must be >= 1"),
        (["--project", "two"], "expected node counts separated by commas"),
        (["--network", "x.yaml"], "--network needs --project NODES"),
        (["--devices-per-node", "4"], "--devices-per-node needs --project NODES"),
        (["--project", "4", "--network", "missing.yaml"], "--network: cannot read"),
        (["--format", "csv", "--table", "projection"], "--table projection needs --project"),
    ],
)
def test_bad_projection_arguments_are_one_line_and_write_nothing(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    out = tmp_path / "summary"
    rc, err = run_exit(str(FIXTURE), *argv, "--out", str(out))
    assert rc == 2
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], err
    assert not out.exists()
