"""The "mixed precision vs fp32" comparison: pairing, ratios, and its absence."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from analysis_helpers import make_result, summarize_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.analyze import analyze
from analysis.compute.metrics import precision_table
from analysis.present.tables.tables import all_tables, markdown
from analysis.present.tables.tables import precision_table as precision_display
from analysis.read.frame import runs_frame
from analysis.read.parse import ParseResult, Run
from scalescope.record import ResultRecord, encode

WORLDS = {1: (1, 1), 2: (1, 2)}


def record(
    job: str,
    precision: str,
    world: int,
    time_s: float,
    *,
    loss: float = 0.5,
    mem_gib: list[float] | None = None,
    config_name: str = "gpt",
) -> ResultRecord:
    rec = make_result(
        job,
        world=WORLDS[world],
        train_time_s=time_s,
        precision=precision,
        accelerator="gpu",
        config_name=config_name,
        val_loss=loss,
        device_name="NVIDIA H100 80GB HBM3",
    )
    return dataclasses.replace(rec, peak_mem_gib=mem_gib) if mem_gib is not None else rec


def frame(records: list[ResultRecord]) -> pd.DataFrame:
    return runs_frame(ParseResult(runs=[Run(r, ("x",)) for r in records]))


def sweep(
    fp32_s: list[float], mixed_s: list[float], *, mixed: str = "bf16-mixed"
) -> list[ResultRecord]:
    """Both precisions at 1 and 2 devices; memory on the GPU, mixed using 60% of fp32's."""
    out = []
    for world in (1, 2):
        for i, t in enumerate(fp32_s):
            out.append(record(f"f{world}{i}", "32", world, t / world, mem_gib=[10.0] * world))
        for i, t in enumerate(mixed_s):
            out.append(
                record(f"m{world}{i}", mixed, world, t / world, loss=0.505, mem_gib=[6.0] * world)
            )
    return out


def test_pairs_at_each_scale_with_speed_memory_and_loss_parity() -> None:
    table = precision_table(frame(sweep([100.0, 104.0, 96.0], [50.0, 51.0, 49.0])))
    assert list(zip(table["nodes"], table["devices_per_node"], strict=True)) == [(1, 1), (1, 2)]
    assert set(table["precision"]) == {"bf16-mixed"}
    for _, row in table.iterrows():
        assert row["headline_basis"] == "steady state"
        assert row["speed_ratio"] == pytest.approx(2.0, rel=0.02)
        assert row["speed_ratio_ci_low"] < row["speed_ratio"] < row["speed_ratio_ci_high"]
        assert row["peak_mem_ratio"] == pytest.approx(0.6)
        assert row["val_loss_rel_diff"] == pytest.approx(0.01)
        assert (row["n"], row["fp32_n"]) == (3, 3)
        assert "fp32" in row["fp32_series"] and "bf16-mixed" in row["series"]


def test_no_memory_recorded_leaves_the_ratio_empty() -> None:
    records = [
        dataclasses.replace(r, peak_mem_gib=None) for r in sweep([100.0, 90.0], [60.0, 55.0])
    ]
    table = precision_table(frame(records))
    assert len(table) == 2 and table["peak_mem_ratio"].isna().all()
    text = markdown(precision_display(analyze(frame(records))))  # type: ignore[arg-type]
    assert "| 1x1 |" in text and "—" in text


@pytest.mark.parametrize(
    "records",
    [
        [record("a", "32", 1, 100.0), record("b", "32", 2, 50.0)],  # fp32 only
        [record("a", "bf16-mixed", 1, 100.0), record("b", "16-mixed", 1, 80.0)],  # no fp32
        [record("a", "32", 1, 100.0), record("b", "bf16-mixed", 2, 30.0)],  # other scale
        [record("a", "32", 1, 100.0), record("b", "bf16-mixed", 1, 50.0, config_name="other")],
    ],
)
def test_absent_without_a_pair_differing_only_in_precision(records: list[ResultRecord]) -> None:
    runs = frame(records)
    analysis = analyze(runs)
    assert analysis.precision.empty
    assert precision_display(analysis) is None
    names = [t.name for t in all_tables(runs, pd.DataFrame(), [], analysis)]
    assert "precision" not in names


def test_each_mixed_precision_pairs_with_the_same_fp32_group() -> None:
    records = sweep([100.0, 100.0], [50.0, 50.0]) + [
        r
        for r in sweep([100.0, 100.0], [80.0, 80.0], mixed="16-mixed")
        if r.identity.precision != "32"
    ]
    table = precision_table(frame(records))
    keys = zip(table["precision"], table["world_size"], strict=True)
    ratios = dict(zip(keys, table["speed_ratio"], strict=True))
    assert ratios == pytest.approx(
        {
            ("16-mixed", 1): 1.25,
            ("16-mixed", 2): 1.25,
            ("bf16-mixed", 1): 2.0,
            ("bf16-mixed", 2): 2.0,
        }
    )


times = st.lists(st.floats(10.0, 1000.0), min_size=2, max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fp32=times, factor=st.floats(0.2, 5.0))
def test_mixed_runs_scaled_by_a_constant_give_its_inverse(fp32: list[float], factor: float) -> None:
    """Mixed runs taking ``factor`` x fp32's time run at 1/factor its speed, CI around it."""
    table = precision_table(frame(sweep(fp32, [t * factor for t in fp32])))
    for _, row in table.iterrows():
        assert row["speed_ratio"] == pytest.approx(1 / factor, rel=1e-9)
        lo, hi = row["speed_ratio_ci_low"], row["speed_ratio_ci_high"]
        # two or more repeats a side: always an interval (a point when the repeats agree)
        assert lo <= row["speed_ratio"] * (1 + 1e-9)
        assert hi >= row["speed_ratio"] * (1 - 1e-9)


def test_summarize_prints_the_table_and_writes_its_csv(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for r in sweep([100.0, 98.0], [60.0, 61.0]):
        (logs / f"slurm-{r.identity.job_id}.out").write_text(encode(r) + "\n")
    out = tmp_path / "summary"
    proc = summarize_main(logs, "--format", "markdown", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "Mixed precision vs fp32" in proc.stdout
    assert "1.6" in proc.stdout  # 99 / 60.5 = 1.64x
    csv = pd.read_csv(out / "precision.csv")
    assert len(csv) == 2 and csv["speed_ratio"].iloc[0] == pytest.approx(99 / 60.5, rel=1e-3)
