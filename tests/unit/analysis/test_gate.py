"""The regression gate (``summarize check``) and the exporters, through the command's main
in this process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from analysis_helpers import GOLDEN, summarize_main, write_runs
from golden import check_json
from hypothesis import assume, given
from hypothesis import strategies as st
from scipy import stats as sps

from analysis.compute.gate import (
    KEY_DEFAULTS,
    BadReference,
    _ratio_p_below,
    load_reference,
    series_identity,
)
from analysis.compute.metrics import SERIES_KEYS
from analysis.compute.stats import log_ratio, ratio_ci, summarize

GOOD = {1: [100.0, 101.0, 99.0], 2: [52.0, 51.0, 53.0]}


@pytest.fixture
def reference(tmp_path: Path) -> Path:
    ref = tmp_path / "ref.yaml"
    proc = summarize_main("check", write_runs(tmp_path / "good", GOOD), "--write-reference", ref)
    assert proc.returncode == 0, proc.stderr
    return ref


def _verdicts(proc_stdout: str) -> dict[tuple[str, str], str]:
    doc = json.loads(proc_stdout)
    return {
        (f"{c['nodes']}x{c['devices_per_node']}", c["metric"]): c["verdict"] for c in doc["checks"]
    }


def test_written_reference_holds_means_keyed_by_every_series_field(reference: Path) -> None:
    doc = yaml.safe_load(reference.read_text(encoding="utf-8"))
    assert doc["schema_version"] == 1 and doc["tolerance"] == 0.05
    (series,) = doc["series"]
    assert list(series["key"]) == list(SERIES_KEYS)
    assert series["key"]["scaling_mode"] == "strong" and series["label"].startswith("spiral")
    one, two = series["scales"]
    assert (one["nodes"], one["devices_per_node"], two["devices_per_node"]) == (1, 1, 2)
    per_device = [8000 * 4 / t for t in GOOD[1]]
    assert one["samples_per_s_per_device"] == pytest.approx(sum(per_device) / 3, rel=1e-5)
    assert "parallel_efficiency" not in one  # 1 by definition at the baseline
    # the headline: a ratio of mean (steady-state) throughputs
    rate = [sum(8000 * 4 / t for t in GOOD[w]) / 3 for w in (1, 2)]
    assert two["parallel_efficiency"] == pytest.approx(rate[1] / rate[0] / 2, rel=1e-5)


def test_the_same_results_pass(tmp_path: Path, reference: Path) -> None:
    proc = summarize_main("check", tmp_path / "good", "--reference", reference, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert set(_verdicts(proc.stdout).values()) == {"ok"}


def test_a_significant_regression_fails_and_names_its_value(
    tmp_path: Path, reference: Path
) -> None:
    bad = write_runs(tmp_path / "bad", {1: [100.0, 101.0, 99.0], 2: [70.0, 71.0, 69.0]})
    proc = summarize_main("check", bad, "--reference", reference, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    verdicts = _verdicts(proc.stdout)
    assert verdicts[("1x2", "parallel_efficiency")] == "REGRESSION"
    assert verdicts[("1x2", "samples_per_s_per_device")] == "REGRESSION"
    assert verdicts[("1x1", "samples_per_s_per_device")] == "ok"
    p = {c["metric"]: c["p_value"] for c in json.loads(proc.stdout)["checks"] if c["nodes"]}
    assert p["parallel_efficiency"] < 0.05
    table = summarize_main("check", bad, "--reference", reference, env={"COLUMNS": "120"})
    assert table.returncode == 1
    for text in ("Regression gate", "REGRESSION", "Bound (-5%)", "Measured [95% CI]", "1x2"):
        assert text in table.stdout
    assert "throughput/device" in table.stdout  # the metric's short name
    assert max(len(line) for line in table.stdout.splitlines()) <= 120, table.stdout
    rows = [line for line in table.stdout.splitlines() if "REGRESSION" in line and "1x2" in line]
    assert len(rows) == 2, table.stdout  # each check on one line: nothing wrapped at 120
    assert "2 regression(s)" in table.stderr


def test_below_the_bound_but_noisy_is_not_a_regression(tmp_path: Path, reference: Path) -> None:
    noisy = write_runs(tmp_path / "noisy", {1: [95.0, 150.0, 100.0], 2: [52.0, 51.0, 53.0]})
    proc = summarize_main("check", noisy, "--reference", reference, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    check = next(
        c
        for c in json.loads(proc.stdout)["checks"]
        if c["metric"] == "samples_per_s_per_device" and c["devices_per_node"] == 1
    )
    assert check["measured"] < check["bound"] and check["p_value"] >= 0.05
    assert check["verdict"] == "below but not significant"


def test_one_run_is_never_a_significant_regression(tmp_path: Path, reference: Path) -> None:
    single = write_runs(tmp_path / "single", {1: [100.0], 2: [90.0]})
    proc = summarize_main("check", single, "--reference", reference, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert _verdicts(proc.stdout)[("1x2", "parallel_efficiency")] == "below but not significant"


def test_missing_values_show_and_fail_only_when_asked(tmp_path: Path, reference: Path) -> None:
    only_one = write_runs(tmp_path / "one", {1: GOOD[1]})
    proc = summarize_main("check", only_one, "--reference", reference, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert _verdicts(proc.stdout) == {
        ("1x1", "samples_per_s_per_device"): "ok",
        ("1x2", "samples_per_s_per_device"): "missing",
        ("1x2", "parallel_efficiency"): "missing",
    }
    assert proc.stderr.endswith("check: 3 check(s): 0 regression(s), 2 missing; passed\n")
    strict = summarize_main("check", only_one, "--reference", reference, "--fail-on-missing")
    assert strict.returncode == 1 and "missing" in strict.stdout
    assert strict.stderr.endswith("check: 3 check(s): 0 regression(s), 2 missing\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = summarize_main("check", empty, "--reference", reference)
    assert nothing.returncode == 1 and "nothing to check" in nothing.stderr


def test_tolerance_per_series_and_metric(tmp_path: Path, reference: Path) -> None:
    doc = yaml.safe_load(reference.read_text(encoding="utf-8"))
    doc["series"][0]["tolerance"] = {"parallel_efficiency": 0.5}
    loose = tmp_path / "loose.yaml"
    loose.write_text(yaml.safe_dump(doc), encoding="utf-8")
    bad = write_runs(tmp_path / "bad", {1: [100.0, 101.0, 99.0], 2: [70.0, 71.0, 69.0]})
    proc = summarize_main("check", bad, "--reference", loose, "--format", "json")
    verdicts = _verdicts(proc.stdout)
    assert verdicts[("1x2", "parallel_efficiency")] == "ok"  # 0.71 >= 0.96 x 0.5
    assert verdicts[("1x2", "samples_per_s_per_device")] == "REGRESSION"  # default 5 %
    assert proc.returncode == 1


def test_a_hand_edited_reference_is_read_as_a_config_is(tmp_path: Path, reference: Path) -> None:
    """Numbers as people type them (1e-1, no dot) are numbers, as in a config (YAML 1.2):
    read as YAML 1.1 reads them, 1e-1 was the string '1e-1' and the file was refused."""
    text = reference.read_text(encoding="utf-8").replace("tolerance: 0.05", "tolerance: 1e-1")
    assert "tolerance: 1e-1" in text
    edited = tmp_path / "edited.yaml"
    edited.write_text(text, encoding="utf-8")
    assert {e.tolerance for e in load_reference(edited)} == {0.1}


def test_write_reference_refuses_to_overwrite_without_force(
    tmp_path: Path, reference: Path
) -> None:
    before = reference.read_text(encoding="utf-8")
    other = write_runs(tmp_path / "other", {1: [50.0, 51.0]})
    proc = summarize_main("check", other, "--write-reference", reference)
    assert proc.returncode == 2 and "--force" in proc.stderr
    assert reference.read_text(encoding="utf-8") == before
    forced = summarize_main("check", other, "--write-reference", reference, "--force")
    assert forced.returncode == 0, forced.stderr
    assert reference.read_text(encoding="utf-8") != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good", "other", "ref.yaml"]


def _edit(reference: Path, target: Path, change: object) -> Path:
    doc = yaml.safe_load(reference.read_text(encoding="utf-8"))
    change(doc)  # type: ignore[operator]
    target.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return target


BAD_FILES = {
    "unknown top-level key": (
        lambda d: d.update(tolerence=0.1),
        "unknown key 'tolerence'",
    ),
    "unknown key field": (
        lambda d: d["series"][0]["key"].update(gpu_model="H100"),
        "series[0].key: unknown key 'gpu_model'",
    ),
    "missing key field": (
        lambda d: d["series"][0]["key"].pop("precision"),
        "series[0].key: missing key field 'precision'",
    ),
    "value of the wrong type": (
        lambda d: d["series"][0]["scales"][1].update(parallel_efficiency="0.9"),
        "series[0].scales[1].parallel_efficiency: expected a number",
    ),
    "unknown metric": (
        lambda d: d["series"][0]["scales"][0].update(samples_per_s=10.0),
        "series[0].scales[0]: unknown key 'samples_per_s'",
    ),
    "tolerance out of range": (
        lambda d: d["series"][0].update(tolerance=5),
        "series[0].tolerance: a relative tolerance must be in [0, 1)",
    ),
    "nodes not an integer": (
        lambda d: d["series"][0]["scales"][0].update(nodes=1.5),
        "series[0].scales[0].nodes: expected an integer >= 1",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_reference_file_is_one_line_and_exit_2(
    tmp_path: Path, reference: Path, case: str
) -> None:
    change, message = BAD_FILES[case]
    bad = _edit(reference, tmp_path / "bad.yaml", change)
    proc = summarize_main("check", tmp_path / "good", "--reference", bad)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert str(bad) in line and message in line, line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "no such reference file"),
        ("series: [\n  - {key: \n", "not valid YAML"),
        ("- 1\n- 2\n", "expected a mapping, got list"),
        ("schema_version: 1\n", "series: expected a non-empty list"),
    ],
)
def test_unreadable_reference_files(tmp_path: Path, text: str | None, message: str) -> None:
    ref = tmp_path / "ref.yaml"
    if text is not None:
        ref.write_text(text, encoding="utf-8")
    write_runs(tmp_path / "in", {1: [10.0]})
    proc = summarize_main("check", tmp_path / "in", "--reference", ref)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert message in line and str(ref) in line


@pytest.mark.parametrize("field", [k for k in SERIES_KEYS if k not in KEY_DEFAULTS])
def test_every_series_key_field_is_required(tmp_path: Path, reference: Path, field: str) -> None:
    """Key fields are read from SERIES_KEYS, not a list of their own: each one is required,
    but for those added later (KEY_DEFAULTS)."""
    bad = _edit(reference, tmp_path / "bad.yaml", lambda d: d["series"][0]["key"].pop(field))
    with pytest.raises(BadReference, match=f"series\\[0\\].key: missing key field '{field}'"):
        load_reference(bad)


def test_a_reference_written_before_accumulation_existed_means_none(
    tmp_path: Path, reference: Path
) -> None:
    old = _edit(
        reference,
        tmp_path / "old.yaml",
        lambda d: [e["key"].pop("accumulate_grad_batches") for e in d["series"]],
    )
    first, *_ = load_reference(old)
    assert dict(zip(SERIES_KEYS, first.key, strict=True))["accumulate_grad_batches"] == 1
    (same, *_) = load_reference(reference)
    assert same.key == first.key and "accumulate" not in series_identity(first.key)


def test_a_loaded_key_holds_each_field_in_series_key_order(reference: Path) -> None:
    first, *_ = load_reference(reference)
    key = dict(zip(SERIES_KEYS, first.key, strict=True))
    assert (key["config_name"], key["workload"], key["scaling_mode"]) == (
        "spiral",
        "spiral",
        "strong",
    )
    assert (key["precision"], key["accelerator"], key["epochs"]) == ("32", "cpu", 4)
    assert (key["device_name"], key["cluster"]) == ("cpu", None)


# --- the tests behind the verdicts ---------------------------------------------------------------

positive = st.floats(min_value=1e-2, max_value=1e4, allow_nan=False, allow_infinity=False)


@given(
    st.lists(positive, min_size=2, max_size=6),
    st.lists(positive, min_size=2, max_size=6),
    st.floats(min_value=0.2, max_value=5.0),
)
def test_efficiency_p_value_read_back_from_two_intervals(
    a: list[float], b: list[float], factor: float
) -> None:
    num, den = summarize(a), summarize(b)
    lr = log_ratio(num, den)
    assume(lr.log_se > 0 and math.isfinite(lr.df))
    bound = lr.ratio * factor
    _, _, high95 = ratio_ci(num, den, 0.95)
    _, _, high90 = ratio_ci(num, den, 0.90)
    p = _ratio_p_below(lr.ratio, high95, 0.95, high90, 0.90, bound)
    direct = sps.t.cdf(math.log(lr.ratio / bound) / lr.log_se, lr.df)
    assert p == pytest.approx(direct, rel=1e-5, abs=1e-9)


# --- exporters --------------------------------------------------------------------------------

FIXTURES = "tests/fixtures/logs"


@pytest.mark.parametrize(
    ("fmt", "golden"),
    [
        ("github-action-benchmark", "export_github_action_benchmark.json"),
        ("bencher", "export_bencher.json"),
    ],
)
def test_exporters_match_golden(tmp_path: Path, fmt: str, golden: str) -> None:
    out = tmp_path / "bench.json"
    proc = summarize_main("export", FIXTURES, "--format", fmt, "-o", out)
    assert proc.returncode == 0, proc.stderr
    check_json(GOLDEN / golden, json.loads(out.read_text(encoding="utf-8")))


def _export(fmt: str) -> object:
    proc = summarize_main("export", FIXTURES, "--format", fmt)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_github_action_benchmark_entries_have_its_fields() -> None:
    doc = _export("github-action-benchmark")
    assert isinstance(doc, list) and doc
    for item in doc:
        assert (
            {"name", "unit", "value"} <= item.keys() <= {"name", "unit", "value", "range", "extra"}
        )
        assert isinstance(item["value"], (int, float)) and isinstance(item["name"], str)
        assert all(isinstance(item[k], str) for k in ("range", "extra") if k in item)
    assert len({item["name"] for item in doc}) == len(doc)
    assert any("range" in item for item in doc)  # the repeated series has intervals


def test_bencher_metric_format_shape() -> None:
    doc = _export("bencher")
    assert isinstance(doc, dict) and doc
    intervals = 0
    for benchmark, measures in doc.items():
        assert isinstance(benchmark, str) and len(benchmark) <= 1024
        for slug, metric in measures.items():
            assert len(slug) <= 64 and slug == slug.lower() and "_" not in slug
            assert metric.keys() in ({"value"}, {"value", "lower_value", "upper_value"})
            if "lower_value" in metric:
                assert metric["lower_value"] <= metric["value"] <= metric["upper_value"]
                intervals += 1
    assert intervals > 0  # the repeated series has intervals: the check above ran


def test_the_documented_reference_example_is_a_valid_reference_file(tmp_path: Path) -> None:
    doc = Path(__file__).resolve().parents[3] / "docs" / "analysis.md"
    text = doc.read_text(encoding="utf-8")
    block = text.split("The\nformat, edited by hand as needed:\n\n```yaml\n")[1].split("```")[0]
    ref = tmp_path / "ref.yaml"
    ref.write_text(block, encoding="utf-8")
    expected = load_reference(ref)
    assert [(e.nodes, e.devices_per_node, e.metric) for e in expected] == [
        (1, 1, "samples_per_s_per_device"),
        (1, 2, "samples_per_s_per_device"),
        (1, 2, "parallel_efficiency"),
    ]
    assert expected[2].tolerance == 0.10 and expected[1].tolerance == 0.05
