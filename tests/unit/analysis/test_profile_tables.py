"""The profiled ranks' top operations in the summary (analysis.present.tables.profile_tables):
a table per series from its largest profiled scale, in the terminal, report.md, summary.json
and report.html, with links to the trace files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from analysis_helpers import REPO, make_result, start_of, summarize_main, write_log

from scalescope.traces import read_trace, top_operations

GLOO_TRACE = REPO / "tests" / "fixtures" / "traces" / "gloo_ddp_rank0.json.gz"


def _profiled(job_id: str, world: tuple[int, int], run_dir: Path) -> object:
    """A finished run whose ranks 0 and 1 were profiled; both tables from a real gloo trace."""
    record = make_result(job_id, world=world)
    top = top_operations(read_trace(GLOO_TRACE))
    profile = {
        "status": "captured",
        "reason": None,
        "steps": [40, 44],
        "ranks": [0, 1],
        "chosen_by": "auto: rank 0 and the busiest rank (rank 1)",
        "traces": {"0": "traces/rank0.json", "1": "traces/rank1.json"},
        "top_ops": {"0": top, "1": top},
    }
    ident = replace(record.identity, run_dir=str(run_dir))
    return replace(record, identity=ident, profile=profile)


def test_the_largest_profiled_scale_gets_a_table_and_its_traces_a_link(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    small = _profiled("11", (1, 1), tmp_path / "runs" / "11")
    large = _profiled("12", (1, 2), tmp_path / "runs" / "12")
    plain = make_result("13", world=(1, 2))
    for r in (small, large, plain):
        write_log(logs / f"slurm-{r.identity.job_id}.out", start_of(r), r)
    out = tmp_path / "summary"
    result = summarize_main(logs, "--out", out, "--no-charts", "--wide")
    assert result.returncode == 0, result.stderr
    assert "Top operations: spiral · strong · fp32" in result.stdout
    assert "aten::mm" in result.stdout
    doc = json.loads((out / "summary.json").read_text())
    (entry,) = doc["profiles"]
    assert (entry["job_id"], entry["world_size"], entry["ranks"]) == ("12", 2, [0, 1])
    assert entry["traces"]["1"] == str(tmp_path / "runs" / "12" / "traces" / "rank1.json")
    assert all("profile" not in run for run in doc["runs"])  # the tables carry it, not the rows
    html = (out / "report.html").read_text()
    assert f'href="{tmp_path / "runs" / "12" / "traces" / "rank1.json"}"' in html
    assert "Traces (open in Perfetto or HTA)" in html
    md = (out / "report.md").read_text()
    assert "| 0 | aten::mm |" in md
    (comm,) = [line for line in md.splitlines() if line.startswith("| 0 | gloo:all_reduce |")]
    assert comm.endswith("| yes |")  # the collective, labelled


def test_without_a_capture_there_is_no_table(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    missed = replace(make_result("21"), profile={"status": "not captured", "reason": "short"})
    write_log(logs / "slurm-21.out", start_of(missed), missed)
    result = summarize_main(logs, "--no-write")
    assert result.returncode == 0, result.stderr
    assert "Top operations" not in result.stdout
