"""``trainer.strategy: hsdp``: FSDP2 on a 2-D (replicate x shard) mesh. The shard group's size
(``fsdp.shard_size``, a node's devices by default) must divide the world, checked before
anything runs; the record names each dimension's groups of ranks; a user's module is sharded
by a wrap rule (its own configure_model would shard on Lightning's 1-D mesh)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from user_module_helpers import EXAMPLE, QUIET, REPO, assert_train_refused

from scalescope.config import load_train_config, shard_size
from scalescope.errors import ConfigError
from scalescope.workloads.sharding import HSDP_DIMS, mesh_groups


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_the_shard_group_is_a_node_unless_set_and_must_divide_the_world() -> None:
    cfg = load_train_config(None, ["trainer.strategy=hsdp"])
    assert shard_size(cfg, 2, 4) == 4 and shard_size(cfg, 1, 1) == 1
    assert shard_size(load_train_config(None, ["fsdp.shard_size=2"]), 2, 4) is None  # ddp
    two = load_train_config(None, ["trainer.strategy=hsdp", "fsdp.shard_size=2"])
    assert shard_size(two, 2, 4) == 2
    for nodes, dpn, size in ((2, 2, 3), (1, 2, 4), (1, 1, 2)):
        cfg = load_train_config(None, ["trainer.strategy=hsdp", f"fsdp.shard_size={size}"])
        with pytest.raises(ConfigError) as err:
            shard_size(cfg, nodes, dpn)
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"fsdp.shard_size: {size} ranks")
        assert f"does not divide the world of {nodes * dpn} ranks" in message


def test_16_mixed_is_refused_with_hsdp_as_with_fsdp() -> None:
    with pytest.raises(ConfigError, match="16-mixed is not run with strategy hsdp"):
        load_train_config(None, ["trainer.strategy=hsdp", "trainer.precision=16-mixed"])


class _Mesh:
    """What mesh_groups reads of a DeviceMesh: its rank tensor and dimension names."""

    def __init__(self, shape: tuple[int, ...], names: tuple[str, ...]) -> None:
        self.mesh = torch.arange(int(torch.tensor(shape).prod())).reshape(shape)
        self.mesh_dim_names = names


def test_the_record_names_the_ranks_of_every_group() -> None:
    """2 nodes of 2 (ranks 0-1 on the first): each shard group is one node's ranks, each
    replica group one rank of each node."""
    assert mesh_groups(_Mesh((2, 2), HSDP_DIMS)) == {
        "replicate": [[0, 2], [1, 3]],
        "shard": [[0, 1], [2, 3]],
    }
    assert mesh_groups(_Mesh((2, 4), HSDP_DIMS))["shard"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert mesh_groups(_Mesh((4,), ("data_parallel",))) == {"data_parallel": [[0, 1, 2, 3]]}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            ("trainer.strategy=hsdp",),
            "fsdp.wrap: under trainer.strategy=hsdp scalescope shards",
        ),
        (
            (
                "trainer.strategy=hsdp",
                "trainer.devices=2",
                "fsdp.wrap=[Linear]",
                "fsdp.shard_size=3",
            ),
            "fsdp.shard_size: 3 ranks per shard group does not divide the world of 2 ranks",
        ),
    ],
    ids=["no wrap rule", "shard size"],
)
def test_train_refuses_before_anything_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    overrides: tuple[str, ...],
    expected: str,
) -> None:
    monkeypatch.chdir(REPO)
    assert_train_refused(
        capsys, tmp_path / "out", ["--config", EXAMPLE, *QUIET, *overrides], expected
    )
