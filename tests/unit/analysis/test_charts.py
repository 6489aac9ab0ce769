"""The charts (analysis.present.charts.charts), drawn to PNG from a waterfall."""

from __future__ import annotations

from pathlib import Path

from waterfall_helpers import PATTERNS, diag_record, pattern_records, runs_of

from analysis.compute.waterfall import NOT_RECORDED, waterfall


def test_charts_render_to_png(tmp_path: Path) -> None:
    from analysis.present.charts.charts import ranks_chart, step_parts_chart

    wf = waterfall(runs_of(tmp_path / "logs", pattern_records("skew")))
    series = wf.table["series"].iloc[0]
    assert set(wf.ranks["rank"]) == {0, 1}
    assert wf.ranks.loc[wf.ranks["is_slowest"], "rank"].tolist() == [1]
    for name, fig in (
        ("steps", step_parts_chart(wf.table, series)),
        ("ranks", ranks_chart(wf.ranks, series)),
    ):
        path = tmp_path / f"{name}.png"
        fig.savefig(path)
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    texts = [t.get_text() for t in ranks_chart(wf.ranks, series).axes[0].texts]
    assert "slowest: rank 1\non node1" in texts


def test_a_scale_without_a_breakdown_is_labelled_in_the_chart(tmp_path: Path) -> None:
    from analysis.present.charts.charts import step_parts_chart

    records = [r for r in pattern_records("input") if r.identity.world_size == 1]
    records += [
        diag_record(f"2{i}", 2, with_diagnosis=False, **PATTERNS["input"]) for i in range(2)
    ]
    wf = waterfall(runs_of(tmp_path, records))
    fig = step_parts_chart(wf.table, wf.table["series"].iloc[0])
    assert NOT_RECORDED in [t.get_text() for t in fig.axes[0].texts]
    fig.savefig(tmp_path / "chart.png")
