"""The gpt workload with real processes: training at 1 and 2 processes, bf16-mixed on the CPU, a
one-line error from the command.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from core_helpers import TINY_GPT, TrainRun, run_train

from scalescope.record import ResultRecord
from scalescope.workloads.gpt import GptModel
from scalescope.workloads.params import GptParams


def test_heads_not_dividing_width_fails_train_before_anything_runs(tmp_path: Path) -> None:
    run = run_train(
        tmp_path, "workload.name=gpt", "workload.n_heads=3", output_dir=tmp_path / "out"
    )
    err = run.stderr.strip()
    assert run.returncode == 2, run.describe()
    assert len(err.splitlines()) == 1, err
    assert "workload.n_heads: 3 heads do not divide d_model 32" in err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainRun]:
    root = tmp_path_factory.mktemp("gpt")
    one = run_train(root, *TINY_GPT, output_dir=root / "out")
    two = run_train(root, *TINY_GPT, "trainer.devices=2", output_dir=root / "out")
    return {"one": one, "two": two}


def _finished(run: TrainRun) -> ResultRecord:
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    return result


def test_one_process_gpt_trains_and_reports_flops(runs: dict[str, TrainRun]) -> None:
    r = _finished(runs["one"])
    assert r.identity.workload == "gpt"
    assert r.model_flops_per_sample is not None and r.model_flops_per_sample > 0
    shape = GptParams().shape()
    model = GptModel(shape, lr=1e-3, weight_decay=0)
    assert r.model_flops_per_sample == model.flops_per_sample()
    assert r.steps == 3 * 256 // 32 and r.train_samples == 256 and r.val_samples == 64
    # The loss falls from ln(vocab) (uniform guesses) well towards the source's entropy.
    assert r.val_loss_final is not None and r.val_acc_final is not None
    assert r.val_loss_final < 0.7 * math.log(shape.vocab_size)
    assert r.val_acc_final > 0.3
    assert r.config["workload"]["preset"] == "tiny"


def test_two_processes_follow_the_one_process_trajectory(runs: dict[str, TrainRun]) -> None:
    """Strong scaling: the same global batches at world size 2, the same validation loss."""
    one, two = _finished(runs["one"]), _finished(runs["two"])
    assert two.identity.world_size == 2 and two.identity.per_device_batch_size == 16
    assert two.steps == one.steps
    assert one.val_loss_final is not None and two.val_loss_final is not None
    assert two.val_loss_final == pytest.approx(one.val_loss_final, abs=1e-3)


def test_bf16_mixed_on_the_cpu_trains_and_says_so(tmp_path: Path) -> None:
    """The precision axis's other value runs on a CPU-only machine too (autocast to bf16)."""
    run = run_train(tmp_path, *TINY_GPT, "trainer.precision=bf16-mixed", output_dir=tmp_path)
    r = _finished(run)
    assert r.identity.precision == "bf16-mixed"
    assert r.val_loss_final is not None
    assert r.val_loss_final < 0.7 * math.log(GptParams().shape().vocab_size)


def test_a_cpu_run_records_no_device_memory_and_no_compute_split(
    runs: dict[str, TrainRun],
) -> None:
    """No device: no device memory in either phase, and compute is not split into GPU work
    and host overhead, with the reason; the calibration times no collective kernels."""
    from scalescope.job.diagnosis import comm_kernels
    from scalescope.job.diagnosis.compute_split import CPU_REASON

    r = _finished(runs["two"])
    assert r.peak_mem_gib is None and r.val_peak_mem_gib is None
    assert r.diagnosis is not None
    assert r.diagnosis["compute_split"] == {
        "status": "not recorded",
        "reason": CPU_REASON,
        "source": None,
        "ranks": None,
    }
    assert r.diagnosis["calibration"]["status"] == "measured"
    cpu = {"status": "not measured", "reason": comm_kernels.CPU_REASON}
    assert r.diagnosis["calibration"]["comm_kernels"] == [cpu, cpu]


@pytest.mark.gpu
def test_validations_larger_batch_is_recorded_apart_from_trainings_peak(tmp_path: Path) -> None:
    """On a GPU: 2-sequence training steps beside 64-sequence validation batches, whose logits
    (64 x 256 x 8192) dwarf training's whole state: the training peak stays below validation's,
    where one peak over the fit would have reported validation's."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    run = run_train(
        tmp_path,
        "workload.name=gpt",
        "workload.preset=small",
        "workload.train_sequences=64",
        "workload.val_sequences=128",
        "trainer.batch_size=2",
        "trainer.max_epochs=2",
        "trainer.accelerator=gpu",
        "trainer.devices=1",
        "trainer.precision=bf16-mixed",
        "tracking.mode=off",
        output_dir=tmp_path / "out",
    )
    r = _finished(run)
    assert r.peak_mem_gib is not None and r.val_peak_mem_gib is not None
    assert r.peak_mem_gib[0] < r.val_peak_mem_gib[0]
    assert f"(validation {r.val_peak_mem_gib[0]:.2f} GiB)" in run.stdout
