"""Replace an output folder all at once: readers see the old folder or the new, never a mix.

Everything is written into a fresh temporary folder next to the target; then the old folder
is renamed away, the new one renamed in, and the old one deleted. A folder that is not a
previous summary (no marker file) and not empty is never replaced: it may hold the logs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from .parse import SUMMARY_MARKER


class OutputError(RuntimeError):
    """The output folder cannot be (re)placed; the message says why and what to do."""


def check_replaceable(target: Path) -> None:
    if target.exists() and not target.is_dir():
        raise OutputError(f"{target} exists and is not a folder; choose another --out")
    if target.is_dir() and any(target.iterdir()) and not (target / SUMMARY_MARKER).exists():
        raise OutputError(
            f"{target} exists, is not empty and is not a scalescope summary folder "
            f"(no {SUMMARY_MARKER}); refusing to replace it. Choose another --out."
        )


@contextlib.contextmanager
def _swap_lock(target: Path) -> Iterator[None]:
    """One swap of ``target`` at a time, across processes: two summaries written at once
    (a sweep's --wait and a user's command, say) would otherwise race between moving the
    old folder away and moving the new one in. The lock file stays (removing it would race
    too); it is hidden and tiny."""
    fd = os.open(target.parent / f".{target.name}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def write_atomically(target: str | os.PathLike[str], fill: Callable[[Path], None]) -> Path:
    """Call ``fill(tmp_dir)`` then swap ``tmp_dir`` in as ``target``. Concurrent writers of
    the same target each swap in a complete folder; the last one stays."""
    target = Path(target).absolute()
    check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the summary is for everyone
    old: Path | None = None
    try:
        (tmp / SUMMARY_MARKER).write_text(
            json.dumps({"kind": "scalescope-summary"}) + "\n", encoding="utf-8"
        )
        fill(tmp)
        with _swap_lock(target):
            check_replaceable(target)
            if target.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
                os.rename(target, old / "summary")
            try:
                os.rename(tmp, target)
            except OSError:
                if old is not None:  # put the old folder back: never leave nothing behind
                    os.rename(old / "summary", target)
                raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target
