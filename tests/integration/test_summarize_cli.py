"""``python -m analysis.summarize`` as a user runs it: a separate process, its exit status, the
chart process it forks, worker processes reading the files, and what a fresh interpreter loads.

Everything else about the command is tested in this process (tests/unit/analysis/,
through ``analysis_helpers.summarize_main``); these are the few checks that need processes.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
from analysis_helpers import (
    REPO,
    make_result,
    noise,
    run_summarize,
    start_of,
    write_log,
    write_runs,
)
from core_helpers import default_sigint

import analysis.read.parse as parse_mod
from analysis.read.parse import parse

WORLDS = {1: (1, 1), 2: (1, 2)}


def _sweep(folder: Path, times: dict[int, list[float]]) -> Path:
    for world, values in times.items():
        for i, t in enumerate(values):
            r = make_result(f"{world}{i:02d}", world=WORLDS[world], train_time_s=t)
            write_log(folder / f"slurm-{world}{i:02d}.out", start_of(r), r)
    return folder


def test_import_and_summarize_never_load_the_training_stack(tmp_path: Path) -> None:
    _sweep(tmp_path / "in", {1: [10.0, 11.0], 2: [6.0, 6.5]})
    code = f"""
import sys, analysis, analysis.summarize, analysis.present.charts.charts
rc = analysis.summarize.main([{str(tmp_path / "in")!r}, '--out', {str(tmp_path / "out")!r},
                              '--format', 'json'])
heavy = sorted(m for m in sys.modules
               if m.split('.')[0] in {{'torch', 'lightning', 'pytorch_lightning', 'submitit',
                                      'comet_ml'}})
print('HEAVY', heavy, rc, file=sys.stderr)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert "HEAVY [] 0" in proc.stderr, proc.stderr


def test_an_empty_folder_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    proc = run_summarize(tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"python -m analysis.summarize: nothing usable in {tmp_path}: ")
    assert "looked for ':::SCALESCOPE'" in line and "result.json" in line
    assert list(tmp_path.iterdir()) == []


def test_charts_from_the_chart_process_equal_those_drawn_in_process(tmp_path: Path) -> None:
    """The default forks a process for the charts; --jobs 1 draws them here: the summary
    folders are byte for byte the same."""
    inputs = "tests/fixtures/logs"
    forked = run_summarize(inputs, "--out", tmp_path / "forked", "--format", "json")
    here = run_summarize(inputs, "--out", tmp_path / "here", "--format", "json", "--jobs", "1")
    assert forked.returncode == here.returncode == 0, forked.stderr + here.stderr
    assert forked.stdout == here.stdout
    files = sorted(p.relative_to(tmp_path / "forked") for p in (tmp_path / "forked").rglob("*"))
    assert files == sorted(p.relative_to(tmp_path / "here") for p in (tmp_path / "here").rglob("*"))
    charts = [f for f in files if f.parent == Path("charts")]
    assert len(charts) == 12 and Path("charts/speedup.png") in charts
    for f in files:
        a, b = tmp_path / "forked" / f, tmp_path / "here" / f
        assert a.is_dir() == b.is_dir(), f
        if not a.is_dir():
            # Same inputs, same bytes: no timestamps, no random SVG ids.
            assert a.read_bytes() == b.read_bytes(), f


def test_check_exits_1_on_a_regression(tmp_path: Path) -> None:
    good = _sweep(tmp_path / "good", {1: [100.0, 101.0, 99.0], 2: [52.0, 51.0, 53.0]})
    bad = _sweep(tmp_path / "bad", {1: [100.0, 101.0, 99.0], 2: [70.0, 71.0, 69.0]})
    ref = tmp_path / "ref.yaml"
    wrote = run_summarize("check", good, "--write-reference", ref)
    assert wrote.returncode == 0, wrote.stderr
    proc = run_summarize("check", bad, "--reference", ref)
    assert proc.returncode == 1, proc.stderr
    assert "REGRESSION" in proc.stdout
    assert proc.stderr.endswith("check: 3 check(s): 2 regression(s), 0 missing\n")


def test_reading_in_worker_processes_agrees_with_reading_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pools: list[int | None] = []

    class Pool(ProcessPoolExecutor):
        def __init__(self, max_workers: int | None = None, **kw: object) -> None:
            pools.append(max_workers)
            super().__init__(max_workers, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(parse_mod, "ProcessPoolExecutor", Pool)
    for i in range(80):  # enough files for worker processes (64 or more)
        r = make_result(str(1000 + i), train_time_s=50.0 + i)
        write_log(tmp_path / f"slurm-{1000 + i}.out", *noise(3), start_of(r), r)
    write_log(
        tmp_path / "slurm-2000.out",
        start_of(make_result("2000")),
        "srun: error: n1: task 0: Exited with exit code 3",
    )
    serial = parse([tmp_path], jobs=1)
    assert pools == []
    parallel = parse([tmp_path], jobs=2)
    assert pools == [2]  # the files were read by two worker processes
    assert [r.record for r in serial.runs] == [r.record for r in parallel.runs]
    assert serial.failures == parallel.failures and len(serial.runs) == 80
    assert [f.diagnosis.code for f in parallel.failures] == ["exit_code"]


def test_a_sweep_summarises_its_folder_through_a_typed_call(tmp_path: Path) -> None:
    """summarize_sweep(folder, project_nodes=...) is what the sweep calls (no argv text round
    trip): the same summary as the command line with --project, written beside the logs."""
    import shutil

    from analysis.summarize import summarize_sweep

    folder = shutil.copytree(REPO / "tests" / "fixtures" / "projection", tmp_path / "sweep")
    assert summarize_sweep(folder, project_nodes=(2, 4)) == 0
    doc = (folder / "summary" / "summary.json").read_text()
    assert '"projection"' in doc and '"nodes": 4' in doc


def test_a_sweep_files_plan_reaches_its_summary(tmp_path: Path) -> None:
    """A sweep file's ``plan:`` travels as summarize_sweep's ``plan`` and gives the same plan
    as --plan-work on the command line."""
    import json
    import shutil

    from analysis.summarize import summarize_sweep

    folder = shutil.copytree(REPO / "tests" / "fixtures" / "quickstart", tmp_path / "sweep")
    plan = {"work": 2e11, "unit": "tokens", "floor": 0.8, "charge_factor": 1.5}
    assert summarize_sweep(folder, project_nodes=(2,), plan=plan) == 0
    doc = json.loads((folder / "summary" / "summary.json").read_text())
    # whole nodes are charged unless the file says otherwise
    assert doc["plan_request"] == {**plan, "price_per_gpu_hour": None, "charge": "node"}
    assert (folder / "summary" / "plan.csv").exists()
    rows = {(r["nodes"], r["devices_per_node"]): r for r in doc["plan"]}
    assert rows[(2, 2)]["charged_hours"] == 1.5 * rows[(2, 2)]["node_hours"]
    bad = summarize_sweep(folder, plan={"work": 2e11, "unit": "images"})
    assert bad == 2


def test_a_sweeps_summary_names_the_sweep_files_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sweep's own summary speaks of ``plan.unit`` in the sweep file, never of a
    ``--plan-unit`` the user did not type: a bad value, and a unit the records do not count
    (spiral records made before the sweep refused it up front)."""
    import shutil

    from analysis.summarize import summarize_sweep

    folder = shutil.copytree(REPO / "tests" / "fixtures" / "quickstart", tmp_path / "sweep")
    bad = {"work": 2e11, "unit": "images"}
    assert summarize_sweep(folder, plan=bad, sweep_file="s.yaml") == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("error: s.yaml: plan.unit: one of samples, tokens, steps, got 'images'")
    assert summarize_sweep(folder, plan={"work": 2e11, "floor": 70}, sweep_file="s.yaml") == 2
    assert "s.yaml: plan.floor: " in capsys.readouterr().err
    spiral = write_runs(tmp_path / "spiral", {1: [10.0, 10.2], 2: [5.5, 5.6]})
    assert summarize_sweep(spiral, plan={"work": 1e9, "unit": "tokens"}, sweep_file="s.yaml") == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "s.yaml: plan.unit: tokens, but the records count samples" in line
    assert "--plan" not in line and not (spiral / "summary").exists()


def test_ctrl_c_while_the_commands_load_is_one_line(tmp_path: Path) -> None:
    """A Ctrl-C in the first second, while pandas and the rest load, is answered as one later
    is: ``interrupted`` on one line and exit 130, no traceback. The load is held open (a
    ``sitecustomize`` that waits inside the import of the commands and says so in a file),
    so the signal lands inside it every time."""
    import os
    import signal
    import time

    hook = tmp_path / "hook"
    hook.mkdir()
    waiting = tmp_path / "waiting"
    (hook / "sitecustomize.py").write_text(
        f"""
import importlib.abc, sys, time

class Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "analysis.commands.main":
            open({str(waiting)!r}, "w").close()
            time.sleep(60)
        return None

sys.meta_path.insert(0, Hold())
"""
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), str(REPO)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "analysis.summarize", str(tmp_path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,  # as from a terminal, however the suite was started
    )
    deadline = time.monotonic() + 120
    while not waiting.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert waiting.exists(), proc.communicate(timeout=10)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.splitlines() == ["python -m analysis.summarize: interrupted"], err
    assert out == ""
