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


# --- the start line's batch ---------------------------------------------------------------------


class _Module:
    pass


class _Data:
    pass


def _resolved(passed: bool) -> object:
    from scalescope.workloads.user_import import Resolved

    return Resolved(_Module, {}, _Data, {"batch_size": 32} if passed else {})


def test_the_start_line_gives_the_batch_passed() -> None:
    from scalescope.config import Resolved
    from scalescope.job.run.record_build import batch_words

    words = batch_words(Resolved(32, 64, 1), "strong", _resolved(passed=True))
    assert words == "batch 32/device 64 global (strong scaling)"
    built_in = batch_words(Resolved(32, 64, 4), "strong", None)
    assert built_in == "batch 32/device 64 global (strong scaling) in 4 micro-batches of 8"


def test_the_start_line_names_no_batch_a_module_was_not_given() -> None:
    # the data module takes no batch_size: its loader yields its own (32, say), not 64
    from scalescope.config import Resolved
    from scalescope.job.run.record_build import batch_words

    words = batch_words(Resolved(64, 64, 1), "strong", _resolved(passed=False))
    assert "64/device" not in words
    assert words == (
        "batch: the loader's own, measured as it runs (_Data takes no batch_size, so "
        "trainer.batch_size=64 is not passed; strong scaling)"
    )
