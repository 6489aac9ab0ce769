"""The waterfall in words (analysis.compute.findings): where each scale's lost points went,
and what to try."""

from __future__ import annotations

from pathlib import Path

from waterfall_helpers import pattern_records, runs_of

from analysis.compute.findings import findings
from analysis.compute.waterfall import waterfall


def test_findings_read_correctly_for_each_cause(tmp_path: Path) -> None:
    texts = {}
    for cause in ("input", "skew", "comm", "jitter"):
        folder = tmp_path / cause
        wf = waterfall(runs_of(folder, pattern_records(cause)))
        (item,) = findings(wf)
        texts[cause] = item["text"]
    first_part = {k: v.split(" lost: ", 1)[1] for k, v in texts.items()}
    assert first_part["input"].startswith("input wait, ")
    assert (
        "2 loader worker(s) per device (workload.num_workers); see `scalescope bench-data`"
        in (texts["input"])
    )
    assert first_part["skew"].startswith("rank skew, ")
    assert (
        "rank 1 on node node1 is slowest (+78% over the typical rank); check that node"
        in (texts["skew"])
    )
    assert first_part["comm"].startswith("exposed communication, ")
    assert (
        "busbw 1.5 GB/s (fit: latency 50 µs), 20% of the predicted all-reduce hidden behind "
        "backward; try a larger "
        "per-device batch, gradient accumulation or larger DDP buckets" in texts["comm"]
    )
    assert first_part["jitter"].startswith("rotating stragglers, ")
    assert "a different rank is slowest from step to step" in texts["jitter"]
    for text in texts.values():
        assert "At 2 devices (1 node), 3 run(s): " in text
        assert "under 1 point each: " in text and "compute per sample" in text
        assert "unexplained, 0 points [0, 0]." in text


def test_fsdp_series_get_fsdps_advice_and_others_keep_ddps(tmp_path: Path) -> None:
    """A row whose strategy is fsdp (the record's identity.strategy, a series key) is advised
    in FSDP's terms; a row without the column (records before FSDP) or with ddp in DDP's."""
    from dataclasses import replace

    wf = waterfall(runs_of(tmp_path, pattern_records("comm")))
    (plain,) = findings(wf)
    assert "strategy" not in wf.table.columns or set(wf.table["strategy"]) == {"ddp"}
    assert "larger DDP buckets" in plain["text"] and "FSDP" not in plain["text"]
    for accelerator in ("cpu", "gpu"):
        table = wf.table.assign(strategy="fsdp", accelerator=accelerator)
        (item,) = findings(replace(wf, table=table))
        text = item["text"]
        assert "DDP buckets" not in text
        assert "busbw 1.5 GB/s, 20% of the predicted communication hidden; FSDP's" in text
        assert "fsdp.reshard_after_forward: false" in text
        assert "fewer, larger wrapped blocks" in text and "bf16 gathers" in text
        prefetch = "set_modules_to_forward_prefetch" in text
        assert prefetch == (accelerator == "gpu"), text
        assert ("nothing hides them" in text) == (accelerator == "cpu")
    (again,) = findings(replace(wf, table=wf.table.assign(strategy="ddp")))
    assert again["text"] == plain["text"]


def test_the_diagnosis_table_says_what_exposed_comm_is_under_fsdp(tmp_path: Path) -> None:
    from dataclasses import replace

    from analysis.analyze import analyze
    from analysis.present.tables.tables import diagnosis_table

    analysis = analyze(runs_of(tmp_path, pattern_records("comm")))
    assert analysis.waterfall is not None
    plain = diagnosis_table(analysis)
    assert plain is not None and not any("FSDP" in c for c in plain.caption)
    wf = replace(analysis.waterfall, table=analysis.waterfall.table.assign(strategy="fsdp"))
    table = diagnosis_table(replace(analysis, waterfall=wf))
    assert table is not None
    (fsdp,) = [c for c in table.caption if c.startswith("FSDP series: exposed comm is FSDP's")]
    assert "calibration windows isolate the exposed reduce-scatter only" in fsdp
    assert not any("reduce-scatter" in c for c in plain.caption)


def test_an_fsdp_series_is_not_projected_as_ddp(tmp_path: Path) -> None:
    """An FSDP series whose records hold no units' bytes gets a note saying why it is not
    projected, never DDP's projection; the same runs without the strategy are projected
    (an FSDP series with them: tests/unit/analysis/test_fsdp_projection.py)."""
    from projection_helpers import FIXTURE

    from analysis.compute.projection.project import FSDP_NO_UNIT_BYTES, project
    from analysis.read.frame import load

    runs = load(FIXTURE)
    ddp = project(runs, [4], draws=40)
    assert len(ddp.table) and not any("FSDP" in n for n in ddp.notes)
    fsdp = project(runs.assign(strategy="fsdp"), [4], draws=40)
    assert fsdp.table.empty and not fsdp.series
    assert any(n.endswith(f"no projection: {FSDP_NO_UNIT_BYTES}.") for n in fsdp.notes)


def test_an_unexplained_remainder_is_called_out_in_words_that_agree() -> None:
    """A remainder whose mean is small but whose interval reaches far is called out for its
    interval (not as "1 point ... are unexplained (beyond 5)", which read as a contradiction);
    one beyond the bar itself for its size; one within it on both ends not at all."""
    from types import SimpleNamespace

    import pandas as pd

    from analysis.compute.findings import diagnosis_notes

    rows = [
        (2, 1.0, -16.0, 19.0),
        (4, 12.0, 8.0, 16.0),
        (8, 2.0, -3.0, 4.0),
    ]
    table = pd.DataFrame(
        [
            {
                "series": "s",
                "nodes": n,
                "devices_per_node": 1,
                "is_baseline": False,
                "status": "recorded",
                "remainder_pts_mean": m,
                "remainder_pts_ci_low": lo,
                "remainder_pts_ci_high": hi,
            }
            for n, m, lo, hi in rows
        ]
    )
    notes = diagnosis_notes(SimpleNamespace(table=table))  # type: ignore[arg-type]
    assert notes[0].startswith("s at 2x1: 1 point [-16, 19] of the lost efficiency is unexplained")
    assert "(its interval reaching beyond 5)" in notes[0]
    assert notes[1].startswith("s at 4x1: 12 points [8, 16] of the lost efficiency are unexpl")
    assert "(beyond 5)" in notes[1]
    assert len(notes) == 2
