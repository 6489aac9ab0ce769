"""Deliberate faults (config section ``faults``), injected through a Lightning callback.

Each fault is off by default and recorded in the result's config. They exist to test how a
job and the analysis behave when things go wrong: slow steps (preemption within the grace
period), and later slow input or one slow rank.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L

from ..config import FaultsConfig


class FaultInjection(L.Callback):
    def __init__(self, faults: FaultsConfig) -> None:
        self.faults = faults

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        if self.faults.step_sleep_s > 0:
            time.sleep(self.faults.step_sleep_s)


def fault_callbacks(faults: FaultsConfig) -> list[L.Callback]:
    return [FaultInjection(faults)] if faults.active else []
