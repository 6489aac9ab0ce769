"""The profiler's own noise kept out of a job's output.

libkineto (inside torch) writes a ``USDT:<time> <pid>:<tid> SyncActivityProfilerHandler.cpp:52]
profiler_start`` line, and one for ``profiler_stop``, to the process's stderr (file
descriptor 2, from C++) each time a capture starts and stops: markers for tracing tools, of
no use to a reader. Its log level cannot drop them alone (they carry the highest level,
above its errors), so :func:`dropping_lines` holds what descriptor 2 receives while the two
calls run and writes it back without those lines: anything else printed meanwhile (an error)
still reaches the log, a moment later.

No torch here.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

KINETO_MARKER = re.compile(rb"^USDT:[^\n]*\] profiler_(?:start|stop)\s*$")
"""libkineto's trace start and stop markers, as it prints them."""


@contextmanager
def dropping_lines(pattern: re.Pattern[bytes] = KINETO_MARKER, fd: int = 2) -> Iterator[None]:
    """While the block runs, what the process writes to ``fd`` (from Python or C++) goes to a
    temporary file; then it is written to ``fd`` without the lines ``pattern`` matches."""
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            held.seek(0)
            kept = [
                line for line in held.read().splitlines(keepends=True) if not pattern.match(line)
            ]
            data = b"".join(kept)
            while data:
                data = data[os.write(fd, data) :]
