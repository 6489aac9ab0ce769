"""Which files to read: every candidate under the given folders and files, in a stable
order, and the :class:`Problem` every reader reports about a file instead of raising.

Directories are walked following links (a scale kept elsewhere and linked in), each folder
once however many links reach it; hidden folders, summary output folders and files that are
never logs (by their suffix) are skipped without a word.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SUMMARY_MARKER = ".scalescope-summary"
"""A summary output folder holds this file; the walker never descends into such a folder."""
RESULT_JSON = "result.json"
SWEEP_JSON = "sweep.json"
"""A sweep's manifest (``scalescope sweep``): every job it planned, so none goes unreported."""

# Files that are never logs: checked by suffix before opening, skipped without a word.
SKIP_SUFFIXES = frozenset(
    {
        # checkpoints, arrays, archives, images
        *(".ckpt", ".pt", ".pth", ".bin", ".safetensors", ".pkl", ".pickle", ".npy", ".npz"),
        *(".h5", ".hdf5", ".parquet", ".arrow", ".zip", ".gz", ".bz2", ".xz", ".zst", ".tar"),
        *(".tgz", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".pdf", ".so", ".pyc", ".whl"),
        # structured text that is not a job log (metrics.csv, hparams.yaml, sources)
        *(".db", ".sqlite", ".json", ".yaml", ".yml", ".toml", ".csv", ".tsv", ".md", ".rst"),
        *(".html", ".ipynb", ".py", ".sh", ".cfg", ".ini", ".lock"),
    }
)
_SKIP_DIRS = frozenset({"__pycache__", "node_modules"})


@dataclass(frozen=True)
class Problem:
    """Something wrong with one input file; never fatal."""

    file: str
    message: str
    severity: str = "warning"
    """``warning`` (data lost or doubtful) or ``info`` (worth knowing, nothing lost)."""


def _skip_file(name: str) -> bool:
    if name.startswith("."):
        return True
    if name in (RESULT_JSON, SWEEP_JSON):
        return False
    if ".tfevents." in name:
        return True
    return os.path.splitext(name)[1].lower() in SKIP_SUFFIXES


def _subfolders(dirpath: str, names: list[str], excluded: set[str], walked: set[str]) -> list[str]:
    """The folders of ``dirpath`` to walk, by name: not hidden, excluded or a summary, nor a
    folder already walked or about to be (through another link, or a link to an ancestor:
    a loop). Those kept are marked as about to be walked."""
    kept = []
    for name in sorted(names):
        path = os.path.join(dirpath, name)
        if name.startswith(".") or name in _SKIP_DIRS:
            continue
        real = os.path.realpath(path)
        if real in excluded or real in walked:
            continue
        if os.path.exists(os.path.join(path, SUMMARY_MARKER)):
            continue
        walked.add(real)
        kept.append(name)
    return kept


def discover(
    paths: Sequence[str | os.PathLike[str]], exclude: Iterable[str | os.PathLike[str]] = ()
) -> tuple[list[tuple[str, str]], list[Problem]]:
    """(path, display name) of every candidate file, in a stable order, plus problems.

    Directories are walked recursively, following links to folders: a folder reached twice
    (by a link and its own path, or a link back up the tree) is read once, under the first
    path that reaches it. Hidden folders, summary output folders (they hold
    :data:`SUMMARY_MARKER`) and ``exclude`` are skipped. The display name is relative to the
    parent of the argument it was found under.
    """
    excluded = {os.path.realpath(p) for p in exclude}
    found: list[tuple[str, str]] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    walked: set[str] = set()
    """Real paths of the folders walked or about to be (every ancestor of the current one)."""

    def add(key: str, path: str, display: str) -> None:
        if key not in seen:
            seen.add(key)
            found.append((path, display))

    for arg in paths:
        root = os.fspath(arg)
        if os.path.isfile(root):
            add(os.path.realpath(root), root, os.path.basename(root))
            continue
        if not os.path.isdir(root):
            problems.append(Problem(root, "no such file or folder"))
            continue
        abs_root = os.path.realpath(root)
        top = os.path.basename(abs_root) or abs_root
        if abs_root in walked:
            continue
        walked.add(abs_root)

        def onerror(exc: OSError, root: str = root, top: str = top) -> None:
            where = os.path.join(top, os.path.relpath(exc.filename or root, root))
            problems.append(Problem(os.path.normpath(where), f"cannot read: {exc.strerror}"))

        for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=True):
            if SUMMARY_MARKER in filenames:
                dirnames[:] = []
                continue
            dirnames[:] = _subfolders(dirpath, dirnames, excluded, walked)
            # per folder, not per file: 10,000 logs must not cost 10,000 path resolutions
            rel = os.path.relpath(dirpath, root)
            shown = top if rel == "." else os.path.join(top, rel)
            key_dir = os.path.realpath(dirpath)
            for name in sorted(filenames):
                if not _skip_file(name):
                    add(
                        os.path.join(key_dir, name),
                        os.path.join(dirpath, name),
                        os.path.join(shown, name),
                    )
    return found, problems
