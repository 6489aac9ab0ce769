"""Write a file all at once: readers see the old content or the new, never half of it.

The one temp-file-then-rename helper of the project. The data is written to a fresh temporary
file in the target's folder (same filesystem, so the rename is atomic), flushed and fsynced,
given the permissions a plain ``open()`` would have given it, then renamed over the target.
On any error the temporary file is removed and the old target is left as it was.

Standard library only: the job side, the analysis and the local-cluster command import it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["file_lock", "replace_dir_atomic", "write_bytes_atomic", "write_text_atomic"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, replace: bool = True) -> Path:
    """Replace ``path`` with ``data`` atomically; create its folder if needed. With
    ``replace=False`` an existing file is never replaced, not even by a writer racing this
    one: FileExistsError (the new file is linked in, which fails when the name exists)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; results are shared with the group like any other file
        os.chmod(tmp, 0o666 & ~_umask())
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def write_text_atomic(
    path: str | os.PathLike[str], text: str, encoding: str = "utf-8", *, replace: bool = True
) -> Path:
    """Replace ``path`` with ``text`` atomically (see :func:`write_bytes_atomic`)."""
    return write_bytes_atomic(path, text.encode(encoding), replace=replace)


@contextlib.contextmanager
def file_lock(lock_path: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive ``flock`` on ``lock_path`` (created if missing), across processes and
    jobs on one file system; released when the block ends, even if the process dies. The
    lock file stays: removing it would race with the next process to open it."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _swap_lock(target: Path) -> contextlib.AbstractContextManager[None]:
    """One swap of ``target`` at a time, across processes: two writers at once (a sweep's
    --wait summary and a user's command, say) would otherwise race between moving the old
    folder away and moving the new one in. The lock file is hidden beside the target."""
    return file_lock(target.parent / f".{target.name}.lock")


def replace_dir_atomic(
    target: str | os.PathLike[str],
    fill: Callable[[Path], None],
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Call ``fill(tmp_dir)`` on a fresh folder next to ``target``, then swap it in.

    The old folder (if any) is renamed away, the new one renamed in, and the old one deleted:
    readers see the old folder or the new, never a mix. If the swap fails the old folder is
    put back. Concurrent writers of one target swap in turn (a lock file beside it); each
    swaps in a complete folder and the last one stays. Whether ``target`` may be replaced
    at all is the caller's decision: ``check(target)`` runs again under the lock.
    """
    target = Path(target).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it private
    old: Path | None = None
    try:
        fill(tmp)
        with _swap_lock(target):
            if check is not None:
                check(target)
            if target.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
                os.rename(target, old / target.name)
            try:
                os.rename(tmp, target)
            except OSError:
                if old is not None:  # put the old folder back: never leave nothing behind
                    os.rename(old / target.name, target)
                raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target
