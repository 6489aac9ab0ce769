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
