"""A user's module's batch as its loaders yielded it (pure logic: how many samples a batch
holds, the record's identity and ``batch`` section from the counts, with and without gradient
accumulation)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from core_helpers import make_identity
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from scalescope.errors import ScalescopeError
from scalescope.record import Identity
from scalescope.workloads.user_measurement import Counted, batch_size_of, measured_batch


def _ident(world: int = 2, per_device: int = 128) -> Identity:
    return make_identity(
        nodes=1,
        devices_per_node=world,
        world_size=world,
        per_device_batch_size=per_device,
        global_batch_size=per_device * world,
    )


class _Stream(IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        yield from torch.zeros(4, 3)


SIZED = DataLoader(TensorDataset(torch.zeros(10, 3)))
STREAM = DataLoader(_Stream())


def _counted(samples: int, batches: int, largest: int, same: bool | None = False) -> Counted:
    return Counted(samples, samples, None, 0, batches, largest, same)


def test_the_identity_takes_the_measured_batch_and_the_section_keeps_the_exact_figures() -> None:
    # 2 ranks, 47 batches each: 46 of 32 and one of 28 (3,000 samples in 94 batches)
    ident, section = measured_batch(_ident(per_device=32), _counted(3000, 94, 32), "MyData", SIZED)
    assert ident.per_device_batch_size == 32 and ident.global_batch_size == 64
    assert section["per_device_mean"] == pytest.approx(3000 / 94)
    assert section["per_device_max"] == 32 and section["micro_batches"] == 94
    assert (section["passed"], section["passed_to"]) == (32, "MyData")
    assert section["warnings"] == []  # what was passed is what the loader yielded at most
    assert section["data"]["iterable"] is False


@pytest.mark.parametrize(
    ("world", "batches", "samples"),
    [(1, 16, 1010), (2, 32, 1010)],  # 1 rank: 15 of 64, one of 50; 2: each 15 of 32, one of 25
)
def test_a_short_last_batch_leaves_the_recorded_batch_a_full_one(
    world: int, batches: int, samples: int
) -> None:
    # strong scaling, 64 global: 1 and 2 ranks record the same global batch (one series)
    per_device = 64 // world
    counted = _counted(samples, batches, per_device)
    ident, section = measured_batch(_ident(world, per_device), counted, "ImgData", SIZED)
    assert ident.per_device_batch_size == per_device and ident.global_batch_size == 64
    assert section["per_device_mean"] == pytest.approx(samples / batches)  # exact, below 64
    assert section["per_device_max"] == per_device and section["warnings"] == []


def test_a_loader_that_ignores_the_config_is_recorded_as_it_ran() -> None:
    ident, section = measured_batch(_ident(per_device=128), _counted(128, 128, 1), None, SIZED)
    assert ident.per_device_batch_size == 1 and ident.global_batch_size == 2
    assert section["passed"] is None and section["warnings"] == []  # nothing was passed


def test_a_passed_batch_the_loader_did_not_yield_is_a_warning_naming_both() -> None:
    _, section = measured_batch(_ident(per_device=64), _counted(2048, 128, 16), "Data", SIZED)
    (warning,) = section["warnings"]
    assert "batch_size=64 to Data" in warning and "batches of 16 at most" in warning


def test_identical_first_batches_on_the_ranks_are_a_warning() -> None:
    _, section = measured_batch(_ident(), _counted(80, 80, 1, same=True), None, STREAM)
    assert section["data"]["iterable"] is True
    assert "not split by Lightning" in section["data"]["split"]
    assert any("identical" in w for w in section["warnings"])
    _, one = measured_batch(_ident(world=1), _counted(40, 40, 1, same=None), None, STREAM)
    assert one["warnings"] == [] and one["data"]["same_first_batch"] is None


def test_nothing_yielded_keeps_the_configured_batch() -> None:
    ident, section = measured_batch(_ident(per_device=8), _counted(0, 0, 0), None, SIZED)
    assert ident.per_device_batch_size == 8 and section["per_device_mean"] is None


LOADER = DataLoader(TensorDataset(torch.zeros(10, 3)))


def test_the_record_counts_samples_per_optimizer_step_and_per_micro_batch() -> None:
    # 2 ranks, each 40 micro-batches of 4, 4 per step: 10 steps, 160 samples per rank
    ident = dataclasses.replace(
        make_identity(
            nodes=1, devices_per_node=2, world_size=2, per_device_batch_size=16,
            global_batch_size=32,
        ),
        accumulate_grad_batches=4,
    )  # fmt: skip
    counted = Counted(320, 320, None, 0, 80, 4, False, optimizer_steps=10, max_step_samples=16)
    ident2, section = measured_batch(ident, counted, "Data", LOADER)
    assert ident2.per_device_batch_size == 16 and ident2.global_batch_size == 32
    assert section["per_device_mean"] == 16.0
    assert section["per_device_max"] == 16 and section["micro_batch_max"] == 4
    assert section["micro_batch_mean"] == 4.0 and section["optimizer_steps"] == 10
    assert section["accumulate_grad_batches"] == 4
    assert section["passed"] == 4  # the micro-batch went to the constructor
    assert section["warnings"] == []  # what was passed is what the loader yielded


def test_a_combined_batch_counts_every_loaders_part() -> None:
    from scalescope.workloads.user_measurement import training_loaders

    two = {"a": [torch.zeros(2, 3), torch.zeros(2)], "b": torch.zeros(5, 1)}
    assert batch_size_of(object(), two, combined=True) == 7
    assert batch_size_of(object(), two) == 2  # one loader's batch: its first tensor
    assert batch_size_of(object(), [torch.zeros(4, 1), None], combined=True) == 4
    assert training_loaders({"a": SIZED, "b": STREAM}) == [SIZED, STREAM]
    assert training_loaders([SIZED]) == [SIZED] and training_loaders(SIZED) == [SIZED]
    assert training_loaders(None) == []


# --- how big a batch is -------------------------------------------------------------------------


class _Declares:
    def batch_size_of(self, batch: object) -> int:
        return 7


def test_batch_size_is_the_first_tensor_s_first_dimension() -> None:
    x, y = torch.zeros(5, 3), torch.zeros(9)
    assert batch_size_of(object(), (x, y)) == 5
    assert batch_size_of(object(), {"ids": [torch.tensor(1.0), y], "x": x}) == 9  # 0-d skipped
    assert batch_size_of(object(), x) == 5
    assert batch_size_of(_Declares(), (x, y)) == 7  # the module's own rule wins


@dataclasses.dataclass
class _Batch:
    """A batch as some code bases hand it: a dataclass, its tensors in fields."""

    note: str
    tokens: torch.Tensor
    labels: torch.Tensor


def test_a_dataclass_batch_is_read_field_by_field() -> None:
    batch = _Batch("first field holds no tensor", torch.zeros(6, 32), torch.zeros(6))
    assert batch_size_of(object(), batch) == 6
    assert batch_size_of(object(), {"a": batch}) == 6
    with pytest.raises(ScalescopeError, match="define batch_size_of"):
        batch_size_of(object(), _Batch)  # the class itself is no batch


def test_a_batch_without_tensors_asks_for_batch_size_of() -> None:
    with pytest.raises(ScalescopeError, match="define batch_size_of"):
        batch_size_of(object(), ["a", "b"])
