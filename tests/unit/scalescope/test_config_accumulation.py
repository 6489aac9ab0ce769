"""Gradient accumulation's pure logic: the micro-batch and its refusals, the sweep axis, the
record's batch section, the steps of an epoch, and the series it makes in the summary."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest
import torch
from analysis_helpers import make_result
from core_helpers import make_identity
from sweep_helpers import write_sweep
from torch.utils.data import DataLoader, TensorDataset

from analysis.analyze import analyze
from analysis.read.frame import runs_frame
from analysis.read.parse import ParseResult, Run
from scalescope.config import TrainerConfig, check_workload, load_train_config, resolve_batch
from scalescope.errors import ConfigError
from scalescope.launch.sweep_config import load_sweep_config, plan_sweep
from scalescope.workloads.user_measurement import Counted, measured_batch

REPO = Path(__file__).resolve().parents[3]


def test_the_batch_of_a_step_is_split_into_micro_batches() -> None:
    b = resolve_batch(TrainerConfig(batch_size=256, accumulate_grad_batches=4), 2)
    assert (b.per_device_batch_size, b.global_batch_size) == (128, 256)
    assert b.micro_batch_size == 32 and b.check_micro_batch() == 32
    weak = resolve_batch(TrainerConfig(scaling="weak", batch_size=24, accumulate_grad_batches=3), 4)
    assert (weak.per_device_batch_size, weak.global_batch_size, weak.micro_batch_size) == (
        24,
        96,
        8,
    )


def test_a_built_in_workload_refuses_an_accumulation_that_does_not_divide() -> None:
    cfg = load_train_config(
        REPO / "configs/spiral.yaml",
        {"trainer": {"batch_size": 256, "accumulate_grad_batches": 3, "devices": 2}},
    )
    batch = resolve_batch(cfg.trainer, 2)
    assert batch.micro_batch_size is None
    with pytest.raises(ConfigError) as err:
        check_workload(cfg, batch)
    assert str(err.value) == (
        "trainer.accumulate_grad_batches: 3 micro-batches do not divide the per-device batch "
        "of 128; pick a divisor of it (or another trainer.batch_size)"
    )


USER = textwrap.dedent(
    """
    import lightning as L

    class Model(L.LightningModule):
        pass

    class Data(L.LightningDataModule):
        def __init__(self, batch_size: int = 4) -> None:
            super().__init__()
            self.batch_size = batch_size

    class FixedData(L.LightningDataModule):
        pass
    """
)


def test_a_user_constructor_is_given_the_micro_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acc_mod.py").write_text(USER)
    monkeypatch.syspath_prepend(str(tmp_path))

    train = tmp_path / "train.yaml"
    train.write_text("name: user\ntracking: {mode: 'off'}\n")

    def cfg(datamodule: str, acc: int):  # type: ignore[no-untyped-def]
        return load_train_config(
            train,
            {
                "workload": {"name": "acc_mod:Model", "datamodule": f"acc_mod:{datamodule}"},
                "trainer": {"batch_size": 64, "accumulate_grad_batches": acc},
            },
        )

    c = cfg("Data", 4)
    resolved = check_workload(c, resolve_batch(c.trainer, 2))
    assert resolved.datamodule_kwargs == {"batch_size": 8}  # 64 / 2 ranks / 4 passes
    c = cfg("Data", 3)
    with pytest.raises(ConfigError, match=r"do not divide the per-device batch of 32; .*"):
        check_workload(c, resolve_batch(c.trainer, 2))
    # A data module that takes no batch_size is not refused: its loader decides the batch.
    c = cfg("FixedData", 3)
    assert check_workload(c, resolve_batch(c.trainer, 2)).datamodule_kwargs == {}


def test_the_sweep_axis_runs_every_shape_at_each_accumulation(in_tmp: Path) -> None:
    sweep = write_sweep(
        in_tmp,
        shapes=((1, 1), (1, 2)),
        extra='precisions: ["32", "bf16-mixed"]\naccumulate_grad_batches: [1, 4]\nrepeats: 2\n',
    )
    plan = plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    assert plan.num_jobs == 16
    triples = {(sp.shape.label, sp.precision, sp.accumulate) for sp in plan.shapes}
    assert len(triples) == 8
    for sp in plan.shapes:
        assert sp.config.trainer.accumulate_grad_batches == sp.accumulate
        assert sp.label == f"{sp.shape.label}@{sp.precision}@acc{sp.accumulate}"
    (round_one,) = {r for r, _ in plan.submission_order()[:8]}
    assert round_one == 0


@pytest.mark.parametrize(
    ("extra", "overrides", "message"),
    [
        ("accumulate_grad_batches: []\n", "", "accumulate_grad_batches: the list is empty"),
        ("accumulate_grad_batches: [2, 2]\n", "", "accumulate_grad_batches: 2 is listed twice"),
        ("accumulate_grad_batches: [0]\n", "", "accumulate_grad_batches: 0 is not a count"),
        (
            "accumulate_grad_batches: [1, 2]\n",
            "  trainer.accumulate_grad_batches: 2\n",
            "override trainer.accumulate_grad_batches: the sweep's accumulate_grad_batches list",
        ),
        (
            "accumulate_grad_batches: [1, 3]\n",
            "",
            "with 3 micro-batches per step: trainer.accumulate_grad_batches: 3 micro-batches "
            "do not divide",
        ),
    ],
)
def test_a_wrong_accumulation_axis_is_refused_before_anything_is_submitted(
    in_tmp: Path, extra: str, overrides: str, message: str
) -> None:
    sweep = write_sweep(in_tmp, extra=extra, overrides=overrides)
    with pytest.raises(ConfigError, match=None) as err:
        plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    assert message in str(err.value)


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


def test_accumulation_is_one_more_series_axis_in_the_summary() -> None:
    runs = []
    for acc in (1, 4):
        for world in ((1, 1), (1, 2)):
            r = make_result(f"{acc}{world[1]}", world=world, train_time_s=10.0 / world[1])
            ident = dataclasses.replace(r.identity, accumulate_grad_batches=acc)
            runs.append(Run(dataclasses.replace(r, identity=ident), ("x",)))
    analysis = analyze(runs_frame(ParseResult(runs=runs)))
    labels = sorted(set(analysis.scaling["series"]))
    assert len(labels) == 2, labels
    assert labels[0].endswith(" · fp32") and labels[1].endswith(" · fp32 · 4 micro-batches/step")
    # each series has its own speedup at 2 devices
    assert len(analysis.scaling[analysis.scaling["world_size"] == 2]) == 2
