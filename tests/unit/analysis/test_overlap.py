"""Runs timed while another job ran on their node (analysis.read.overlap): found from the
records' timed-interval bounds, start-up times and node names, said in the summary's "Read
this first" and runs table, and by compare and check, through their main in this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import record_factory
from analysis_helpers import start_of, summarize_main, write_log

from analysis.read.frame import load
from analysis.read.overlap import node_overlaps, run_cells
from scalescope.record import ResultRecord

T0 = 1_700_000_000.0


def _run(
    job: str, world: tuple[int, int], nodes: list[str], start: float | None, end: float | None
) -> ResultRecord:
    """A run on ``nodes`` timed from ``start`` to ``end`` (seconds after T0), its process
    started 5 s before (``setup_time_s``)."""
    ident = record_factory.identity(job, world=world)
    bounds: dict[str, Any] = {}
    if start is not None:
        bounds = {"train_start_unix": T0 + start, "train_end_unix": T0 + end}
    return record_factory.record(
        ident,
        epoch_times_s=[4.0, 3.0, 3.0],
        setup_time_s=5.0,
        node_names=[n for n in nodes for _ in range(world[1])],
        **bounds,
    )


def _write(folder: Path, *records: ResultRecord) -> Path:
    for r in records:
        write_log(folder / f"slurm-{r.identity.job_id}.out", start_of(r), r)
    return folder


def _shared_sweep(folder: Path) -> Path:
    """Job 11 (1x1 on node1) timed from 0 to 30 s; job 12 (2x1 on node1 and node2) started
    at 17.5 s and timed from 22.5 to 60 s. Job 11 was timed 12.5 s beside job 12 (from 17.5
    to 30 s: 42% of its 30 s), job 12 7.5 s beside job 11 (from 22.5 to 30 s: 20% of its
    37.5 s). Job 13 ran at the same time on node3 only, job 14 on node1 after both ended:
    neither shared anything."""
    return _write(
        folder,
        _run("11", (1, 1), ["node1"], 0.0, 30.0),
        _run("12", (2, 1), ["node1", "node2"], 22.5, 60.0),
        _run("13", (1, 1), ["node3"], 0.0, 60.0),
        _run("14", (1, 1), ["node1"], 65.0, 90.0),
    )


def test_the_summary_reports_the_seconds_two_runs_shared_a_node(tmp_path: Path) -> None:
    folder = _shared_sweep(tmp_path / "logs")
    proc = summarize_main(folder, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("## Read this first", 1)[1]
    shared = [line for line in notes.splitlines() if "shared a node" in line]
    assert len(shared) == 1, notes
    assert "2 run(s) shared a node with another job while timed: " in shared[0]
    assert (
        "job 11 (1x1) was timed beside job 12 (2x1) on node1 for 12.5 s (42%); "
        "job 12 (2x1) was timed beside job 11 (1x1) on node1 for 7.5 s (20%)."
    ) in shared[0]
    assert "job 13" not in shared[0] and "job 14" not in shared[0]
    assert "--max-parallel 1" in shared[0]
    rows = {
        cells[1].strip(): cells
        for line in proc.stdout.splitlines()
        if line.startswith("| 1") and len(cells := line.split("|")) > 3
    }
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| Job ID"))
    column = [c.strip() for c in header.split("|")].index("Shared node")
    assert rows["11"][column].strip() == "node1 12.5 s (42%) beside job 12"
    assert rows["12"][column].strip() == "node1 7.5 s (20%) beside job 11"
    assert rows["13"][column].strip() == rows["14"][column].strip() == ""


def test_the_summary_json_lists_the_pair(tmp_path: Path) -> None:
    folder = _shared_sweep(tmp_path / "logs")
    proc = summarize_main(folder, "--no-write", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    first, second = json.loads(proc.stdout)["shared_nodes"]
    assert (first["job"], first["other_job"], first["nodes"]) == ("11", "12", "node1")
    assert (first["overlap_s"], second["overlap_s"]) == (12.5, 7.5)
    assert second["share"] == 0.2


def test_records_without_bounds_are_not_checked(tmp_path: Path) -> None:
    """Older records carry no timed-interval bounds: nothing is guessed from their start."""
    folder = _write(
        tmp_path / "logs",
        _run("11", (1, 1), ["node1"], None, None),
        _run("12", (1, 1), ["node1"], None, None),
    )
    proc = summarize_main(folder, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    assert "shared a node" not in proc.stdout and "Shared node" not in proc.stdout


def test_each_run_counts_the_seconds_another_job_was_there_while_it_was_timed(
    tmp_path: Path,
) -> None:
    folder = _write(
        tmp_path / "logs",
        _run("21", (2, 1), ["node1", "node2"], 0.0, 100.0),  # there from -5 s
        _run("22", (2, 1), ["node1", "node2"], 40.0, 70.0),  # there from 35 s: inside 21
        _run("23", (1, 1), ["node2"], 105.0, 130.0),  # arrives as 21 ends
        _run("24", (1, 1), ["node1"], 104.5, 120.0),  # 0.5 s of 21's 100: under 1%
        _run("25", (1, 1), ["node2"], 125.0, 140.0),  # arrives at 120 s, 23 still timed
    )
    found = node_overlaps(load(folder))
    got = {(r.job, r.other_job): (r.nodes, r.overlap_s) for r in found.itertuples()}
    assert got == {
        ("21", "22"): ("node1,node2", 35.0),
        ("22", "21"): ("node1,node2", 30.0),
        ("23", "25"): ("node2", 10.0),
        ("25", "23"): ("node2", 5.0),
    }
    assert found["job"].tolist() == ["21", "22", "23", "25"]  # the longest first
    assert found["share"].tolist() == [0.35, 1.0, 0.4, 5.0 / 15.0]


def test_a_long_job_is_found_behind_short_ones_that_ended(tmp_path: Path) -> None:
    """A job there from 0 to 200 s, a short one from 10 to 20 s, then a run timed from 50 to
    60 s: the run was timed beside the long job, which arrived before the short one and
    outlasted it."""
    folder = _write(
        tmp_path / "logs",
        _run("31", (1, 1), ["node3"], 5.0, 200.0),
        _run("32", (1, 1), ["node3"], 15.0, 20.0),
        _run("33", (1, 1), ["node3"], 50.0, 60.0),
    )
    found = node_overlaps(load(folder))
    got = {(r.job, r.other_job): r.overlap_s for r in found.itertuples()}
    assert got == {("31", "32"): 10.0, ("32", "31"): 5.0, ("31", "33"): 15.0, ("33", "31"): 10.0}


def test_a_runs_cell_names_three_jobs_and_counts_the_others(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "logs",
        *(_run(str(40 + i), (1, 1), ["node1"], float(i), 100.0) for i in range(5)),
    )
    runs = load(folder)
    cells = run_cells(node_overlaps(runs))
    assert len(cells) == 5
    (first,) = runs.index[runs["job_id"] == "40"]  # timed from 0 to 100 s, the others arrived
    assert cells[first] == (
        "node1 100.0 s (100%) beside job 41; node1 100.0 s (100%) beside job 42; "
        "node1 100.0 s (100%) beside job 43; and 1 other job(s)"
    )


def test_compare_and_check_say_which_side_shared_a_node(tmp_path: Path) -> None:
    shared = _shared_sweep(tmp_path / "shared")
    alone = _write(
        tmp_path / "alone",
        _run("31", (1, 1), ["node1"], 0.0, 30.0),
        _run("32", (2, 1), ["node1", "node2"], 35.0, 60.0),  # its process starts at 30 s
    )
    proc = summarize_main("compare", alone, shared, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "shared a node" in line]
    assert len(notes) == 1 and f"B ({shared})" in notes[0], proc.stderr
    assert "the longest: job 11 (1x1) was timed beside job 12 (2x1) on node1 for 12.5 s" in notes[0]
    doc = json.loads(proc.stdout)
    assert doc["shared_nodes"]["A"] == [] and len(doc["shared_nodes"]["B"]) == 2

    reference = tmp_path / "ref.yaml"
    wrote = summarize_main("check", shared, "--write-reference", reference)
    assert wrote.returncode == 0 and "shared a node" in wrote.stderr
    checked = summarize_main("check", alone, "--reference", reference, "--format", "json")
    assert "shared a node" not in checked.stderr
    checked = summarize_main("check", shared, "--reference", reference, "--format", "json")
    assert "shared a node" in checked.stderr
    assert json.loads(checked.stdout)["shared_nodes"][0]["overlap_s"] == 12.5
