"""The image set on disk (scalescope.workloads.shards): built once then opened, one set per
seed, a damaged shard found and rebuilt."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from scalescope.workloads.shards import ImageSetSpec, open_shards


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name in sorted(p.name for p in folder.glob("*.npy")):
        h.update((folder / name).read_bytes())
    return h.hexdigest()


def _spec() -> ImageSetSpec:
    return ImageSetSpec(
        image_size=16, num_classes=4, train_samples=3000, val_samples=500, noise=0.8, data_seed=3
    )


def test_shards_are_built_once_then_opened(tmp_path: Path) -> None:
    first = open_shards(_spec(), tmp_path)
    second = open_shards(_spec(), tmp_path)
    assert first.built and not second.built and first.folder == second.folder
    images, labels = second.arrays["train"]
    assert images.shape == (3000, 3, 16, 16) and images.dtype == np.uint8
    assert isinstance(images, np.memmap)
    assert sorted(np.unique(labels).tolist()) == [0, 1, 2, 3]
    manifest = json.loads((second.folder / "manifest.json").read_text())
    entry = manifest["files"]["train_images.npy"]
    assert entry["bytes"] == (second.folder / "train_images.npy").stat().st_size
    assert (
        entry["sha256"]
        == hashlib.sha256((second.folder / "train_images.npy").read_bytes()).hexdigest()
    )


def test_another_seed_is_another_set(tmp_path: Path) -> None:
    a = open_shards(_spec(), tmp_path)
    spec_b = ImageSetSpec(**{**_spec().__dict__, "data_seed": 4})
    b = open_shards(spec_b, tmp_path)
    assert a.folder != b.folder and b.built
    assert not np.array_equal(a.arrays["train"][0][:10], b.arrays["train"][0][:10])


def test_truncated_shard_is_detected_and_rebuilt(tmp_path: Path) -> None:
    good = open_shards(_spec(), tmp_path)
    digest = _digest(good.folder)
    path = good.folder / "train_images.npy"
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 100)
    again = open_shards(_spec(), tmp_path)
    assert again.built and again.rebuilt_reason is not None
    assert "train_images.npy" in again.rebuilt_reason and "bytes" in again.rebuilt_reason
    assert _digest(again.folder) == digest


def test_flipped_byte_is_detected_and_rebuilt(tmp_path: Path) -> None:
    good = open_shards(_spec(), tmp_path)
    digest = _digest(good.folder)
    path = good.folder / "val_images.npy"
    with open(path, "r+b") as fh:
        fh.seek(path.stat().st_size // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0x01]))
    again = open_shards(_spec(), tmp_path)
    assert again.built and again.rebuilt_reason is not None
    assert "val_images.npy" in again.rebuilt_reason and "sha256" in again.rebuilt_reason
    assert _digest(again.folder) == digest
