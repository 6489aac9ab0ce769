"""Workload registry: a name maps to a params dataclass and a lazily imported builder.

Params are validated without importing torch; :func:`build_workload` imports the
Lightning module only inside the job. A new workload registers itself here and needs no
change to the trainer.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..schema import build
from .params import GptParams, ResnetParams, SpiralParams
from .user_import import UserParams, is_import_path


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    params: type
    builder: str
    """``module:function`` returning ``(LightningModule, LightningDataModule)``."""
    description: str


REGISTRY: dict[str, WorkloadSpec] = {}


def register(spec: WorkloadSpec) -> None:
    if spec.name in REGISTRY:
        raise ValueError(f"workload {spec.name!r} is registered twice")
    REGISTRY[spec.name] = spec


register(
    WorkloadSpec(
        name="spiral",
        params=SpiralParams,
        builder="scalescope.workloads.spiral:build",
        description="two interleaved spirals, MLP classifier; data held in device memory",
    )
)
register(
    WorkloadSpec(
        name="gpt",
        params=GptParams,
        builder="scalescope.workloads.gpt:build",
        description="decoder-only transformer LM on synthetic Markov tokens; compute-bound",
    )
)


register(
    WorkloadSpec(
        name="resnet",
        params=ResnetParams,
        builder="scalescope.workloads.resnet:build",
        description="ResNet image classifier; generated uint8 images in memory-mapped shards "
        "on disk, read by a DataLoader with CPU augmentation",
    )
)


def get(name: str) -> WorkloadSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"workload.name: unknown workload {name!r}; registered: {', '.join(sorted(REGISTRY))}; "
            "or the import path of a LightningModule, package.module:ClassName"
        ) from None


def is_user(name: str) -> bool:
    """Whether ``name`` is a user's LightningModule (an import path), not a built-in."""
    return is_import_path(name)


def validate_params(name: str, params: Mapping[str, Any]) -> Any:
    """The workload's params dataclass built from the config's ``workload`` section
    (:class:`~scalescope.workloads.user_import.UserParams` for an import path; torch-free)."""
    if is_import_path(name):
        from .user_import import check_syntax

        check_syntax("workload.name", name)
        return build(UserParams, params, where="workload")
    return build(get(name).params, params, where="workload")


def build_workload(
    name: str,
    params: Any,
    *,
    batch_size: int,
    seed: int,
    steps_per_call: int = 1,
    accumulate_grad_batches: int = 1,
    gradient_clip: tuple[float, str] | None = None,
) -> Any:
    """Import the workload's module (torch, lightning) and build (module, datamodule).

    A workload's training iterable yields groups of ``steps_per_call`` batches (its
    ``training_step`` takes one optimizer step per batch of the group) and exposes
    ``num_steps``, the optimizer steps per epoch.

    An import-path workload is built by :func:`scalescope.workloads.user_import.build` instead: its
    own module and data module (None when the module has its own loaders), as written;
    ``steps_per_call`` does not apply.

    ``batch_size`` is the per-device batch of one optimizer step. A built-in module splits
    it into ``accumulate_grad_batches`` micro-batches itself
    (:meth:`~scalescope.workloads.base.WorkloadModule.training_step`); a user's constructor
    that takes a ``batch_size`` is given the micro-batch, and Lightning accumulates.
    ``gradient_clip`` (value, algorithm) is a built-in module's to apply; Lightning clips a
    user's.
    """
    if is_import_path(name):
        from .user_import import build as build_user

        return build_user(name, params, batch_size=batch_size // accumulate_grad_batches)
    module_name, func = get(name).builder.split(":")
    builder = getattr(importlib.import_module(module_name), func)
    model, datamodule = builder(
        params, batch_size=batch_size, seed=seed, steps_per_call=steps_per_call
    )
    model.accumulate_grad_batches = accumulate_grad_batches
    model.gradient_clip = gradient_clip
    return model, datamodule
