"""What a crash leaves in a log, found while its lines stream past: blocks of NUL bytes (a
file extended on a shared filesystem before its data arrived), random bytes, over-long lines;
each unreadable region becomes a :class:`~analysis.read.files.Problem` with its byte range and
line, and a file that is mostly binary data is skipped as not a log at all."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from analysis.read.files import Problem

MAX_REGION_PROBLEMS = 10
"""Unreadable regions itemised per file; the rest are counted in one more problem."""
REGION_SCAN_BYTES = 16 << 20
"""Bytes of damaged lines examined byte by byte per file (bounds the time a large binary file
costs); markers are still searched for beyond it."""
_REGION_GAP = 64
"""Unreadable bytes closer than this belong to one region (random bytes hold short runs of
printable ones)."""

# What a crash leaves in a log: blocks of NUL bytes (a file extended on a shared filesystem
# before its data arrived) or random bytes. Other control characters than tab, line ends,
# form feed and escape (colours) do not occur in text either. A stray non-UTF-8 byte in a
# line (latin-1 text) is decoded as a replacement character and not worth a word.
_MULTIBYTE = (
    rb"[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2}"
    rb"|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3}"
    rb"|\xf4[\x80-\x8f][\x80-\xbf]{2}"
)
_DAMAGE = re.compile(
    rb"(?P<nul>\x00+)|(?P<ctl>[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f]+)|(?:" + _MULTIBYTE + rb")+"
    rb"|(?P<bad>[\x80-\xff]+?)"
)
_MIN_UNDECODABLE = 64
"""A region of only non-UTF-8 bytes is reported from this size on, if they are dense."""


@dataclass
class _Region:
    """Bytes ``start`` to ``end`` (exclusive) of a file that are not text."""

    start: int
    end: int
    line: int
    nul: int = 0
    control: int = 0
    undecodable: int = 0

    def reportable(self) -> bool:
        if self.nul or self.control:
            return True
        return (
            self.undecodable >= _MIN_UNDECODABLE and 4 * self.undecodable >= self.end - self.start
        )

    @property
    def what(self) -> str:
        size = self.end - self.start
        if self.nul == size:
            return f"NUL block ({size} bytes)"
        parts = [
            f"{n} {name}"
            for n, name in (
                (self.nul, "NUL"),
                (self.control, "control"),
                (self.undecodable, "non-UTF-8"),
            )
            if n
        ]
        return f"undecodable bytes ({size} bytes: {', '.join(parts)})"

    def where(self) -> str:
        return f"bytes {self.start}-{self.end - 1} (line {self.line})"


def _maybe_damaged(seg: bytes) -> bool:
    """False for text (the common case, C-speed checks only): no NUL byte and valid UTF-8.
    Stray control characters in text (a bell, a backspace) are not damage on their own."""
    if b"\0" in seg:
        return True
    if seg.isascii():
        return False
    try:
        seg.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


@dataclass
class Damage:
    """The unreadable regions of one file, found while its lines stream past."""

    regions: list[_Region] = field(default_factory=list)
    open: _Region | None = None
    scanned: int = 0
    """Bytes of damaged lines examined so far (bounded by :data:`REGION_SCAN_BYTES`)."""
    unscanned_from: int | None = None
    long_lines: list[tuple[int, int, int, int, bool]] = field(default_factory=list)
    """(line number, first byte, length, NUL bytes in it, an event line in it was too long)
    of each over-long line."""

    def feed(self, buf: bytes, start: int, end: int, base_offset: int, line_no: int) -> None:
        """Look at ``buf[start:end]`` (whole lines; ``buf[start]`` is at file offset
        ``base_offset + start`` on line ``line_no``)."""
        seg = buf[start:end] if start or end != len(buf) else buf
        if not _maybe_damaged(seg):
            return
        if self.unscanned_from is not None:
            return
        if self.scanned >= REGION_SCAN_BYTES:
            self.close()
            self.unscanned_from = base_offset + start
            return
        self.scanned += len(seg)
        offset = base_offset + start
        for m in _DAMAGE.finditer(seg):
            kind = m.lastgroup
            if kind is None:
                continue  # a valid multi-byte character
            at, to = offset + m.start(), offset + m.end()
            region = self.open
            if region is None or at - region.end >= _REGION_GAP:
                self.close()
                line = line_no + seg.count(b"\n", 0, m.start())
                region = self.open = _Region(at, at, line)
            region.end = to
            if kind == "nul":
                region.nul += to - at
            elif kind == "ctl":
                region.control += to - at
            else:
                region.undecodable += to - at

    def close(self) -> None:
        if self.open is not None and self.open.reportable():
            self.regions.append(self.open)
        self.open = None

    def is_binary(self, has_events: bool, size: int) -> bool:
        """No record and mostly binary data: not a log at all (a misnamed checkpoint). NUL
        blocks do not count: they are holes a crash left in a log, however large."""
        self.close()
        if has_events:
            return False
        binary = sum(r.end - r.start for r in self.regions if r.nul != r.end - r.start)
        return 2 * binary >= size or self.unscanned_from is not None

    def problems(self, display: str, has_events: bool, size: int) -> list[Problem]:
        self.close()
        out: list[Problem] = []
        for line, at, length, nul, lost in self.long_lines:
            if lost or length <= 0:
                continue  # reported with the events (an event line too long to be read)
            if 10 * nul >= 9 * length:  # a NUL hole too large to be a line of the log
                region = _Region(at, at + length, line, nul=nul)
                out.append(
                    Problem(
                        display,
                        f"{region.where()}: NUL block ({length} bytes), "
                        "skipped; records around it read",
                    )
                )
                continue
            out.append(
                Problem(
                    display,
                    f"line {line}: {length / (1 << 20):.0f} MiB without a line break "
                    f"(bytes {at}-{at + length - 1}), skipped",
                    severity="info",
                )
            )
        if not self.regions and self.unscanned_from is None:
            return out
        if self.is_binary(has_events, size):
            total = sum(r.end - r.start for r in self.regions)
            first = self.regions[0] if self.regions else None
            where = f", the first at {first.where()}: {first.what}" if first else ""
            out.append(
                Problem(
                    display,
                    f"binary file, skipped: no record in it; {total} unreadable byte(s) of "
                    f"{size} in {len(self.regions)} region(s){where}",
                )
            )
            return out
        for r in self.regions[:MAX_REGION_PROBLEMS]:
            out.append(Problem(display, f"{r.where()}: {r.what}, skipped; records around it read"))
        rest = self.regions[MAX_REGION_PROBLEMS:]
        if rest:
            out.append(
                Problem(
                    display,
                    f"{len(rest)} more unreadable region(s) from byte {rest[0].start} "
                    f"({sum(r.end - r.start for r in rest)} bytes), skipped",
                )
            )
        if self.unscanned_from is not None:
            out.append(
                Problem(
                    display,
                    f"more damaged lines after byte {self.unscanned_from} not examined "
                    f"(over {REGION_SCAN_BYTES >> 20} MiB of damage); records in them read",
                )
            )
        return out
