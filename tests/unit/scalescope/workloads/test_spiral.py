"""The spiral workload: its data set, its MLP and FLOP count, its data module and its entry
in the workload registry."""

from __future__ import annotations

import pytest
import torch

from scalescope.errors import ConfigError
from scalescope.workloads import REGISTRY, build_workload, get, validate_params
from scalescope.workloads.params import SpiralParams
from scalescope.workloads.spiral import SpiralDataModule, SpiralMLP, make_spirals

# --- make_spirals ----------------------------------------------------------------------------


def test_make_spirals_is_deterministic_for_a_seed() -> None:
    p = SpiralParams(num_samples=1000, data_seed=3)
    x1, y1 = make_spirals(p)
    x2, y2 = make_spirals(p)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    x3, _ = make_spirals(SpiralParams(num_samples=1000, data_seed=4))
    assert not torch.equal(x1, x3)


def test_make_spirals_does_not_depend_on_the_global_rng() -> None:
    p = SpiralParams(num_samples=500)
    torch.manual_seed(1)
    x1, _ = make_spirals(p)
    torch.manual_seed(2)
    x2, _ = make_spirals(p)
    assert torch.equal(x1, x2)


@pytest.mark.parametrize("n", [2, 1000, 1001])
def test_make_spirals_is_balanced_and_shaped(n: int) -> None:
    x, y = make_spirals(SpiralParams(num_samples=n))
    assert x.shape == (n, 2) and x.dtype == torch.float32
    assert y.shape == (n,) and y.dtype == torch.int64
    counts = torch.bincount(y, minlength=2).tolist()
    assert sorted(counts) == [n // 2, n - n // 2]
    assert set(y.tolist()) <= {0, 1}


def test_make_spirals_shuffles_the_classes() -> None:
    _, y = make_spirals(SpiralParams(num_samples=1000))
    # Not all of class 0 first: a prefix (the validation split) holds both classes.
    assert 0.3 < y[:200].float().mean().item() < 0.7


def test_make_spirals_without_noise_lies_on_the_two_arms() -> None:
    x, y = make_spirals(SpiralParams(num_samples=400, noise=0.0, turns=1.0))
    r = x.norm(dim=1)
    assert r.max().item() <= 1.0 + 1e-6
    # class 1 is class 0 rotated by pi: angle - 2*pi*r*turns is 0 (class 0) or pi (class 1)
    t = r * 2 * torch.pi
    phase = torch.atan2(x[:, 1], x[:, 0]) - t
    offset = torch.remainder(phase + 0.5 * torch.pi, 2 * torch.pi) - 0.5 * torch.pi
    assert torch.allclose(offset, y.float() * torch.pi, atol=1e-3)


# --- model ---------------------------------------------------------------------------------------


def test_flops_per_sample_of_the_default_net() -> None:
    model = SpiralMLP([64, 32, 16], 0.0, 1e-3)
    macs = 2 * 64 + 64 * 32 + 32 * 16 + 16 * 2  # 2720 multiply-adds per sample forward
    assert model.flops_per_sample() == 6 * macs == 16320


def test_flops_per_sample_ignores_dropout_layers() -> None:
    model = SpiralMLP([8], 0.5, 1e-3)
    assert any(isinstance(m, torch.nn.Dropout) for m in model.net)
    assert model.flops_per_sample() == 6 * (2 * 8 + 8 * 2)


def test_mlp_maps_points_to_two_logits() -> None:
    model = SpiralMLP([8, 4], 0.0, 1e-3)
    assert model(torch.zeros(5, 2)).shape == (5, 2)


# --- data module and registry ---------------------------------------------------------------------


def test_data_module_splits_validation_first_without_a_trainer() -> None:
    params = SpiralParams(num_samples=1000, val_fraction=0.25)
    dm = SpiralDataModule(params, batch_size=50, seed=1)
    dm.setup("fit")
    assert (dm.num_train, dm.num_val) == (750, 250)
    x, y = make_spirals(params)
    assert torch.equal(dm.val_x, x[:250]) and torch.equal(dm.train_y, y[250:])
    assert len(dm.train_dataloader()) == 750 // 50
    assert len(dm.val_dataloader()) == 1


def test_build_workload_from_validated_params() -> None:
    params = validate_params("spiral", {"num_samples": 300, "hidden_sizes": [4]})
    model, dm = build_workload("spiral", params, batch_size=10, seed=0)
    assert isinstance(model, SpiralMLP) and isinstance(dm, SpiralDataModule)
    assert model.flops_per_sample() == 6 * (2 * 4 + 4 * 2)
    assert dm.batch_size == 10


def test_registry_knows_spiral_and_names_the_unknown() -> None:
    assert "spiral" in REGISTRY
    assert get("spiral").params is SpiralParams
    with pytest.raises(ConfigError, match=r"unknown workload 'nosuch'; registered: ") as err:
        get("nosuch")
    listed = str(err.value).split("registered: ")[1].split("; or the import path")[0]
    assert listed.split(", ") == sorted(REGISTRY)
    assert str(err.value).endswith("package.module:ClassName")
