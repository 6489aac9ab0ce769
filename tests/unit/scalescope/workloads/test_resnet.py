"""The resnet workload: its loader, its FLOP count, and real runs. Its shards on disk:
test_shards.py; its presets: test_params.py.

Shards are built in each test's own cache folder (a fraction of a second for ``tiny``).
Multi-process tests (concurrent builders, training runs, bench-data) are marked ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from resnet_helpers import (
    _params,
)
from torch.utils.flop_counter import FlopCounterMode

from scalescope.workloads.resnet import ResnetModule, image_spec, make_loader
from scalescope.workloads.shards import open_shards

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
