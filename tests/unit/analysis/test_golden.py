"""Golden tests: the command on committed logs against committed expected output, and its
headline numbers recomputed here from the same logs.

Refresh the goldens after an intended change with ``SCALESCOPE_UPDATE_GOLDEN=1 pytest
tests/unit/analysis/test_golden.py``: that run fails on purpose; review the diff, then run
again without the variable. The recomputed checks read only the committed inputs (through
:mod:`scalescope.record`), never a golden, so refreshing a golden cannot make them pass.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest
from analysis_helpers import FIXTURES, GOLDEN, REPO, summarize_main
from golden import check_json, check_text

from scalescope.record import RecordError, ResultRecord, decode_line, find_marker, read_result_json

INPUT = "tests/fixtures/logs"  # relative: paths in the output are relative to it


@pytest.fixture(scope="module")
def summary() -> dict[str, Any]:
    """The JSON summary of the committed logs, as the command prints it."""
    proc = summarize_main(INPUT, "--no-write", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_markdown_summary_matches_golden() -> None:
    proc = summarize_main(INPUT, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    check_text(GOLDEN / "summary.md", proc.stdout)
    # stderr: one warning per damaged file of bad/ (see the fixtures' README), nothing else
    warned = [line.split(": ")[2] for line in proc.stderr.splitlines()]
    assert proc.stderr.count("python -m analysis.summarize: warning: logs/bad/") == len(warned)
    assert warned == [
        "logs/bad/checkpoint.out",  # binary
        "logs/bad/slurm-6001.out",  # a result line cut in half
        "logs/bad/slurm-6002.out",  # a newer schema version
        "logs/bad/slurm-6003.out",  # its log and its result.json disagree
    ]


def test_json_summary_matches_golden(summary: dict[str, Any]) -> None:
    check_json(GOLDEN / "summary.json", summary)


def test_json_carries_every_table_and_its_versions(summary: dict[str, Any]) -> None:
    assert summary["schema_version"] == 1 and summary["record_schema_version"] == 1
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
    } <= summary.keys()
    assert {r["job_id"]: r["restart_count"] for r in summary["runs"]}["5004"] == 1


def test_written_summary_folder(tmp_path: Path) -> None:
    out = tmp_path / "summary"
    proc = summarize_main(INPUT, "--out", out, "--format", "json")
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


# --- the headline recomputed from the committed records ------------------------------------------
#
# Definitions (analysis/compute/metrics.py): a series is the runs differing only in scale; its
# baseline is its 1-device group; the headline throughput X is ``steady_samples_per_s``; speedup =
# mean X / mean X_baseline (a ratio of means, not a mean of ratios), parallel efficiency =
# speedup / (world size / baseline world size); per-device throughput efficiency = mean
# (steady_samples_per_s_per_device) / the baseline's. Each run counts once however many files
# carry its record; a run's result.json wins over its log line.


def _committed_records() -> Iterator[tuple[Path, ResultRecord]]:
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.suffix == ".md":
            continue
        if path.name == "result.json":
            yield path, read_result_json(path)
            continue
        for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
            if find_marker(line) < 0:
                continue
            try:
                event = decode_line(line)
            except RecordError:  # a broken line or a newer schema: not a record
                continue
            if isinstance(event, ResultRecord):
                yield path, event


@functools.cache
def committed_runs() -> dict[str, ResultRecord]:
    """run_id -> its record, result.json first."""
    runs: dict[str, ResultRecord] = {}
    for path, record in _committed_records():
        if path.name == "result.json" or record.identity.run_id not in runs:
            runs[record.identity.run_id] = record
    return runs


def series_key(r: ResultRecord) -> tuple[Any, ...]:
    i = r.identity
    return (
        i.config_name,
        i.scaling_mode,
        i.precision,
        i.accelerator,
        r.device_name,
        i.cluster,
        r.epochs,
        i.global_batch_size if i.scaling_mode == "strong" else i.per_device_batch_size,
    )


def row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(
        row[k]
        for k in (
            "config_name",
            "scaling_mode",
            "precision",
            "accelerator",
            "device_name",
            "cluster",
            "epochs",
            "held_batch_size",
        )
    )


def committed_groups() -> dict[tuple[Any, ...], dict[tuple[int, int], list[ResultRecord]]]:
    """series key -> (nodes, devices per node) -> the records of that scale."""
    out: dict[tuple[Any, ...], dict[tuple[int, int], list[ResultRecord]]] = {}
    for r in committed_runs().values():
        scale = (r.identity.nodes, r.identity.devices_per_node)
        out.setdefault(series_key(r), {}).setdefault(scale, []).append(r)
    return out


def test_every_committed_record_is_one_run(summary: dict[str, Any]) -> None:
    runs = committed_runs()
    # the sweep's runs are in their logs and their result.json: each counts once
    assert len(runs) == 9
    assert sorted(r["run_id"] for r in summary["runs"]) == sorted(runs)
    for row in summary["runs"]:
        record = runs[row["run_id"]]
        assert (row["world_size"], row["restart_count"]) == (
            record.identity.world_size,
            record.identity.restart_count,
        )
        assert row["steady_samples_per_s"] == pytest.approx(record.steady_samples_per_s)


def test_groups_count_the_runs_of_each_scale(summary: dict[str, Any]) -> None:
    groups = committed_groups()
    expected = {
        (key, scale): sorted(r.identity.job_id for r in records)
        for key, scales in groups.items()
        for scale, records in scales.items()
    }
    # the recorded sweep has three repeats per scale (two from sweep/, one from submitit/)
    assert sorted(len(ids) for ids in expected.values()) == [1, 1, 1, 3, 3]
    actual = {
        (row_key(row), (row["nodes"], row["devices_per_node"])): row for row in summary["groups"]
    }
    assert actual.keys() == expected.keys()
    for where, row in actual.items():
        assert row["n"] == len(expected[where]), where
        assert sorted(row["job_ids"].split(",")) == expected[where], where


def test_speedup_and_efficiency_are_ratios_of_mean_steady_throughput(
    summary: dict[str, Any],
) -> None:
    groups = committed_groups()
    rows = {(row_key(r), (r["nodes"], r["devices_per_node"])): r for r in summary["scaling"]}
    assert rows.keys() == {(k, s) for k, scales in groups.items() for s in scales}
    scaled = 0
    for (key, scale), row in rows.items():
        records = groups[key][scale]
        (base,) = [rs for (nodes, dpn), rs in groups[key].items() if nodes * dpn == 1]
        x = fmean(r.steady_samples_per_s for r in records)  # type: ignore[misc]
        x_base = fmean(r.steady_samples_per_s for r in base)  # type: ignore[misc]
        per_device = fmean(r.steady_samples_per_s_per_device for r in records)  # type: ignore[misc]
        per_device_base = fmean(r.steady_samples_per_s_per_device for r in base)  # type: ignore[misc]
        world = records[0].identity.world_size
        assert row["baseline_world_size"] == 1 and row["is_baseline"] == (world == 1)
        assert row["headline_basis"] == "steady state"
        assert row["n"] == len(records) and row["baseline_n"] == len(base)
        assert row["samples_per_s_mean"] == pytest.approx(x, rel=1e-12)
        assert row["speedup"] == pytest.approx(x / x_base, rel=1e-12), (key, scale)
        assert row["parallel_efficiency"] == pytest.approx(x / x_base / world, rel=1e-12)
        assert row["per_device_throughput_efficiency"] == pytest.approx(
            per_device / per_device_base, rel=1e-12
        )
        scaled += world > 1
    assert scaled == 3  # 2 devices of the CPU sweep, 4 and 8 of the GPU series


def test_the_cpu_sweep_speedup_is_not_a_mean_of_per_run_ratios(summary: dict[str, Any]) -> None:
    """The one series with repeats on both sides: a mean of ratios differs from the ratio of
    means here, so the check above would notice the definition changing."""
    (row,) = [
        r for r in summary["scaling"] if r["config_name"] == "spiral" and r["world_size"] == 2
    ]
    scales = committed_groups()[row_key(row)]
    one, two = scales[(1, 1)], scales[(1, 2)]
    ratio_of_means = fmean(r.steady_samples_per_s for r in two) / fmean(  # type: ignore[misc]
        r.steady_samples_per_s for r in one
    )
    mean_of_ratios = fmean(
        b.steady_samples_per_s / a.steady_samples_per_s  # type: ignore[operator]
        for a in one
        for b in two
    )
    assert abs(mean_of_ratios - ratio_of_means) > 1e-3
    assert row["speedup"] == pytest.approx(ratio_of_means, rel=1e-12)


# The fixture README's table: one failure class per job (5004 was requeued, then finished).
EXPECTED_REASONS = {
    "5001": "time_limit",
    "5002": "preemption",
    "5003": "node_failure",
    "5005": "cancelled",
    "5006": "host_oom",
    "5007": "cuda_oom",
    "5008": "collective_timeout",
    "5009": "rendezvous_timeout",
    "5010": "exception",
    "5011": "exit_code",
    "5012": "unknown",  # a start event only
    "5013": "exception",  # died before its start event
    "5014": "time_limit",  # submitit: SIGUSR2, timed out
    "5015": "cuda_oom",  # the OOM, not the watchdog timeouts and the time limit after it
    "6001": "unknown",  # its result line is cut in half: no valid result
}


def test_failure_reasons_of_the_committed_failing_jobs(summary: dict[str, Any]) -> None:
    reasons = {f["job_id"]: f["reason"] for f in summary["failures"]}
    assert reasons == EXPECTED_REASONS
    failures = {f["job_id"]: f for f in summary["failures"]}
    assert failures["5015"]["also_seen"] == "collective_timeout,time_limit"
    assert failures["5007"]["also_seen"] == "collective_timeout"


def test_failure_evidence_is_the_named_line_of_the_committed_log(summary: dict[str, Any]) -> None:
    base = REPO / Path(INPUT).parent  # paths in the output are relative to the input's parent
    checked = 0
    for f in summary["failures"]:
        if f["evidence"] is None:
            assert f["reason"] == "unknown", f["job_id"]
            continue
        lines = (base / f["evidence_file"]).read_text(encoding="utf-8").splitlines()
        assert lines[f["evidence_line"] - 1] == f["evidence"], f["job_id"]
        checked += 1
    assert checked == len(EXPECTED_REASONS) - 2  # all but the two without a word


def test_a_chained_exception_reports_its_last_exception_line(summary: dict[str, Any]) -> None:
    text = (FIXTURES / "failures" / "slurm-5010.out").read_text(encoding="utf-8")
    exception_lines = re.findall(r"^(?:\w+\.)*\w+(?:Error|Exception): .*$", text, re.M)
    assert len(exception_lines) == 2  # KeyError, then the ValueError raised while handling it
    (row,) = [f for f in summary["failures"] if f["job_id"] == "5010"]
    assert row["detail"] == exception_lines[-1]
