"""Where a job's record lines go: stdout wherever it is a log (a file, a pipe: what the
parser reads in every sbatch, submitit and local log), the run directory's records.log where
stdout is an interactive terminal."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from record_factory import identity

from analysis.read.frame import load_all
from scalescope import record
from scalescope.job.run.record_build import PRINT_RECORDS_ENV, RECORDS_LOG, emit

LINE = record.encode(record.StartEvent(identity("1000")))


def test_a_stdout_that_is_not_a_terminal_carries_the_records(tmp_path: Path) -> None:
    text = io.StringIO()
    emit(LINE, tmp_path, text)
    assert text.getvalue() == LINE + "\n"
    with open(tmp_path / "job.out", "w+", encoding="utf-8") as log:  # a job's log file
        emit(LINE, tmp_path, log)
        log.seek(0)
        assert log.read() == LINE + "\n"
    assert not (tmp_path / RECORDS_LOG).exists()


def _terminal() -> tuple[int, io.TextIOWrapper]:
    main, follower = os.openpty()
    return main, open(follower, "w", encoding="utf-8", closefd=True)


def test_a_terminal_gets_no_record_and_the_run_directory_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PRINT_RECORDS_ENV, raising=False)
    main, tty = _terminal()
    try:
        assert tty.isatty()
        emit(LINE, tmp_path, tty)
        tty.flush()
        os.set_blocking(main, False)
        with pytest.raises(BlockingIOError):
            os.read(main, 1 << 16)  # nothing reached the terminal
    finally:
        tty.close()
        os.close(main)
    assert (tmp_path / RECORDS_LOG).read_text(encoding="utf-8") == LINE + "\n"
    # and the analysis reads it there
    (start,) = load_all(tmp_path, jobs=1).failures.itertuples()
    assert start.job_id == "1000"


def test_the_records_can_be_asked_for_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PRINT_RECORDS_ENV, "1")
    main, tty = _terminal()
    try:
        emit(LINE, tmp_path, tty)
        tty.flush()
        assert LINE.encode()[:40] in os.read(main, 1 << 16)
    finally:
        tty.close()
        os.close(main)
    assert not (tmp_path / RECORDS_LOG).exists()
