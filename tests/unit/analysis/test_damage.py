"""Logs that a crash damaged (analysis.read.damage): NUL blocks, random bytes, a line of
120 MB, a binary file.

Every intact record in such a file is read; each unreadable region is a problem that says
where it is (bytes and line) and what it holds; text that is merely not UTF-8 is no damage.
"""

from __future__ import annotations

import random
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from analysis_helpers import FIXTURES, make_result, noise, start_of
from hypothesis import given, settings
from hypothesis import strategies as st

import analysis.read.scan as scan_mod
from analysis import load_all
from analysis.read.parse import parse
from scalescope.record import encode

REAL_LOG = FIXTURES / "sweep" / "local-d1-0.out"


def _real_events() -> tuple[bytes, bytes]:
    """The start and result lines a real job printed (see tests/fixtures/logs/README.md)."""
    lines = REAL_LOG.read_bytes().splitlines()
    start = next(ln for ln in lines if b'"event":"start"' in ln)
    result = next(ln for ln in lines if b'"event":"result"' in ln)
    return start, result


def _text(lines: list[str]) -> bytes:
    return "".join(f"{ln}\n" for ln in lines).encode()


def test_nul_blocks_and_random_bytes_skip_only_their_region(tmp_path: Path) -> None:
    start, result = _real_events()
    rng = random.Random(7)
    head = _text(noise(3)) + start + b"\n"  # 7 lines
    nul_a = b"\0" * 4096  # the node crashed: the file grew before its data arrived
    tail_nul, tail_garbage = b"\0" * 65536, rng.randbytes(16384)
    data = head + nul_a + result + b"\n" + tail_nul + tail_garbage + b"\nlast words\n"
    path = tmp_path / "slurm-13013.out"
    path.write_bytes(data)

    runs, failures, problems = load_all(tmp_path, jobs=1)

    assert runs["job_id"].tolist() == ["local-d1-0"]
    assert runs["train_time_s"].notna().all() and failures.empty
    assert [Path(p.file).name for p in problems] == ["slurm-13013.out"] * 2
    first, second = (p.message for p in problems)
    a = len(head)
    assert first == (
        f"bytes {a}-{a + 4095} (line 8): NUL block (4096 bytes), skipped; records around it read"
    )
    b = a + len(nul_a) + len(result) + 1
    assert second.startswith(f"bytes {b}-")
    end = int(second.split("-", 1)[1].split(" ", 1)[0])
    # the region ends with the last unreadable byte of the garbage (printable bytes may follow)
    assert b + 65536 + 16384 - 64 <= end <= b + 65536 + 16384 - 1
    assert "(line 9): undecodable bytes (" in second and "65" in second and "NUL" in second


def test_record_glued_between_garbage_on_one_line_is_read(tmp_path: Path) -> None:
    rng = random.Random(11)
    r = make_result("21")
    line = rng.randbytes(2048) + encode(r).encode() + b"\0" * 8192 + rng.randbytes(512)
    (tmp_path / "slurm-21.out").write_bytes(_text(noise(1)) + line + b"\n")
    result = parse([tmp_path], jobs=1)
    assert [x.record for x in result.runs] == [r]
    before, after = (p.message for p in result.problems)  # the record splits the garbage
    for message in (before, after):
        assert message.endswith("skipped; records around it read")
    assert "(line 3)" in before  # random bytes hold newlines too: later line numbers vary
    first_bad = int(before.split()[1].split("-")[0])
    head = len(_text(noise(1)))
    assert head <= first_bad < head + 64


def test_file_of_only_garbage_is_one_problem(tmp_path: Path) -> None:
    (tmp_path / "core.out").write_bytes(random.Random(3).randbytes(32768))
    (problem,) = parse([tmp_path], jobs=1).problems
    assert problem.message.startswith("binary file, skipped: no record in it; ")
    assert "of 32768 in " in problem.message


def test_latin1_text_is_not_damage(tmp_path: Path) -> None:
    r = make_result("22")
    text = "Température du nœud: élevée, café\n".encode("latin-1", "replace") * 50
    (tmp_path / "slurm-22.out").write_bytes(text + encode(r).encode() + b"\n")
    result = parse([tmp_path], jobs=1)
    assert [x.record for x in result.runs] == [r] and result.problems == []


def test_a_120_mb_line_in_a_log_costs_neither_memory_nor_the_records(tmp_path: Path) -> None:
    finished = make_result("31")
    died = make_result("32")
    path = tmp_path / "slurm-31.out"
    with path.open("wb") as fh:
        fh.write(_text([encode(start_of(finished)), encode(finished), encode(start_of(died))]))
        block = b"=" * (1 << 20)
        for _ in range(120):  # a progress bar that never printed a newline
            fh.write(block)
        fh.write(b"\n")
        fh.write(
            _text(
                [
                    "Traceback (most recent call last):",
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                ]
            )
        )
    tracemalloc.start()
    try:
        result = parse([tmp_path], jobs=1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 48 << 20, f"reading held {peak >> 20} MiB"
    assert [x.record for x in result.runs] == [finished]
    (failure,) = result.failures
    assert failure.job_id == "32" and failure.diagnosis.code == "cuda_oom"
    assert failure.diagnosis.evidence is not None and failure.diagnosis.evidence.line_no == 6
    (problem,) = result.problems
    assert problem.severity == "info"
    start = (
        path.stat().st_size
        - (120 << 20)
        - 1
        - len(
            _text(
                [
                    "Traceback (most recent call last):",
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                ]
            )
        )
    )
    assert problem.message == (
        f"line 4: 120 MiB without a line break (bytes {start}-{start + (120 << 20) - 1}), skipped"
    )


def test_record_right_after_a_nul_hole_longer_than_a_line_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hole bigger than the longest line we hold (scaled down here: 4 kB lines, 1 kB
    reads), with the requeued attempt's record written right after it, no newline between."""
    monkeypatch.setattr(scan_mod, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(scan_mod, "MAX_LINE_BYTES", 4000)
    first, second = make_result("41"), make_result("42")
    head = _text([encode(start_of(first))])
    for tail in (b"\n", b""):  # the record ends its line, or the file
        path = tmp_path / "slurm-41.out"
        path.write_bytes(head + b"\0" * 20_000 + encode(first).encode() + tail)
        (tmp_path / "slurm-42.out").write_bytes(b"=" * 9000 + encode(second).encode() + b"\n")
        result = parse([tmp_path], jobs=1)
        assert [r.record for r in result.runs] == [first, second]
        hole, bar = result.problems
        assert hole.message == (
            f"bytes {len(head)}-{len(head) + 19_999} (line 2): NUL block (20000 bytes), "
            "skipped; records around it read"
        )
        assert (bar.severity, bar.message) == (
            "info",
            "line 1: 0 MiB without a line break (bytes 0-8999), skipped",
        )


@settings(max_examples=40, deadline=None)
@given(
    layout=st.lists(
        st.tuples(st.integers(0, 9000), st.booleans(), st.booleans()), min_size=1, max_size=5
    ),
    chunk=st.integers(64, 1500),
)
def test_every_record_after_any_hole_is_read_whatever_the_read_size(
    layout: list[tuple[int, bool, bool]], chunk: int
) -> None:
    """Holes of any size (some longer than a line may be), records glued to them or on their
    own line, files ending with or without a newline: every record is found once."""
    saved = scan_mod.CHUNK_BYTES, scan_mod.MAX_LINE_BYTES
    scan_mod.CHUNK_BYTES, scan_mod.MAX_LINE_BYTES = chunk, 4000
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data, expected = b"", []
            for i, (hole, own_line, noise_after) in enumerate(layout):
                r = make_result(f"5{i}")
                expected.append(r)
                data += b"\0" * hole + (b"\n" if own_line else b"") + encode(r).encode()
                data += b"\nEpoch 1: 100%\n" if noise_after else b"\n"
            (Path(tmp) / "slurm-50.out").write_bytes(data.rstrip(b"\n") if chunk % 2 else data)
            result = parse([tmp], jobs=1)
    finally:
        scan_mod.CHUNK_BYTES, scan_mod.MAX_LINE_BYTES = saved
    assert sorted(r.record.identity.job_id for r in result.runs) == sorted(
        r.identity.job_id for r in expected
    )
    assert all("NUL block" in p.message for p in result.problems)
    # not vacuous: a file with a hole has its problem, one without has none
    assert bool(result.problems) == any(hole for hole, _, _ in layout)


def test_a_rank_log_with_a_hole_is_still_read_for_evidence(tmp_path: Path) -> None:
    """submitit: rank 0 printed the start event; rank 1's log, damaged, holds the cause."""
    r = make_result("61")
    folder = tmp_path / "61"
    folder.mkdir()
    (folder / "61_0_log.out").write_text(encode(start_of(r)) + "\n")
    (folder / "61_1_log.err").write_bytes(
        _text(noise(2))
        + b"\0" * 8192
        + _text(
            [
                "[rank1]: Traceback (most recent call last):",
                "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.",
            ]
        )
    )
    result = parse([tmp_path], jobs=1)
    (failure,) = result.failures
    assert failure.diagnosis.code == "cuda_oom"
    assert failure.diagnosis.evidence is not None
    assert failure.diagnosis.evidence.where.endswith("61_1_log.err:6")
    (hole,) = [p for p in result.problems if "NUL" in p.message]
    assert hole.message.endswith(
        "(line 5): NUL block (8192 bytes), skipped; records around it read"
    )


def test_binary_file_is_skipped_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "weights.out").write_bytes(b"\x00\x01\x02" * 1000)
    (tmp_path / "model.ckpt").write_bytes(b"\x00" * 10)  # known binary suffix: silent
    result = parse([tmp_path])
    (problem,) = result.problems
    assert Path(problem.file).name == "weights.out"
    assert problem.message.startswith("binary file, skipped: no record in it; 3000 unreadable")
    assert "the first at bytes 0-2999 (line 1): undecodable bytes" in problem.message


def test_non_utf8_noise_does_not_hide_a_record(tmp_path: Path) -> None:
    r = make_result("9")
    (tmp_path / "slurm-9.out").write_bytes(b"\xff\xfe caf\xe9\n" + encode(r).encode() + b"\n")
    runs, _, problems = load_all(tmp_path)
    assert runs["job_id"].tolist() == ["9"] and problems == []
