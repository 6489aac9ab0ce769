"""The ``scalescope`` command line (scalescope.cli): errors become one line on stderr."""

from __future__ import annotations

import pytest

from scalescope import cli
from scalescope.errors import SameOnEveryRankError


def test_an_error_every_rank_finds_is_printed_by_rank_zero_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import scalescope.job.run.entry as entry

    for rank, printed in ((1, ""), (0, "scalescope train: error: the stream has no end\n")):

        def refuse(args: object, rank: int = rank) -> int:
            raise SameOnEveryRankError("the stream has no end", rank=rank)

        monkeypatch.setattr(entry, "run", refuse)
        assert cli.main(["train"]) == 2
        assert capsys.readouterr().err == printed
