"""Argument errors are one line naming the option and a one-line hint, exit 2, for scalescope
and for python -m analysis.summarize (scalescope.cli.OneLineParser)."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysis_helpers import summarize_main

from scalescope import cli


def _two_lines(err: str, prog: str) -> str:
    line, hint = err.splitlines()
    assert hint == f"try '{prog} --help'"
    assert line.startswith(f"{prog}: error: ")
    return line


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--plan-work", "2e11tokens"],
            "--plan-work: a number, e.g. 2e11 (the unit goes in --plan-unit), got '2e11tokens'",
        ),
        (
            ["--plan-work", "2e11", "--plan-floor", "70"],
            "--plan-floor: a fraction between 0 and 1 (70% is 0.7), got 70",
        ),
        (["--confidence", "95%"], "--confidence: a fraction between 0 and 1 (70% is 0.7), got 95%"),
        (["--loss-tolerance", "-1"], "--loss-tolerance: a number >= 0 (0.05 is 5%), got -1"),
        (["--acc-tolerance", "nan"], "--acc-tolerance: a number >= 0 (0.05 is 5%), got nan"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_a_summary_argument_error_is_one_line_and_a_hint(
    tmp_path: Path, argv: list[str], said: str
) -> None:
    proc = summarize_main(tmp_path, *argv)
    assert proc.returncode == 2 and proc.stdout == ""
    line = _two_lines(proc.stderr, "python -m analysis.summarize")
    assert line.endswith(said), line


def test_compare_argument_errors_are_one_line_too(tmp_path: Path) -> None:
    proc = summarize_main("compare", tmp_path, tmp_path, "--tolerance", "5")
    assert proc.returncode == 2
    line = _two_lines(proc.stderr, "python -m analysis.summarize compare")
    assert line.endswith("--tolerance: a fraction between 0 and 1 (70% is 0.7), got 5")


def test_scalescope_argument_errors_are_one_line_and_a_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["sweep", "--config", "s.yaml", "--executor", "nowhere"])
    assert caught.value.code == 2
    line = _two_lines(capsys.readouterr().err, "scalescope sweep")
    assert "--executor: invalid choice: 'nowhere'" in line


@pytest.mark.parametrize(
    ("argv", "key"),
    [(["--project", "2,4"], "project_nodes"), (["--plan-work", "2e11"], "plan key")],
)
def test_the_summarys_options_given_to_a_sweep_name_the_sweep_files_key(
    capsys: pytest.CaptureFixture[str], argv: list[str], key: str
) -> None:
    """Not argparse's bare "unrecognized arguments": where the sweep takes them from."""
    assert cli.main(["sweep", "--config", "missing.yaml", *argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"scalescope sweep: error: {argv[0]}: not an option of scalescope sweep")
    assert key in line


def test_a_summary_of_nothing_that_exists_is_one_error_line(tmp_path: Path) -> None:
    """A path that does not exist, and nothing else, is a usage error in one line (no
    warning before it, no summary folder made); beside a path that exists it is a warning
    and the rest is read."""
    missing = tmp_path / "no-such-sweep"
    proc = summarize_main(missing)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"python -m analysis.summarize: error: {missing}: no such file or folder"
    ]
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty").mkdir()
    proc = summarize_main(tmp_path / "empty", missing)
    assert proc.returncode == 1
    assert f"{missing}: no such file or folder" in proc.stderr
    assert "nothing usable in" in proc.stderr


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (
            ValueError("shapes differ\n  at layer 3\n  (traceback follows)"),
            "ValueError: shapes differ",
        ),
        (RuntimeError("  \n"), "RuntimeError: (no message)"),
        (KeyError("rank"), "KeyError: 'rank'"),
    ],
)
def test_an_error_is_described_in_one_line(exc: BaseException, line: str) -> None:
    from scalescope.errors import described

    assert described(exc) == line
