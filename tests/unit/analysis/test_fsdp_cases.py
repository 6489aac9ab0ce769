"""FSDP's published cases: read (analysis.read.cases), routed to FSDP's step model and scored
apart from the all-reduce cases (analysis.compute.projection.published.scoring), which stay as they
were."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analysis.commands import backtest as command
from analysis.compute.projection.error_file import load as load_error_model
from analysis.compute.projection.published.backtest import (
    FSDP_NOISE_FLOOR,
    backtest,
    fsdp_error_model,
    split,
)
from analysis.compute.projection.published.scoring import case_model
from analysis.compute.projection.step_time.fsdp_comm import FsdpStepModel
from analysis.compute.projection.step_time.step_model import StepModel
from analysis.read.cases import CaseError, read_cases

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "benchmarks" / "projection_cases.yaml"

CASE = """
  - name: {name}
    hardware: {{devices_per_node: 4, intra_busbw_gbps: 100.0}}
    model: {{grad_bytes: 4000000000.0, method: {method}{extra}}}
    per_device_batch: 64
    measured: [{{nodes: 1, devices_per_node: 1, throughput_per_device: 100}}]
    published: [{{nodes: 1, devices_per_node: 4, throughput_per_device: 90,
                  efficiency_vs_1gpu: 0.9}}]
"""


def write(tmp_path: Path, *cases: tuple[str, str, str]) -> str:
    path = tmp_path / "cases.yaml"
    body = "".join(CASE.format(name=n, method=m, extra=e) for n, m, e in cases)
    path.write_text("cases:\n" + body)
    return str(path)


def test_the_reader_takes_fsdps_method_and_its_wrapped_blocks(tmp_path: Path) -> None:
    fsdp, kept, ddp = read_cases(
        write(
            tmp_path,
            ("a", "fsdp2", ", wrapped_blocks: 4"),
            ("b", "fsdp", ", wrapped_blocks: 2, reshard_after_forward: false"),
            ("c", "ddp", ""),
        )
    )
    assert (fsdp.method, fsdp.wrapped_blocks, fsdp.reshard_after_forward) == ("fsdp", 4, True)
    assert (kept.wrapped_blocks, kept.reshard_after_forward) == (2, False)
    assert (ddp.method, ddp.wrapped_blocks) == ("ddp", None)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("", "model.wrapped_blocks must be an integer >= 1 for method fsdp, got None"),
        (", wrapped_blocks: 0", "model.wrapped_blocks must be an integer >= 1"),
        (", wrapped_blocks: 2, reshard_after_forward: 1", "must be true or false"),
    ],
)
def test_a_fsdp_case_without_its_blocks_is_refused(
    tmp_path: Path, extra: str, message: str
) -> None:
    with pytest.raises(CaseError, match=message):
        read_cases(write(tmp_path, ("x", "fsdp", extra)))


def test_scoring_routes_fsdp_cases_to_fsdps_model(tmp_path: Path) -> None:
    """An fsdp case's network term is its blocks' gathers (4 GB over 4 blocks), a DDP case's
    its buckets, in the all-reduce model."""
    fsdp, ddp = read_cases(write(tmp_path, ("a", "fsdp", ", wrapped_blocks: 4"), ("c", "ddp", "")))
    model = case_model(fsdp)
    assert isinstance(model, FsdpStepModel) and model.bucket_bytes == (1e9,) * 4
    assert type(case_model(ddp)) is StepModel
    # the same case read as DDP exposes another time at 4 ranks than as FSDP
    as_ddp = case_model(ddp)
    assert model.modelled_exposed(4, 1, model.bucket_bytes, 1, 1.0, 64) != pytest.approx(
        as_ddp.modelled_exposed(4, 1, as_ddp.bucket_bytes, 1, 1.0, 64)
    )
    assert split([fsdp, ddp]) == ([ddp], [fsdp])


def test_fsdp_points_are_scored_apart_and_the_ddp_result_is_unchanged(tmp_path: Path) -> None:
    """With FSDP cases in the file, the all-reduce cases' points and totals are exactly those
    of the file without them; FSDP's come under ``fsdp`` with the widened error model."""
    mixed = read_cases(
        write(tmp_path, ("c", "ddp", ""), ("a", "fsdp", ", wrapped_blocks: 4"), ("d", "ddp", ""))
    )
    alone = [c for c in mixed if c.method == "ddp"]
    both, ddp_only = backtest(mixed, draws=40), backtest(alone, draws=40)
    assert "fsdp" not in ddp_only
    fsdp = both.pop("fsdp")
    assert json.dumps(both, sort_keys=True) == json.dumps(ddp_only, sort_keys=True)
    assert [p["case"] for p in fsdp["points"]] == ["a"]
    noise = max(load_error_model().noise, FSDP_NOISE_FLOOR)
    assert fsdp["totals"]["cases"] == 1 and fsdp["error_model"].endswith(f"FSDP: noise {noise:g}")
    assert math.isfinite(fsdp["points"][0]["predicted"])


def test_fsdps_error_model_keeps_the_spreads_and_a_noise_floor() -> None:
    """FSDP's points take the shipped model's spreads and its noise, never below the floor
    (the widest level of the grid when FSDP's cases were first scored)."""
    from dataclasses import replace

    from analysis.compute.projection.error_file import load

    em = load()
    wide = fsdp_error_model(em)
    assert (wide.sd_d, wide.sd_s, wide.mu_d) == (em.sd_d, em.sd_s, em.mu_d)
    assert wide.noise == max(em.noise, FSDP_NOISE_FLOOR)
    assert fsdp_error_model(replace(em, noise=0.01)).noise == FSDP_NOISE_FLOOR
    assert fsdp_error_model(replace(em, noise=0.06)).noise == 0.06


def test_the_command_prints_the_fsdp_cases_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bt.json"
    path = write(tmp_path, ("c", "ddp", ""), ("a", "fsdp", ", wrapped_blocks: 4"))
    assert command.main(["backtest", path, "--json", str(out), "--draws", "30"]) == 0
    text = capsys.readouterr().out
    first, _, second = text.partition("FSDP projection backtest")
    assert "│ c " in first and "│ a " not in first
    assert "│ a " in second and "scored apart" in second
    doc = json.loads(out.read_text())
    assert [p["case"] for p in doc["points"]] == ["c"]
    assert [p["case"] for p in doc["fsdp"]["points"]] == ["a"]


def test_the_shipped_fsdp_cases_are_read_as_fsdp() -> None:
    _, fsdp = split(read_cases(str(CASES)))
    assert fsdp and all(c.wrapped_blocks and c.group for c in fsdp)
