"""Runs slowed by other programs on their cores (analysis.read.cpu_load): read from the
records' ``host_load``, said in the summary's "Read this first" and runs table, through its
main in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import record_factory
from analysis_helpers import start_of, summarize_main, write_log

from analysis.present.display import MISSING
from analysis.read.cpu_load import (
    MIN_WALL_S,
    OTHER_SHARE,
    WAIT_SHARE,
    cpu_load_notes,
    slowed,
)
from analysis.read.frame import load
from analysis.read.overlap import node_overlaps
from scalescope.record import ResultRecord, busiest_machine, other_cpu_share

T0 = 1_700_000_000.0


def _machine(
    nodes: list[str],
    cores: int,
    other_cores: float,
    wall: float = 20.0,
    wait_share: float | None = 0.5,
) -> dict[str, Any]:
    own = cores * wall * 0.5
    return {
        "nodes": nodes,
        "cores": cores,
        "wall_s": wall,
        "busy_cpu_s": own + other_cores * wall,
        "own_cpu_s": own,
        "other_cpu_s": other_cores * wall,
        "own_wait_s": None if wait_share is None else wait_share * own,
    }


def _run(
    job: str,
    host_load: list[dict[str, Any]] | None,
    start: float = 0.0,
    world: tuple[int, int] = (1, 2),
    nodes: tuple[str, ...] = ("vm",),
) -> ResultRecord:
    return record_factory.record(
        record_factory.identity(job, world=world),
        epoch_times_s=[4.0, 3.0, 3.0],
        setup_time_s=5.0,
        node_names=[n for n in nodes for _ in range(world[1])],
        train_start_unix=T0 + start,
        train_end_unix=T0 + start + 20.0,
        host_load=host_load,
    )


def _write(folder: Path, *records: ResultRecord) -> Path:
    for r in records:
        write_log(folder / f"slurm-{r.identity.job_id}.out", start_of(r), r)
    return folder


def test_the_busiest_machine_its_share_and_its_wait() -> None:
    machines = [_machine(["a"], 8, 0.4), _machine(["b"], 2, 0.5, wait_share=0.3)]
    b = busiest_machine(machines)
    assert b is not None and b["nodes"] == ["b"] and b["share"] == pytest.approx(0.25)
    assert b["wait_share"] == pytest.approx(0.3)
    assert other_cpu_share(machines) == pytest.approx(0.25)
    assert other_cpu_share(None) is None and other_cpu_share([{"cores": 0}]) is None


@pytest.mark.parametrize(
    ("machine", "expected"),
    [
        (_machine(["a"], 2, 2 * OTHER_SHARE), True),
        (_machine(["a"], 2, 2 * OTHER_SHARE - 0.01), False),  # a little load
        (_machine(["a"], 2, 1.0, wait_share=WAIT_SHARE - 0.01), False),  # on cores it left idle
        (_machine(["a"], 2, 1.0, wait_share=None), True),  # no wait counted: the share alone
        (_machine(["a"], 2, 1.0, wall=MIN_WALL_S - 0.1), False),  # too short to judge
    ],
)
def test_slowed_needs_the_load_the_wait_and_a_long_enough_interval(
    machine: dict[str, Any], expected: bool
) -> None:
    assert slowed([machine]) is expected
    assert slowed(None) is None


def test_the_summary_names_runs_other_programs_slowed(tmp_path: Path) -> None:
    """Runs an hour apart (no two timed together): 31 had 1.3 of its 2 cores taken by other
    programs, 32 0.5 of 4 on one of its two machines, 33 under the threshold, 34 an older
    record without the counters, 37 much load on cores it left idle (its threads did not
    wait)."""
    folder = _write(
        tmp_path / "logs",
        _run("31", [_machine(["vm"], 2, 1.3)]),
        _run(
            "32",
            [_machine(["n1"], 4, 0.1), _machine(["n2"], 4, 0.5, wait_share=0.25)],
            start=3600.0,
            world=(2, 2),
            nodes=("n1", "n2"),
        ),
        _run("33", [_machine(["vm"], 2, 2 * (OTHER_SHARE - 0.01))], start=7200.0),
        _run("34", None, start=10800.0),
        _run("37", [_machine(["vm"], 2, 1.0, wait_share=0.01)], start=14400.0),
    )
    proc = summarize_main(folder, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("## Read this first", 1)[1]
    (line,) = [x for x in notes.splitlines() if "slowed by other programs" in x]
    assert line.startswith("- 2 run(s) were slowed by other programs on their cores")
    assert (
        "job 31 (1x2) on vm: 1.3 of 2 core(s) (65%), its threads waiting for a core 50% as "
        "long as they ran; job 32 (2x2) on n2: 0.5 of 4 core(s) (12%), its threads waiting "
        "for a core 25% as long as they ran."
    ) in line
    assert "job 33" not in line and "job 34" not in line and "job 37" not in line
    assert "`exclusive: true`" in line
    header = next(x for x in proc.stdout.splitlines() if x.startswith("| Job ID"))
    column = [c.strip() for c in header.split("|")].index("Other load")
    cells = {
        c[1].strip(): c[column].strip()
        for x in proc.stdout.splitlines()
        if x.startswith("| 3") and len(c := x.split("|")) > column
    }
    assert cells == {"31": "65.0%", "32": "12.5%", "33": "9.0%", "34": MISSING, "37": "50.0%"}
    assert "*Other load: the share of the run's cores other programs kept busy" in proc.stdout
    runs = load(folder).set_index("job_id")
    assert runs.loc["31", "other_cpu_share"] == pytest.approx(0.65)
    assert runs.loc["32", "cpu_wait_share"] == pytest.approx(0.25)
    assert runs["cpu_slowed"].tolist() == [True, True, False, pd.NA, False]


def test_no_run_slowed_no_column_and_no_note(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "logs",
        _run("35", [_machine(["vm"], 2, 0.1)]),
        _run("36", None, start=3600.0),
        _run("38", [_machine(["vm"], 2, 1.5, wait_share=0.0)], start=7200.0),
    )
    proc = summarize_main(folder, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    assert "Other load" not in proc.stdout and "other programs" not in proc.stdout


def test_a_run_timed_beside_another_job_says_so(tmp_path: Path) -> None:
    """Two runs timed together on one node each see the other's load: the shared-node note
    names the job, and this one points there."""
    folder = _write(
        tmp_path / "logs",
        _run("41", [_machine(["vm"], 2, 1.0)]),
        _run("42", [_machine(["vm"], 2, 1.0)], start=2.0),
        _run("43", [_machine(["vm"], 2, 1.0)], start=3600.0),
    )
    runs = load(folder)
    (note,) = cpu_load_notes(runs, node_overlaps(runs))
    assert note.startswith("3 run(s)")
    assert "job 41 (1x2) on vm: 1.0 of 2 core(s) (50%), its threads waiting" in note
    assert note.count("(also timed beside another job: above)") == 2
    job43 = "job 43 (1x2) on vm: 1.0 of 2 core(s) (50%), its threads waiting for a core 50% as"
    assert f"{job43} long as they ran. Their ranks" in note  # the last named, beside none
    assert cpu_load_notes(runs.iloc[:0], node_overlaps(runs.iloc[:0])) == []


def test_past_the_limit_the_rest_are_counted(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "logs",
        *(
            _run(str(50 + i), [_machine(["vm"], 2, 0.3 + 0.1 * i)], start=3600.0 * i)
            for i in range(4)
        ),
    )
    runs = load(folder)
    (note,) = cpu_load_notes(runs, node_overlaps(runs), limit=2)
    assert note.startswith("4 run(s)")
    assert note.index("job 53") < note.index("job 52")  # the busiest first
    assert "job 51" not in note and "and 2 more" in note
