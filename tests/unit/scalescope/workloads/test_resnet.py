"""The resnet workload: its shards on disk, its loader, its FLOP count, and real runs.

Shards are built in each test's own cache folder (a fraction of a second for ``tiny``).
Multi-process tests (concurrent builders, training runs, bench-data) are marked ``slow``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from resnet_helpers import (
    _params,
)
from torch.utils.flop_counter import FlopCounterMode

from scalescope.workloads.resnet import ResnetModule, image_spec, make_loader
from scalescope.workloads.shards import ImageSetSpec, open_shards


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name in sorted(p.name for p in folder.glob("*.npy")):
        h.update((folder / name).read_bytes())
    return h.hexdigest()


# --- params: presets and bad input ------------------------------------------------------------


def test_presets_fill_only_what_is_not_given(tmp_path: Path) -> None:
    p = _params(tmp_path, preset="small", image_size=24)
    assert (p.image_size, p.num_classes, p.widths, p.depths) == (24, 10, [32, 64, 128], [2, 2, 2])
    assert p.crop_padding == 3
    base = _params(tmp_path, preset="base")
    assert base.widths == [64, 128, 256, 512] and base.image_size == 64


# --- FLOPs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        {"preset": "tiny"},
        {"preset": "small", "depths": [1, 1, 1]},
        {"image_size": 20, "widths": [8, 12, 24], "depths": [2, 1, 1], "num_classes": 7},
    ],
)
def test_flops_match_flop_counter_within_5_percent(tmp_path: Path, extra: dict) -> None:
    params = _params(tmp_path, **extra)
    model = ResnetModule(params)
    batch = 4
    x = torch.randint(0, 256, (batch, 3, params.image_size, params.image_size), dtype=torch.uint8)
    y = torch.randint(0, params.num_classes, (batch,))
    with FlopCounterMode(display=False) as counter:
        model.micro_batch_loss(x, y).backward()
    measured = counter.get_total_flops() / batch
    assert model.flops_per_sample() == pytest.approx(measured, rel=0.05)


# --- shards -------------------------------------------------------------------------------------


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


# --- loader: sharding and augmentation ----------------------------------------------------------


def test_augmentation_crops_and_flips_the_stored_image(tmp_path: Path) -> None:
    params = _params(tmp_path, crop_padding=2)
    shards = open_shards(image_spec(params), params.resolved_cache_dir)
    images, labels = shards.arrays["train"]
    loader = make_loader(params, shards.folder, "train", batch_size=64, seed=1)
    keys = loader.batch_sampler.epoch_keys(0)[0]  # what the first epoch will draw
    x, y = next(iter(loader))
    assert torch.equal(y, torch.from_numpy(np.asarray(labels[keys[:, 0]])))
    assert keys[:, 3].any() and not keys[:, 3].all()  # some flipped, some not
    for row, got in zip(keys, x.numpy(), strict=True):
        idx, dy, dx, flip = (int(v) for v in row)
        padded = np.pad(images[idx], ((0, 0), (2, 2), (2, 2)))
        want = padded[:, dy : dy + 16, dx : dx + 16]
        assert np.array_equal(got, want[:, :, ::-1] if flip else want)


def test_two_ranks_split_each_global_batch(tmp_path: Path) -> None:
    params = _params(tmp_path)
    folder = open_shards(image_spec(params), params.resolved_cache_dir).folder
    one = make_loader(params, folder, "train", batch_size=64, seed=2)
    halves = [
        make_loader(params, folder, "train", batch_size=32, seed=2, rank=r, world_size=2)
        for r in (0, 1)
    ]
    for (x, _), (xa, _), (xb, _) in zip(one, *halves, strict=True):
        assert torch.equal(x, torch.cat([xa, xb]))
    val = [make_loader(params, folder, "val", batch_size=100, rank=r, world_size=2) for r in (0, 1)]
    seen = sorted(int(k) for loader in val for keys in loader.batch_sampler for k in keys[:, 0])
    assert seen == list(range(params.val_samples))
    assert len(val[0]) == len(val[1])


# --- real runs ----------------------------------------------------------------------------------


# --- bench-data -----------------------------------------------------------------------------
