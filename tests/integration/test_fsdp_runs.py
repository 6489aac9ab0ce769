"""FSDP2 (``trainer.strategy: fsdp``) with real processes on the CPU (gloo): the built-in gpt
workload against DDP (eager and compiled), resnet's residual blocks, a user's module that shards
itself, one sharded by a ``fsdp.wrap`` rule, the model state per rank halving from one rank to
two, and the faults a strategy cannot apply named in the record.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from core_helpers import TINY_GPT, TrainRun, run_train
from resnet_helpers import RESNET
from user_module_helpers import EXAMPLE_FLOPS, _example_sweep, write_package

from scalescope.record import ResultRecord

ONE_EPOCH = ("trainer.max_epochs=1",)


def _finished(run: TrainRun) -> ResultRecord:
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    return result


@pytest.fixture(scope="module")
def gpt(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResultRecord]:
    root = tmp_path_factory.mktemp("fsdp_gpt")
    runs = {
        # each strategy asked for the other's fault: nothing to act on, which the record says
        "ddp2": run_train(
            root,
            *TINY_GPT,
            "trainer.devices=2",
            "faults.allgather_delay_s=0.05",
            output_dir=root / "out",
        ),
        "fsdp2": run_train(
            root, *TINY_GPT, "trainer.devices=2", "trainer.strategy=fsdp", output_dir=root / "out"
        ),
        "fsdp2_compiled": run_train(
            root,
            *TINY_GPT,
            "trainer.devices=2",
            "trainer.strategy=fsdp",
            "trainer.compile=true",
            "trainer.max_epochs=4",
            "trainer.warmup_steps=8",
            output_dir=root / "out",
        ),
        "fsdp1": run_train(root, *TINY_GPT, "trainer.strategy=fsdp", output_dir=root / "out"),
        "fsdp2_bf16": run_train(
            root,
            *TINY_GPT,
            *ONE_EPOCH,
            "trainer.devices=2",
            "trainer.strategy=fsdp",
            "trainer.precision=bf16-mixed",
            "fsdp.reshard_after_forward=false",
            "trainer.accumulate_grad_batches=2",
            "faults.allreduce_delay_s=0.05",
            output_dir=root / "out",
        ),
    }
    return {name: _finished(run) for name, run in runs.items()}


def test_fsdp_trains_gpt_as_ddp_does(gpt: dict[str, ResultRecord]) -> None:
    """Sharding changes where the state lives, not the arithmetic: the same global batches
    reach DDP's validation loss."""
    ddp, fsdp = gpt["ddp2"], gpt["fsdp2"]
    assert ddp.identity.strategy == "ddp" and ddp.sharding is None
    assert fsdp.identity.strategy == "fsdp" and fsdp.identity.world_size == 2
    assert fsdp.steps == ddp.steps
    assert fsdp.val_loss_final == pytest.approx(ddp.val_loss_final, abs=1e-3)


def test_the_record_says_what_was_sharded(gpt: dict[str, ResultRecord]) -> None:
    sharding = gpt["fsdp2"].sharding
    assert sharding is not None
    # each block, then the root, which keeps the embeddings and the tied LM head
    assert sharding["wrapped"] == ["", "blocks.0", "blocks.1"]
    assert sharding["wrapped_classes"] == ["Block", "GptModel"]
    assert sharding["applied_by"] == "scalescope"
    assert sharding["mesh"] == {
        "dims": ["data_parallel"],
        "shape": [2],
        "device_type": "cpu",
        "groups": {"data_parallel": [[0, 1]]},
    }
    assert sharding["reshard_after_forward"] is True
    assert sharding["param_dtype"] is None and sharding["autocast"] is None
    mixed = gpt["fsdp2_bf16"].sharding
    assert mixed is not None
    # each unit's gathered bytes, root first; bf16 gathers half of them
    assert sharding["unit_bytes"] == [12_544, 49_664, 49_664]
    assert mixed["unit_bytes"] == [6_272, 24_832, 24_832]
    assert mixed["param_dtype"] == "bfloat16" and mixed["reduce_dtype"] == "float32"
    assert mixed["autocast"] == "bfloat16" and mixed["reshard_after_forward"] is False
    assert gpt["fsdp2_bf16"].identity.accumulate_grad_batches == 2


def test_the_units_bytes_are_what_each_step_gathers(gpt: dict[str, ResultRecord]) -> None:
    """What FSDP issued per optimizer step, counted where issued, from the record's
    ``unit_bytes`` alone: each block gathered twice (before forward and before backward),
    the root once (FSDP2 keeps it gathered from forward to backward; a validation pass
    leaves it gathered, so the steady mean of its gathers is a little under 1)."""
    record = gpt["fsdp2"]
    assert record.sharding is not None and record.diagnosis is not None
    root, *blocks = record.sharding["unit_bytes"]
    for row in record.diagnosis["ranks"]:
        gathers = row["collectives_per_step"]["all_gather"]
        roots = gathers["count"] - 2 * len(blocks)
        assert 0.0 < roots <= 1.0, gathers
        assert gathers["bytes"] == pytest.approx(2 * sum(blocks) + roots * root), gathers


def test_model_state_per_rank_halves_from_one_rank_to_two(gpt: dict[str, ResultRecord]) -> None:
    """gpt tiny's parameters and AdamW state are its memory: sharded over 2 ranks each holds
    half (within 10%: a shard of an odd-sized tensor is padded), where DDP's hold it all."""
    one, two, ddp = (gpt[k].memory for k in ("fsdp1", "fsdp2", "ddp2"))
    assert one is not None and two is not None and ddp is not None
    whole = one["model_state_bytes"][0]
    assert len(two["model_state_bytes"]) == 2
    for per_rank in two["model_state_bytes"]:
        assert per_rank == pytest.approx(whole / 2, rel=0.10)
    assert ddp["model_state_bytes"] == [whole, whole]
    # AdamW: two moments per parameter, plus a step counter each
    assert one["optimizer_state_bytes"][0] >= 2 * one["parameter_bytes"][0]
    assert one["reserved_peak_gib"] is None and "cpu" in one["allocator_reason"]
    # reshard_after_forward=false, bf16 gathers: still only the shards are model state
    mixed = gpt["fsdp2_bf16"].memory
    assert mixed is not None and mixed["model_state_bytes"] == two["model_state_bytes"]


def test_a_fault_the_strategy_cannot_apply_is_in_the_record(gpt: dict[str, ResultRecord]) -> None:
    """DDP's hook fault under FSDP, FSDP's all-gather fault under DDP: each run says, by name,
    which fault it could not apply and why; a run without faults says nothing."""
    fsdp = gpt["fsdp2_bf16"].faults_not_applied
    assert fsdp is not None and list(fsdp) == ["allreduce_delay_s"]
    assert "allgather_delay_s" in fsdp["allreduce_delay_s"]  # it names the counterpart
    ddp = gpt["ddp2"].faults_not_applied
    assert ddp is not None and list(ddp) == ["allgather_delay_s"]
    assert "not sharded by FSDP2" in ddp["allgather_delay_s"]
    assert gpt["fsdp2"].faults_not_applied is None


def test_a_compiled_fsdp_model_issues_and_counts_the_same_collectives(
    gpt: dict[str, ResultRecord],
) -> None:
    """``trainer.compile`` under FSDP2: FSDP's hooks stay outside the compiled graph, so the
    taps count the collectives eager FSDP issues (gpt tiny at 2 ranks: 3 reduce-scatters,
    55,936 B, and the gathers of 211,200 B a step; fewer on the step after each validation,
    which leaves the root gathered)."""
    compiled, eager = gpt["fsdp2_compiled"], gpt["fsdp2"]
    assert compiled.compile is not None and compiled.compile["enabled"] is True
    assert compiled.compile["by"] == "scalescope" and compiled.compile["warnings"] == []
    for r in (compiled, eager):
        assert r.diagnosis is not None and r.diagnosis["status"] == "recorded"
    per_step = [rank["collectives_per_step"] for rank in compiled.diagnosis["ranks"]]
    eager_step = eager.diagnosis["ranks"][0]["collectives_per_step"]
    for step in per_step:
        assert step["reduce_scatter"] == {"count": 3.0, "bytes": 55936.0}
        gathers = step["all_gather"]
        assert 4.5 <= gathers["count"] <= 5.0
        per_gather = eager_step["all_gather"]["bytes"] / eager_step["all_gather"]["count"]
        assert gathers["bytes"] / gathers["count"] == pytest.approx(per_gather, rel=0.05)
    assert compiled.val_loss_final == pytest.approx(eager.val_loss_final, abs=0.5)


def test_resnet_shards_its_residual_blocks_and_learns(tmp_path: Path) -> None:
    """The resnet workload under FSDP2: each residual block, then the root (stem and head);
    its model state per rank is half of what one rank holds at 2 ranks, and it learns."""
    out = tmp_path / "out"
    tiny = (*RESNET, f"workload.cache_dir={tmp_path / 'cache'}", "trainer.strategy=fsdp")
    one = _finished(run_train(tmp_path, *tiny, output_dir=out))
    two = _finished(run_train(tmp_path, *tiny, "trainer.devices=2", output_dir=out))
    assert two.sharding is not None
    assert two.sharding["wrapped"] == ["", "net.blocks.0", "net.blocks.1"]
    assert two.sharding["wrapped_classes"] == ["BasicBlock", "ResnetModule"]
    assert one.memory is not None and two.memory is not None
    whole = one.memory["model_state_bytes"][0]
    for per_rank in two.memory["model_state_bytes"]:
        assert per_rank == pytest.approx(whole / 2, rel=0.10)
    assert two.diagnosis is not None
    for rank in two.diagnosis["ranks"]:  # one reduce-scatter per unit and step
        assert rank["collectives_per_step"]["reduce_scatter"]["count"] == 3.0
    assert two.val_acc_final is not None and two.val_acc_final > 0.4  # 4 classes: chance 0.25


SHARDS_ITSELF = """
from torch.distributed.fsdp import fully_shard

from examples.my_project.model import MyModel


class Sharded(MyModel):
    \"\"\"Shards itself: each Linear of its net, then the whole module.\"\"\"

    def configure_model(self):
        mesh = self.device_mesh["data_parallel"]
        for layer in self.net:
            if hasattr(layer, "weight"):
                fully_shard(layer, mesh=mesh, reshard_after_forward=False)
        fully_shard(self, mesh=mesh)
"""


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResultRecord]:
    root = tmp_path_factory.mktemp("fsdp_user")
    _example_sweep(root, shapes="")
    write_package(root, "shardpkg", SHARDS_ITSELF)
    common = (
        "tracking.mode='off'",
        "trainer.devices=2",
        "trainer.strategy=fsdp",
        "workload.datamodule_init_args.num_samples=4000",
        *ONE_EPOCH,
    )
    config = ("--config", "examples/my_project.yaml")
    runs = {
        "own": run_train(
            root,
            *common,
            "workload.name=shardpkg.model:Sharded",
            output_dir=root / "out",
            module_args=config,
        ),
        "rule": run_train(
            root,
            *common,
            "fsdp.wrap=[Linear]",
            "trainer.accumulate_grad_batches=2",
            output_dir=root / "out",
            module_args=config,
        ),
    }
    return {name: _finished(run) for name, run in runs.items()}


def test_a_module_that_shards_itself_is_recorded_as_it_did(user: dict[str, ResultRecord]) -> None:
    r = user["own"]
    assert r.identity.strategy == "fsdp" and r.sharding is not None
    assert r.sharding["applied_by"] == "the module"
    assert r.sharding["wrapped"] == ["", "net.0", "net.2", "net.4"]
    assert r.sharding["reshard_after_forward"] is False  # read back from FSDP's units
    # The FLOPs probe counted the whole model, copied before configure_model sharded it.
    assert r.flops_source == "measured" and r.model_flops_per_sample == EXAMPLE_FLOPS


def test_a_wrap_rule_shards_the_classes_it_names(user: dict[str, ResultRecord]) -> None:
    r = user["rule"]
    assert r.sharding is not None and r.sharding["applied_by"] == "fsdp.wrap"
    assert r.sharding["wrapped"] == ["", "net.0", "net.2", "net.4"]
    assert r.sharding["wrapped_classes"] == ["Linear", "MyModel"]
    for run in user.values():  # their training_step calibrates, its windows under FSDP
        cal = run.diagnosis["calibration"] if run.diagnosis else {}
        assert (cal.get("status"), cal.get("isolates")) == ("measured", "reduce_scatter"), cal
    assert r.model_flops_per_sample == EXAMPLE_FLOPS
    assert r.val_loss_final == pytest.approx(user["own"].val_loss_final, rel=0.05)
    # 3,000 training samples at 32 per rank, 2 micro-batches per optimizer step
    assert r.identity.accumulate_grad_batches == 2


def _refused(tmp_path: Path, config: str, *overrides: str) -> str:
    """The one line a 2-process train of ``config`` (a copy of examples/) is refused with,
    before anything runs or is written."""
    _example_sweep(tmp_path, shapes="")
    run = run_train(
        tmp_path,
        "tracking.mode='off'",
        "trainer.devices=2",
        *overrides,
        output_dir=tmp_path / "out",
        module_args=("--config", config),
    )
    err = run.stderr.strip()
    assert run.returncode == 2, run.describe()
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
    return err


def test_a_wrap_rule_matching_nothing_is_refused_in_one_line(tmp_path: Path) -> None:
    err = _refused(
        tmp_path, "examples/my_project.yaml", "trainer.strategy=fsdp", "fsdp.wrap=[Conv2d]"
    )
    assert "fsdp.wrap: Conv2d matches no submodule" in err, err


@pytest.mark.gpu
def test_on_a_gpu_fsdp_records_the_allocator_and_bf16_gathers(tmp_path: Path) -> None:
    """One GPU (NCCL, a 1-rank mesh): the reserved peak, allocation retries and OOMs are
    recorded beside the model state, and bf16-mixed gathers in bf16, reduces in fp32."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    run = run_train(
        tmp_path,
        *[a for a in TINY_GPT if a != "trainer.accelerator=cpu"],
        *ONE_EPOCH,
        "trainer.accelerator=gpu",
        "trainer.strategy=fsdp",
        "trainer.precision=bf16-mixed",
        output_dir=tmp_path / "out",
    )
    r = _finished(run)
    assert r.memory is not None and r.sharding is not None
    assert r.memory["reserved_peak_gib"] and r.memory["reserved_peak_gib"][0] > 0
    assert r.memory["alloc_retries"] == [0] and r.memory["ooms"] == [0]
    assert r.sharding["mesh"]["device_type"] == "cuda"
    assert r.sharding["param_dtype"] == "bfloat16" and r.sharding["reduce_dtype"] == "float32"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResultRecord]:
    """The two modules of the wrap-rule issue, with the rules users write: the example MLP
    under ``[torch.nn.Linear]`` and the bag of tokens, whose training_step calls its
    submodules directly, under ``[torch.nn.Embedding, torch.nn.Linear]``."""
    root = tmp_path_factory.mktemp("fsdp_written")
    _example_sweep(root, shapes="")
    common = ("tracking.mode='off'", "trainer.devices=2", "trainer.strategy=fsdp", *ONE_EPOCH)
    runs = {
        "mlp": run_train(
            root,
            *common,
            "fsdp.wrap=[torch.nn.Linear]",
            "workload.datamodule_init_args.num_samples=2000",
            output_dir=root / "out",
            module_args=("--config", "examples/my_project.yaml"),
        ),
        "bag": run_train(
            root,
            *common,
            "fsdp.wrap=[torch.nn.Embedding,torch.nn.Linear]",
            output_dir=root / "out",
            module_args=("--config", "examples/wrap_rules.yaml"),
        ),
    }
    return {name: _finished(run) for name, run in runs.items()}


def test_wrap_rules_as_users_write_them_train_both_modules(
    written: dict[str, ResultRecord],
) -> None:
    mlp, bag = written["mlp"], written["bag"]
    assert mlp.sharding is not None and mlp.sharding["wrapped"] == ["", "net.0", "net.2", "net.4"]
    assert mlp.sharding["wrapped_classes"] == ["Linear", "MyModel"]
    # the bag's training_step never calls forward: nothing is left in its root to gather
    assert bag.sharding is not None and bag.sharding["wrapped"] == ["", "emb", "head"]
    assert bag.sharding["wrapped_classes"] == ["Bag", "Embedding", "Linear"]
    for r in (mlp, bag):
        assert r.identity.strategy == "fsdp" and r.identity.world_size == 2
        assert r.val_loss_final is not None and r.val_loss_final == r.val_loss_final  # not NaN
        assert r.steps > 0


def test_a_rule_leaving_the_bags_head_in_the_root_is_refused_in_one_line(tmp_path: Path) -> None:
    err = _refused(tmp_path, "examples/wrap_rules.yaml", "fsdp.wrap=[torch.nn.Embedding]")
    assert "never calls its forward" in err, err
    assert "head.weight, head.bias" in err and "add their modules' classes to fsdp.wrap" in err
