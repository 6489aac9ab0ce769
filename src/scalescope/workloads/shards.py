"""Generated image shards on disk: written once, memory-mapped by every reader.

Layout under the cache folder, one folder per data set (its name is a hash of everything
that determines the bytes, so a changed parameter never reads stale images)::

    <cache_dir>/images-<key>/manifest.json
    <cache_dir>/images-<key>/{train,val}_{images,labels}.npy
    <cache_dir>/images-<key>.lock

Each split is a ``.npy`` file (uint8 images ``[n, 3, H, W]``, int64 labels ``[n]``) opened with
``np.load(mmap_mode="r")``: readers share the page cache, nothing is copied per rank or per
DataLoader worker. ``manifest.json`` holds each file's shape, dtype, size in bytes and sha256.

Creation happens once: every process takes an exclusive ``flock`` on the lock file, checks
the folder, and only the first one finding it missing or bad builds it into a temporary
folder that is renamed into place; the others wait on the lock, then open what it built.

Checks on open: the manifest and every file's size, always (a truncated file is caught
without reading it); the sha256 of every file once per process (the first open; a flipped
byte is caught) unless ``verify_checksum`` is off. A set that fails either check is moved
aside and rebuilt, never read. The builder hashes what it wrote, so a fresh set is not
read twice.

numpy only (no torch): the generator and the checks are testable and fast to import.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..atomic import file_lock, replace_dir_atomic

FORMAT_VERSION = 1
"""Bump when the generator changes: the cache key changes with it."""
CHUNK = 2048
"""Images generated per step (and per seed): bounded memory, independent of the set size."""
SPLITS = ("train", "val")


@dataclass(frozen=True)
class ImageSetSpec:
    """Everything that determines the bytes of a generated image set."""

    image_size: int
    num_classes: int
    train_samples: int
    val_samples: int
    noise: float
    data_seed: int

    @property
    def key(self) -> str:
        text = json.dumps({"format": FORMAT_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def count(self, split: str) -> int:
        return self.train_samples if split == "train" else self.val_samples


@dataclass(frozen=True)
class OpenedShards:
    """The opened set: ``arrays[split] = (images, labels)`` memory maps."""

    folder: Path
    arrays: dict[str, tuple[np.ndarray, np.ndarray]]
    built: bool
    """This call generated the set (it was missing, truncated or corrupt)."""
    rebuilt_reason: str | None
    """Why an existing set was rebuilt (None: it was fine, or there was none)."""
    checksum_verified: bool
    """This call read every byte and compared the sha256 (or wrote it, when built)."""


class ShardError(Exception):
    """A shard set failed a check (the message says which file and why)."""


# --- generation -------------------------------------------------------------------------------


def class_patterns(spec: ImageSetSpec) -> np.ndarray:
    """float32 ``[classes, 3, H, W]`` in [-1, 1]: each class a sum of oriented colour gratings."""
    rng = np.random.default_rng([spec.data_seed, FORMAT_VERSION, 0])
    h = spec.image_size
    yy, xx = np.meshgrid(np.arange(h), np.arange(h), indexing="ij")
    out = np.zeros((spec.num_classes, 3, h, h), dtype=np.float32)
    for c in range(spec.num_classes):
        for _ in range(3):
            angle = rng.uniform(0, np.pi)
            freq = rng.uniform(1.0, 4.0) / h  # cycles per pixel: 1-4 periods across
            phase = rng.uniform(0, 2 * np.pi)
            wave = np.cos(2 * np.pi * freq * (np.cos(angle) * xx + np.sin(angle) * yy) + phase)
            colour = rng.uniform(-1, 1, size=3)
            out[c] += colour[:, None, None] * wave
        out[c] /= max(1e-6, float(np.abs(out[c]).max()))
    return out


def generate_chunk(
    spec: ImageSetSpec, patterns: np.ndarray, split: str, chunk: int
) -> tuple[np.ndarray, np.ndarray]:
    """Images ``[chunk*CHUNK, ...)`` of ``split``: a class pattern, shifted, plus noise.

    Seeded by (data seed, split, chunk): the bytes do not depend on who generates them.
    """
    n_total = spec.count(split)
    start = chunk * CHUNK
    n = min(CHUNK, n_total - start)
    rng = np.random.default_rng([spec.data_seed, FORMAT_VERSION, 1 + SPLITS.index(split), chunk])
    labels = rng.integers(0, spec.num_classes, size=n, dtype=np.int64)
    shift = max(1, spec.image_size // 8)
    dy = rng.integers(-shift, shift + 1, size=n)
    dx = rng.integers(-shift, shift + 1, size=n)
    noise = rng.standard_normal((n, 3, spec.image_size, spec.image_size), dtype=np.float32)
    imgs = np.empty((n, 3, spec.image_size, spec.image_size), dtype=np.uint8)
    for i in range(n):
        base = np.roll(patterns[labels[i]], (int(dy[i]), int(dx[i])), axis=(1, 2))
        pix = 127.5 + 60.0 * (base + spec.noise * noise[i])
        imgs[i] = np.clip(pix, 0, 255).astype(np.uint8)
    return imgs, labels


# --- files, manifest, checks ------------------------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            h.update(block)
    return h.hexdigest()


def _file_names(split: str) -> tuple[str, str]:
    return f"{split}_images.npy", f"{split}_labels.npy"


def _build(spec: ImageSetSpec, folder: Path) -> None:
    """Generate every split into ``folder`` (a fresh temporary folder) with its manifest."""
    patterns = class_patterns(spec)
    files: dict[str, dict[str, object]] = {}
    for split in SPLITS:
        n = spec.count(split)
        img_name, lab_name = _file_names(split)
        shape = (n, 3, spec.image_size, spec.image_size)
        images = np.lib.format.open_memmap(
            folder / img_name, mode="w+", dtype=np.uint8, shape=shape
        )
        labels = np.empty(n, dtype=np.int64)
        for chunk in range((n + CHUNK - 1) // CHUNK):
            imgs, labs = generate_chunk(spec, patterns, split, chunk)
            images[chunk * CHUNK : chunk * CHUNK + len(imgs)] = imgs
            labels[chunk * CHUNK : chunk * CHUNK + len(labs)] = labs
        images.flush()
        del images
        np.save(folder / lab_name, labels)
        for name, arr_shape, dtype in ((img_name, shape, "uint8"), (lab_name, (n,), "int64")):
            path = folder / name
            with open(path, "rb+") as fh:
                os.fsync(fh.fileno())
            files[name] = {
                "shape": list(arr_shape),
                "dtype": dtype,
                "bytes": path.stat().st_size,
                "sha256": _sha256(path),
            }
    manifest = {"format": FORMAT_VERSION, "spec": asdict(spec), "files": files}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")


_VERIFIED: set[tuple[str, int, int, int]] = set()
"""Files whose sha256 this process has checked: (path, inode, size, mtime_ns)."""


def _stat_key(path: Path) -> tuple[str, int, int, int]:
    st = path.stat()
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)


def _check(spec: ImageSetSpec, folder: Path, *, checksum: bool) -> bool:
    """Raise ShardError naming the file when the set is incomplete or corrupt. Returns
    whether a full checksum was read."""
    manifest_path = folder / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ShardError(f"{manifest_path}: unreadable ({type(exc).__name__})") from None
    if manifest.get("format") != FORMAT_VERSION or manifest.get("spec") != asdict(spec):
        raise ShardError(f"{manifest_path}: describes another data set")
    read_all = False
    for split in SPLITS:
        for name in _file_names(split):
            entry = manifest["files"].get(name)
            path = folder / name
            if entry is None or not path.is_file():
                raise ShardError(f"{path}: missing")
            size = path.stat().st_size
            if size != entry["bytes"]:
                raise ShardError(f"{path}: {size} bytes, the manifest says {entry['bytes']}")
            if checksum and _stat_key(path) not in _VERIFIED:
                if _sha256(path) != entry["sha256"]:
                    raise ShardError(f"{path}: sha256 differs from the manifest")
                _VERIFIED.add(_stat_key(path))
                read_all = True
    return read_all


def _open(spec: ImageSetSpec, folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for split in SPLITS:
        img_name, lab_name = _file_names(split)
        images = np.load(folder / img_name, mmap_mode="r")
        labels = np.load(folder / lab_name, mmap_mode="r")
        expected = (spec.count(split), 3, spec.image_size, spec.image_size)
        if images.shape != expected or images.dtype != np.uint8 or labels.shape != expected[:1]:
            raise ShardError(f"{folder / img_name}: shape {images.shape}, expected {expected}")
        out[split] = (images, labels)
    return out


def open_shards(
    spec: ImageSetSpec, cache_dir: str | os.PathLike[str], *, verify_checksum: bool = True
) -> OpenedShards:
    """Open the set for ``spec`` under ``cache_dir``, building it first if it is missing,
    truncated or corrupt. Safe to call from many processes at once: one builds, the
    others wait and then open the same bytes."""
    root = Path(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"images-{spec.key}"
    reason: str | None = None
    with file_lock(root / f"images-{spec.key}.lock"):  # concurrent ranks and jobs wait
        if folder.exists():
            try:
                verified = _check(spec, folder, checksum=verify_checksum)
                return OpenedShards(folder, _open(spec, folder), False, None, verified)
            except ShardError as exc:
                reason = str(exc)
        # Built in a fresh folder and swapped in; a bad set is moved aside first, not deleted
        # in place (a reader holding its old maps keeps its pages).
        replace_dir_atomic(folder, lambda tmp: _build(spec, tmp))
        for split in SPLITS:  # the builder hashed what it wrote: no second full read
            for name in _file_names(split):
                _VERIFIED.add(_stat_key(folder / name))
        _check(spec, folder, checksum=False)
        return OpenedShards(folder, _open(spec, folder), True, reason, True)
