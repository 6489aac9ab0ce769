"""The projection's what-ifs: the settings that move data-parallel efficiency (a larger batch,
more accumulation, DDP's bucket cap, bf16 gradients; FSDP's resharding, bf16 gathers, and full
against hybrid sharding), each a
line of the projection table, and how one changes the step model (:func:`under`) and the
arguments of :meth:`StepModel.efficiency` (:func:`settings_of`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from analysis.compute.projection.step_time.fsdp_comm import FsdpStepModel
from analysis.compute.projection.step_time.step_model import StepModel
from scalescope.allreduce_model import split_into_buckets


@dataclass(frozen=True)
class WhatIf:
    name: str
    batch_factor: float = 1.0
    accumulate: int | None = None
    bucket_cap_mb: float | None = None
    """DDP's ``bucket_cap_mb`` (MiB): its first bucket takes the cap too."""
    grad_bytes_factor: float = 1.0
    """On the bytes the network term times (DDP's gradients, FSDP's gathers)."""
    model_fields: tuple[tuple[str, Any], ...] = ()
    """Fields of the step model itself the setting changes (FSDP's resharding)."""


def what_ifs(model: StepModel, precision: str = "") -> list[WhatIf]:
    """The settings that move data-parallel efficiency, as lines of the table."""
    out = [WhatIf("as measured")]
    out.append(WhatIf("per-device batch x2", batch_factor=2.0))
    k = 4 if model.accumulate < 4 else 2 * model.accumulate
    out.append(WhatIf(f"accumulation {k}", accumulate=k))
    if isinstance(model, FsdpStepModel):
        return out + fsdp_what_ifs(model, precision)
    out.append(WhatIf("DDP bucket_cap_mb=100", bucket_cap_mb=100.0))
    if "bf16-true" not in precision and "16-true" not in precision:
        out.append(WhatIf("gradients in bf16", grad_bytes_factor=0.5))
    return out


HYBRID = "hybrid sharding (HSDP), a node a shard group"
FULL = "full sharding (FSDP)"
"""The what-ifs of the other way of sharding across nodes (:func:`fsdp_what_ifs`)."""


def fsdp_what_ifs(model: FsdpStepModel, precision: str = "") -> list[WhatIf]:
    """FSDP's own settings: the blocks kept gathered from forward to backward (one gather
    pass fewer, the memory of the gathered blocks more) and bf16 gathers (half the gathered
    bytes; the gradients still reduced in fp32, as ``bf16-mixed`` does), each where the
    series does not run it already; and the other way of sharding across nodes: hybrid
    sharding (HSDP, a shard group per node: its gathers on the node's link, one all-reduce
    of each shard across nodes) for a fully sharded series, full sharding for a hybrid one
    (:data:`HYBRID`, :data:`FULL`)."""
    out = []
    if model.shard_size is None:
        dpn = max(1, model.anchor_world // max(1, model.anchor_nodes))
        out.append(WhatIf(HYBRID, model_fields=(("shard_size", dpn),)))
    else:
        out.append(WhatIf(FULL, model_fields=(("shard_size", None),)))
    if model.reshard_after_forward:
        out.append(
            WhatIf("reshard_after_forward off", model_fields=(("reshard_after_forward", False),))
        )
    gathers_16bit = model.param_dtype in ("bfloat16", "float16") or "16-true" in precision
    if not gathers_16bit:
        out.append(
            WhatIf(
                "gathers in bf16",
                grad_bytes_factor=0.5,
                model_fields=(("scatter_factor", 2.0 * model.scatter_factor),),
            )
        )
    return out


def under(model: StepModel, w: WhatIf) -> StepModel:
    """The step model under what-if ``w`` (``model`` itself unless the setting changes it)."""
    return replace(model, **dict(w.model_fields)) if w.model_fields else model


def settings_of(model: StepModel, w: WhatIf) -> dict[str, Any]:
    """What-if ``w``'s settings for :meth:`StepModel.efficiency`."""
    kw: dict[str, Any] = {}
    if w.batch_factor != 1.0:
        kw["batch"] = model.per_device_batch * w.batch_factor
    if w.accumulate is not None:
        kw["k"] = w.accumulate
        # k micro-batches of the measured size: k times the samples per optimizer step
        kw["batch"] = kw.get("batch", model.per_device_batch) * w.accumulate / model.accumulate
    buckets = model.bucket_bytes
    if w.bucket_cap_mb is not None:
        buckets = tuple(split_into_buckets(int(sum(buckets)), "ddp", w.bucket_cap_mb))
    if w.grad_bytes_factor != 1.0:
        buckets = tuple(b * w.grad_bytes_factor for b in buckets)
    if buckets != model.bucket_bytes:
        kw["buckets"] = buckets
    return kw
