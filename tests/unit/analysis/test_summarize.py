"""The summarize command, in this process: bad input, exit codes, atomic output.

The compare command: test_compare.py. Import hygiene and the command as a separate process:
tests/integration/test_summarize_cli.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from analysis_helpers import (
    in_process_argv,
    make_result,
    start_of,
    summarize_main,
    write_log,
    write_runs,
)

import analysis.summarize as cli
from analysis.commands.summarize_args import build_parser
from analysis.present.charts import chart_files
from analysis.present.report import summary_files


def test_empty_folder_exits_1_with_what_was_looked_for(tmp_path: Path) -> None:
    proc = summarize_main(tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        f"python -m analysis.summarize: nothing usable in {tmp_path}: no result record and no "
        "failed job; looked for ':::SCALESCOPE' event lines"
    )
    assert "result.json" in line
    assert not (tmp_path / "summary").exists()  # nothing usable: nothing written


def test_only_bad_files_warn_by_name_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "a.out").write_bytes(b"\x00\xff" * 100)
    (tmp_path / "slurm-3.out").write_text(":::SCALESCOPE {not json\n")
    proc = summarize_main(tmp_path, "--no-write")
    assert proc.returncode == 1
    bad_binary, bad_line, nothing = proc.stderr.splitlines()
    assert "a.out: binary file, skipped" in bad_binary
    assert "slurm-3.out: line 1: event line is not valid JSON" in bad_line
    assert f"nothing usable in {tmp_path}" in nothing


def test_failures_alone_are_usable(tmp_path: Path) -> None:
    write_log(
        tmp_path / "slurm-8.out",
        start_of(make_result("8")),
        "slurmstepd: error: *** JOB 8 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***",
    )
    proc = summarize_main(tmp_path, "--no-write", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    assert "| 8 |" in proc.stdout and "time limit" in proc.stdout


def test_terminal_table_format(tmp_path: Path) -> None:
    write_runs(tmp_path, {1: [10.0, 11.0], 2: [6.0, 6.5]})
    proc = summarize_main(tmp_path, "--no-write", "--wide")
    assert proc.returncode == 0, proc.stderr
    for text in ("Benchmark results", "Speedup analysis", "Karp-Flatt", "Devices"):
        assert text in proc.stdout


@pytest.mark.parametrize("width", [80, 120])
def test_the_default_terminal_view_fits_its_width(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Headline tables, failed jobs, notes: no line wider than the terminal, and every
    scale's row on one line with its whole speedup and efficiency (nothing wrapped)."""
    import json

    from analysis import summarize

    monkeypatch.setenv("COLUMNS", str(width))
    logs = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
    assert summarize.main([str(logs), "--no-write"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= width, out
    assert "Benchmark results" not in out and "--wide prints every table" in out
    assert "Failed or incomplete jobs (15)" in out  # the fixtures' failed jobs, each a line
    assert sum(line.startswith("  • 50") for line in out.splitlines()) >= 10
    assert summarize.main([str(logs), "--no-write", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    lines = out.splitlines()
    for r in doc["scaling"]:
        shape = f"{r['nodes']}x{r['devices_per_node']}"
        speed = "baseline" if r["is_baseline"] else f"{r['speedup']:.2f}x"
        assert any(line.startswith(shape) and speed in line for line in lines), (shape, out)
    # --max-rows caps the failed jobs' lines, and says how many it left out
    assert summarize.main([str(logs), "--no-write", "--max-rows", "3"]) == 0
    capped = capsys.readouterr().out
    assert sum(line.startswith("  • ") and "): " in line for line in capped.splitlines()) >= 3
    assert "… and 12 more (failures.csv, report.md; --max-rows 0 shows all)" in capped


def test_csv_format_prints_machine_columns(tmp_path: Path) -> None:
    write_runs(tmp_path, {1: [10.0], 2: [6.0]})
    proc = summarize_main(tmp_path, "--no-write", "--format", "csv", "--table", "scaling")
    header = proc.stdout.splitlines()[0].split(",")
    assert {"speedup", "parallel_efficiency", "karp_flatt", "job_time_speedup"} <= set(header)


def test_default_output_inside_the_input_is_not_read_back(tmp_path: Path) -> None:
    write_runs(tmp_path, {1: [10.0, 11.0], 2: [6.0, 6.5]})
    first = summarize_main(tmp_path, "--format", "json")
    second = summarize_main(tmp_path, "--format", "json")
    assert first.returncode == second.returncode == 0, second.stderr
    assert (tmp_path / "summary" / "report.md").exists()
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["files_read"] == b["files_read"] == 4 and a == b


def test_refuses_to_replace_a_folder_that_is_not_a_summary(tmp_path: Path) -> None:
    write_runs(tmp_path / "in", {1: [10.0]})
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "slurm-1.out").write_text("my logs")
    proc = summarize_main(tmp_path / "in", "--out", precious)
    assert proc.returncode == 2 and "refusing to replace" in proc.stderr
    assert (precious / "slurm-1.out").read_text() == "my logs"


def test_output_folder_is_replaced_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_runs(tmp_path / "in", {1: [10.0, 11.0], 2: [6.0, 6.5]})
    out = tmp_path / "out"
    args = (tmp_path / "in", "--out", out, "--format", "json")
    assert summarize_main(*args).returncode == 0
    (out / "old-only.txt").write_text("from the previous summary")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))

    def broken(*_args: object, **_kw: object) -> None:
        raise OSError(28, "No space left on device")

    # a failure while drawing the charts (first) or writing report.md (after the CSV tables
    # and the charts) leaves the old folder exactly as it was
    for module, step in ((chart_files, "save_charts"), (summary_files, "report_markdown")):
        with monkeypatch.context() as m:
            m.setattr(module, step, broken)
            failed = summarize_main(*args)
        assert failed.returncode == 2, (step, failed.stderr)
        assert "cannot write the summary: [Errno 28] No space left on device" in failed.stderr
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == before, step
        # no temp left over; the hidden lock that serialises concurrent swaps stays
        assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "in", "out"]

    # a success replaces it whole: the old-only file is gone, everything new is there
    write_runs(tmp_path / "in", {4: [3.5, 3.6]})
    assert summarize_main(*args).returncode == 0
    assert not (out / "old-only.txt").exists()
    runs = pd.read_csv(out / "runs.csv", dtype={"job_id": str})
    assert sorted(runs["job_id"]) == ["100", "101", "200", "201", "400", "401"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "in", "out"]


def test_jobs_1_reads_and_draws_the_charts_in_this_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Enough files for worker processes, and charts to draw: with --jobs 1 neither starts
    one (the unit tier's guard fails the test on any process start)."""
    write_runs(tmp_path / "in", {1: [10.0 + i / 10 for i in range(33)], 2: [6.0] * 33})
    out = tmp_path / "out"
    args = [str(tmp_path / "in"), "--out", str(out), "--format", "json", "--jobs", "1"]
    assert cli.main(args) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["files_read"] == 66
    charts = sorted(p.name for p in (out / "charts").iterdir())
    assert charts == sorted(f"{n}.{e}" for n in chart_files.CHART_TITLES for e in ("png", "svg"))
    assert (out / "charts" / "speedup.png").read_bytes()[:4] == b"\x89PNG"
    assert "1 = everything in this process" in build_parser().format_help()


# The least each command accepts; a new command must be added here (and take --jobs).
MINIMAL_ARGS: dict[str | None, list[str]] = {
    None: ["PATH"],
    "compare": ["A", "B"],
    "check": ["PATH", "--reference", "ref.yaml"],
    "export": ["PATH", "--format", "bencher"],
}


def test_in_process_runs_give_every_command_jobs_1() -> None:
    assert set(MINIMAL_ARGS) - {None} == set(cli.COMMANDS)
    for command, rest in MINIMAL_ARGS.items():
        argv = in_process_argv([command, *rest] if command else rest)
        if command is None:
            args = build_parser().parse_args(argv)
        else:
            assert argv[0] == command
            args = cli.COMMANDS[command][0]().parse_args(argv[1:])
        assert args.jobs == 1, command


def test_bad_baseline_is_a_usage_error(tmp_path: Path) -> None:
    write_runs(tmp_path, {1: [10.0]})
    proc = summarize_main(tmp_path, "--no-write", "--baseline", "lots")
    assert proc.returncode == 2 and "--baseline" in proc.stderr


def test_terminal_shows_names_with_brackets_verbatim() -> None:
    proc = summarize_main("tests/fixtures/logs", "--no-write")
    assert proc.returncode == 0, proc.stderr
    assert "spiral-gpu [spiral] · strong · bf16-mixed" in proc.stdout


def test_per_job_tables_stop_at_max_rows(tmp_path: Path) -> None:
    write_runs(tmp_path, {1: [10.0, 11.0, 12.0], 2: [6.0, 6.5, 6.1]})
    proc = summarize_main(tmp_path, "--no-write", "--format", "markdown", "--max-rows", "4")
    runs_table = proc.stdout.split("## Speedup analysis")[0]
    assert runs_table.count("| spiral · strong · fp32 |") == 4
    assert "2 more row(s) not shown: every one is in runs.csv" in runs_table
    everything = summarize_main(tmp_path, "--no-write", "--format", "markdown", "--max-rows", "0")
    assert everything.stdout.split("## Speedup analysis")[0].count("| spiral · strong") == 6


def test_a_slowdown_prints_no_serial_fraction_and_says_why(tmp_path: Path) -> None:
    """1 process 0.04 s, 2 processes 0.13 s: a Karp-Flatt 'serial fraction' would be 5.5."""
    write_runs(tmp_path / "in", {1: [0.040, 0.041, 0.039], 2: [0.13, 0.12, 0.14]})
    proc = summarize_main(tmp_path / "in", "--out", tmp_path / "out", "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if "| Karp-Flatt e |" in line)
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 2 |"))
    cells = dict(zip(header.split(" | "), row.split(" | "), strict=True))
    assert cells["Karp-Flatt e"] == "— (no speedup (S <= 1): a serial fraction is undefined)"
    amdahl = proc.stdout.split("## Amdahl fit")[1].split("##")[0]
    assert "no speedup" in amdahl and "x (4 devices)" not in amdahl
    assert "no serial fraction to report" in proc.stdout  # the notes say it too
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "no serial fraction to report" in report
    assert "— (no speedup (S <= 1): a serial fraction is undefined)" in report
    doc = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    row = next(r for r in doc["scaling"] if r["world_size"] == 2)
    assert row["karp_flatt"] is None and row["karp_flatt_note"].startswith("no speedup")
    assert doc["amdahl"][0]["serial_fraction"] is None
    assert doc["amdahl"][0]["fit_note"].startswith("no speedup")
    csv = pd.read_csv(tmp_path / "out" / "scaling.csv")
    assert csv["karp_flatt"].isna().all() and "karp_flatt_note" in csv


def test_the_summary_fits_the_terminal_width_it_is_given(tmp_path: Path) -> None:
    """With COLUMNS=120 and output to a file, no line of the fixture sweep's summary is
    wider than 120 columns, on stdout or stderr: the notes wrap under their bullet (counted
    in characters: the bullet and the series' dots are one column each, though more than one
    byte), and the report's path and the output folder (as long as the folder's name) stand
    on lines of their own."""
    import shutil

    from analysis_helpers import FIXTURES

    logs = shutil.copytree(FIXTURES / "sweep", tmp_path / ("a-rather-long-folder-name-" * 3))
    proc = summarize_main(logs, "--out", logs / "summary", env={"COLUMNS": "120"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    wide = [line for line in lines if len(line) > 120 and "report.html" not in line]
    assert not wide, wide
    folder = f"  {logs / 'summary'}"
    assert len(folder) > 120 and folder in proc.stderr.splitlines()
    assert [line for line in proc.stderr.splitlines() if len(line) > 120] == [folder]
    notes = lines[
        lines.index("Read this first") + 1 : lines.index(f"  {logs / 'summary' / 'report.html'}")
    ]
    assert notes[0].startswith("  • ")
    assert any(n.startswith("    ") for n in notes)  # a wrapped note's continuation
    at = lines.index(f"  {logs / 'summary' / 'report.html'}")
    assert lines[at - 1].startswith("Every table, chart and paragraph")


def test_notes_piped_without_a_width_stand_one_to_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redirected to a file with no COLUMNS, no terminal says how wide a line may be: each
    note stands on one line (a pager or an editor wraps it at its own width, grep finds it
    whole), not cut at an arbitrary 160 columns in the middle of a sentence."""
    import contextlib

    from analysis_helpers import FIXTURES

    monkeypatch.delenv("COLUMNS", raising=False)
    out = tmp_path / "summary.txt"
    with out.open("w", encoding="utf-8") as fh, contextlib.redirect_stdout(fh):
        assert cli.main([str(FIXTURES / "sweep"), "--no-write", "--jobs", "1"]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    start = lines.index("Read this first") + 1
    end = next(i for i, line in enumerate(lines) if i > start and not line.startswith("  "))
    notes = lines[start:end]
    assert len(notes) >= 3 and all(n.startswith("  • ") for n in notes), notes
    assert max(len(n) for n in notes) > 160  # a note that the old width cut in two


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--plan-work", "1e9", "--plan-unit", "tokens"],
            "--plan-unit: tokens, but the records count samples",
        ),
        (["--plan-work", "0"], "--plan-work: must be a number > 0"),
        (["--plan-work", "-2e11", "--plan-unit", "tokens"], "--plan-work: must be a number > 0"),
        (["--plan-price", "2.5"], "--plan-price needs --plan-work"),
        (["--plan-charge-factor", "1.5"], "--plan-charge-factor needs --plan-work"),
    ],
)
def test_a_bad_plan_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, argv: list[str], said: str
) -> None:
    """A unit the (spiral) records do not count, a work <= 0, a rate without a work."""
    write_runs(tmp_path / "logs", {1: [10.0, 10.2], 2: [5.5, 5.6]})
    out = tmp_path / "summary"
    proc = summarize_main(tmp_path / "logs", "--out", out, *argv)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("python -m analysis.summarize: error: ") and said in line, line
    assert not out.exists()


def test_the_plan_is_written_and_without_it_nothing_changes(tmp_path: Path) -> None:
    """--plan-work adds plan.csv, summary.json's plan and the scaling study; the same summary
    without it has none of them."""
    logs = write_runs(tmp_path / "logs", {1: [10.0, 10.2], 2: [5.5, 5.6]})
    proc = summarize_main(
        logs,
        "--out",
        tmp_path / "a",
        "--plan-work",
        "4000",
        "--plan-unit",
        "steps",
        "--plan-price",
        "2",
    )
    assert proc.returncode == 0, proc.stderr
    plan = pd.read_csv(tmp_path / "a" / "plan.csv")
    # steps x the global batch (256) samples at each scale
    assert plan["work_samples"].tolist() == [4000 * 256] * 2
    # a node is charged whole (the default): as the 2 devices a scale here uses on it, at 2 each
    assert plan["nodes"].tolist() == [1, 1] and plan["devices_per_node"].tolist() == [1, 2]
    assert (plan["cost"] == plan["node_hours"] * 2 * 2).all()
    doc = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert doc["plan_request"]["unit"] == "steps" and len(doc["plan"]) == 2
    assert "## Scaling study" in (tmp_path / "a" / "report.md").read_text()
    assert "Training 4e+03 steps" in proc.stdout
    proc = summarize_main(logs, "--out", tmp_path / "b")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "b" / "plan.csv").exists()
    doc = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert not {"plan", "plan_request", "plan_study"} & set(doc)
    assert "Scaling study" not in (tmp_path / "b" / "report.md").read_text()


def test_a_reader_that_closes_the_pipe_still_gets_the_summary_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``summarize X --out Y | head -1``: the terminal's summary comes first, and its reader
    stops after one line. The broken pipe ends the printing, never the run: the summary
    folder is written and the exit status is 0."""
    import os
    import sys

    write_runs(tmp_path / "logs", {1: [10.0, 11.0], 2: [6.0, 6.5]})
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone: every write raises BrokenPipeError
    gone = os.fdopen(write_end, "w", buffering=1, encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", gone)
    try:
        code = cli.main(in_process_argv([str(tmp_path / "logs"), "--out", str(tmp_path / "s")]))
    finally:
        monkeypatch.undo()
        gone.close()
    assert code == 0
    assert (tmp_path / "s" / "summary.json").is_file()
    assert (tmp_path / "s" / "report.md").is_file()
