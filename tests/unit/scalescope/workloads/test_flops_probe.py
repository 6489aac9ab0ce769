"""The FLOPs probe's count on the first real step, for a module whose training step cannot
run on a copy (it needs its trainer): counted once, stopped whatever happens to that step, and
never where it is not allowed. In-process, with torch's own FlopCounterMode."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode
from torch.utils.data import DataLoader, TensorDataset

from scalescope.workloads.flops_probe import FlopsProbe

BATCH = 4
LINEAR_FLOPS = 2 * 4 * 3 * 2
"""A Linear(4, 3)'s forward and weight gradient a sample, 2 x 4 x 3 FLOPs each (the input
needs no gradient)."""


class _Auto(torch.nn.Linear):
    """A module under automatic optimization, as Lightning's modules default to."""

    automatic_optimization = True


def _started(
    why_not: str | None = None,
) -> tuple[FlopsProbe, SimpleNamespace, torch.nn.Module, list]:
    """A probe after training's start, whose copy could not run: the stand-in trainer has no
    strategy to move a batch with, as a module needing its trainer cannot run on a copy.
    ``why_not``: why its first step may not be counted (None: it may)."""
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=BATCH)
    trainer = SimpleNamespace(global_rank=0, train_dataloader=loader)
    module = _Auto(4, 3)
    probe = FlopsProbe(lambda: why_not)
    probe.on_train_start(trainer, module)  # type: ignore[arg-type]
    assert probe.problem and probe.flops_per_sample is None
    return probe, trainer, module, next(iter(loader))


def test_the_first_step_is_counted_where_the_copy_cannot_run() -> None:
    probe, trainer, module, batch = _started()
    for i in range(2):
        probe.on_train_batch_start(trainer, module, batch, i)  # type: ignore[arg-type]
        assert (_get_current_dispatch_mode() is not None) == (i == 0)  # the first step alone
        module(batch[0]).sum().backward()
        loss = {"loss": torch.zeros(())}
        probe.on_train_batch_end(trainer, module, loss, batch, i)  # type: ignore[arg-type]
        assert _get_current_dispatch_mode() is None
        assert probe.flops_per_sample == LINEAR_FLOPS
        assert probe.counted_live and probe.problem is None


def test_a_skipped_first_step_stops_the_counter_at_the_epoch_end() -> None:
    probe, trainer, module, batch = _started()
    probe.on_train_batch_start(trainer, module, batch, 0)  # type: ignore[arg-type]
    assert _get_current_dispatch_mode() is not None  # counting
    probe.on_train_epoch_end(trainer, module)  # type: ignore[arg-type]
    assert _get_current_dispatch_mode() is None
    assert probe.flops_per_sample is None and not probe.counted_live
    assert probe.problem is not None and probe.problem.endswith("the module skipped its first step")


def test_an_exception_in_the_first_step_stops_the_counter() -> None:
    probe, trainer, module, batch = _started()
    probe.on_train_batch_start(trainer, module, batch, 0)  # type: ignore[arg-type]
    probe.on_exception(trainer, module, RuntimeError("boom"))  # type: ignore[arg-type]
    assert _get_current_dispatch_mode() is None and probe.flops_per_sample is None


def test_no_count_where_the_first_step_is_not_warm_up() -> None:
    probe, trainer, module, batch = _started("it is timed (no warm-up)")
    copy_problem = probe.problem
    probe.on_train_batch_start(trainer, module, batch, 0)  # type: ignore[arg-type]
    assert _get_current_dispatch_mode() is None
    probe.on_train_batch_end(trainer, module, None, batch, 0)  # type: ignore[arg-type]
    assert probe.flops_per_sample is None and probe.copy_problem == copy_problem
    assert (
        probe.problem == f"{copy_problem}; the first step is not counted: it is timed (no warm-up)"
    )


def test_a_first_step_that_returned_no_loss_is_not_taken() -> None:
    """Under automatic optimization a training step that returns None skips the backward and
    the optimizer step: its count, a forward alone, is not the training step's."""
    probe, trainer, module, batch = _started()
    probe.on_train_batch_start(trainer, module, batch, 0)  # type: ignore[arg-type]
    with torch.no_grad():
        module(batch[0])
    probe.on_train_batch_end(trainer, module, None, batch, 0)  # type: ignore[arg-type]
    assert _get_current_dispatch_mode() is None and probe.flops_per_sample is None
    assert probe.problem is not None and probe.problem.endswith("the first step returned no loss")


class _AutoLSTM(torch.nn.LSTM):
    automatic_optimization = True


def test_a_recurrent_layer_in_the_first_step_is_counted() -> None:
    """oneDNN's fused LSTM kernel, which torch's counter alone counts as nothing: 5 steps a
    sample through 4 x 3 input and 4 x 3 hidden gate weights, forward, then data and weight
    gradients (``flop_formulas``)."""
    loader = DataLoader(TensorDataset(torch.randn(8, 5, 4)), batch_size=BATCH)
    trainer = SimpleNamespace(global_rank=0, train_dataloader=loader)
    lstm = _AutoLSTM(4, 3, batch_first=True)
    probe = FlopsProbe()
    probe.on_train_start(trainer, lstm)  # type: ignore[arg-type]
    batch = next(iter(loader))
    probe.on_train_batch_start(trainer, lstm, batch, 0)  # type: ignore[arg-type]
    lstm(batch[0])[0].sum().backward()
    probe.on_train_batch_end(trainer, lstm, {"loss": torch.zeros(())}, batch, 0)  # type: ignore[arg-type]
    assert probe.flops_per_sample == 3 * 2 * 5 * (4 * 3 * 4 + 4 * 3 * 3)


def test_a_loader_keeping_its_workers_is_read_through_a_twin_and_left_alone() -> None:
    """A rank's shard, shuffled: the twin's first batch is the shard's first, in this process,
    and the loader keeps no iterator it did not have (another iter() of a persistent loader
    restarts the one training reads)."""
    from torch.utils.data import DistributedSampler

    from scalescope.workloads.flops_probe import _first_training_batch

    data = TensorDataset(torch.arange(64.0))
    sampler = DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=3)
    loader = DataLoader(
        data, batch_size=BATCH, sampler=sampler, num_workers=2, persistent_workers=True
    )
    batch, combined = _first_training_batch(loader)
    assert not combined and loader._iterator is None
    assert batch[0].tolist() == [float(i) for i in list(sampler)[:BATCH]]
    both, combined = _first_training_batch({"a": loader, "b": loader})
    assert combined and loader._iterator is None
    assert both["a"][0].tolist() == batch[0].tolist() == both["b"][0].tolist()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")
def test_the_probes_memory_is_not_trainings_peak_on_a_gpu() -> None:
    """The probe's whole-model pass comes before training: once it is done, the allocator's
    peak no longer holds what it allocated (a 256 MiB tensor here), so the record's training
    peak is training's."""
    from scalescope.workloads.flops_probe import _forget_peak

    device = torch.device("cuda")
    probe = torch.empty(64 * 2**20, device=device)  # 256 MiB of fp32
    del probe
    assert torch.cuda.max_memory_allocated(device) >= 2**28
    _forget_peak(device)
    assert torch.cuda.max_memory_allocated(device) < 2**28
