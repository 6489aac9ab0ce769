"""Base class for scalescope's Lightning modules."""

from __future__ import annotations

from typing import Any

import lightning as L


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
    """

    val_history: list[tuple[int, float, float]]

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)
