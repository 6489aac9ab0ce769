"""Base class for scalescope's Lightning modules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor


class WorkloadModule(L.LightningModule):
    """A LightningModule with the per-step bookkeeping cost of Lightning 2.x removed.

    Lightning records which hook is running by setting ``_current_fx_name`` on the module
    before and after every hook call, about 45 times per training step.
    ``nn.Module.__setattr__`` checks parameters, buffers and submodules on each of those
    (a few microseconds each): about 0.25 ms per step on a 2-core CPU, more than the spiral
    MLP's forward pass. That attribute is a plain string, never a parameter, buffer or
    submodule, so setting it directly is equivalent.

    Workloads also expose ``val_history`` (epoch, val loss, val accuracy) and may expose
    ``flops_per_sample()`` for MFU.

    Built-in workloads train with manual optimization on groups of micro-batches (see
    :class:`~scalescope.workloads.spiral.StepGroups`): one ``training_step`` call takes one
    optimizer step per ``(x, y)`` of the group. A subclass says how one micro-batch's loss is
    computed (:meth:`micro_batch_loss`); the step loop and the diagnosis' calibration pass
    (:meth:`calibration_loss`: forward only, no optimizer step) share it.
    """

    val_history: list[tuple[int, float, float]]

    def micro_batch_loss(self, x: Tensor, y: Tensor) -> Tensor:
        """The training loss of one micro-batch (forward pass only)."""
        raise NotImplementedError

    def training_step(self, batch: Sequence[tuple[Tensor, Tensor]], batch_idx: int) -> Tensor:
        # Manual optimization: the same zero_grad/backward/step as Lightning's automatic loop
        # (DDP all-reduces gradients in every backward), one step per batch of the group.
        opt = self.optimizers()
        assert not isinstance(opt, list)  # one optimizer (configure_optimizers)
        limit = self.trainer.max_steps
        loss = torch.zeros(())
        for x, y in batch:
            if 0 <= limit <= self.trainer.global_step:
                break
            loss = self.micro_batch_loss(x, y)
            opt.zero_grad(set_to_none=True)
            self.manual_backward(loss)
            opt.step()
        return loss.detach()

    def calibration_loss(self, batch: Sequence[tuple[Tensor, Tensor]]) -> Tensor:
        """The loss of the group's first micro-batch: what one optimizer step computes."""
        x, y = batch[0]
        return self.micro_batch_loss(x, y)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)
