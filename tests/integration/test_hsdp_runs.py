"""HSDP (``trainer.strategy: hsdp``) with real processes on the CPU (gloo): four ranks as two
shard groups of two (``fsdp.shard_size=2``, as two nodes of two would be by default), against
DDP and FSDP on the same four ranks."""

from __future__ import annotations

import pytest
from core_helpers import TINY_GPT, TrainRun, run_train

from scalescope.record import ResultRecord

FOUR = ("trainer.devices=4", "trainer.max_epochs=2")


def _finished(run: TrainRun) -> ResultRecord:
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    return result


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResultRecord]:
    root = tmp_path_factory.mktemp("hsdp")
    runs = {
        name: run_train(root, *TINY_GPT, *FOUR, *extra, output_dir=root / "out")
        for name, extra in (
            ("ddp", ()),
            ("fsdp", ("trainer.strategy=fsdp",)),
            ("hsdp", ("trainer.strategy=hsdp", "fsdp.shard_size=2")),
        )
    }
    return {name: _finished(run) for name, run in runs.items()}


def test_hsdp_trains_as_ddp_does_on_a_mesh_the_record_names(
    four: dict[str, ResultRecord],
) -> None:
    ddp, hsdp = four["ddp"], four["hsdp"]
    assert hsdp.identity.strategy == "hsdp" and hsdp.identity.world_size == 4
    assert hsdp.steps == ddp.steps
    assert hsdp.val_loss_final == pytest.approx(ddp.val_loss_final, abs=1e-3)
    sharding = hsdp.sharding
    assert sharding is not None
    assert sharding["mesh"]["dims"] == ["replicate", "shard"]
    assert sharding["mesh"]["shape"] == [2, 2]
    assert sharding["mesh"]["groups"] == {
        "replicate": [[0, 2], [1, 3]],
        "shard": [[0, 1], [2, 3]],
    }
    assert sharding["wrapped"] == ["", "blocks.0", "blocks.1"]


def test_hsdp_holds_twice_fsdps_model_state_at_four_ranks(
    four: dict[str, ResultRecord],
) -> None:
    """Sharded over its shard group of 2, not the 4 ranks: about twice FSDP's state per rank
    (the part FSDP2 leaves whole aside), half of DDP's."""
    state = {k: r.memory["model_state_bytes"] for k, r in four.items() if r.memory}
    assert set(state) == {"ddp", "fsdp", "hsdp"}
    for per_rank in state["hsdp"]:
        assert per_rank == pytest.approx(2 * max(state["fsdp"]), rel=0.10)
        assert per_rank == pytest.approx(max(state["ddp"]) / 2, rel=0.10)
