"""Model state per rank: the bytes of the parameters, gradients and optimizer state this rank
holds, and on GPUs the allocator's counters (torchtitan logs the same three).

Counted from the tensors themselves at training's end, not from the allocator: exact on any
device, CPU included, and the quantity sharding changes. Under DDP every rank holds the whole
model; under FSDP each holds its local shard (a sharded parameter is a DTensor: its local
tensor is what this rank stores), so the figure falls with the world size. A tied weight is
one parameter and counts once. Activations and the gathered (unsharded) parameters are not
model state: on a GPU they are in the allocator's peaks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

GIB = 2**30


def _local_bytes(tensor: Any) -> int:
    """Bytes this rank stores for ``tensor`` (a DTensor's local shard)."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return int(local.numel()) * int(local.element_size())


def model_state_bytes(module: Any, optimizers: Iterable[Any]) -> dict[str, int]:
    """This rank's parameters, gradients (one per trainable parameter, in its dtype and shard,
    as training holds them between backward and the optimizer step) and optimizer state (every
    tensor of every optimizer's state, AdamW's step counters included), in bytes."""
    params = list(module.parameters())
    parameter = sum(_local_bytes(p) for p in params)
    gradient = sum(_local_bytes(p) for p in params if p.requires_grad)
    state = 0
    for opt in optimizers:
        for per_param in opt.state.values():
            state += sum(_local_bytes(v) for v in per_param.values() if _is_tensor(v))
    return {
        "parameter_bytes": parameter,
        "gradient_bytes": gradient,
        "optimizer_state_bytes": state,
        "model_state_bytes": parameter + gradient + state,
    }


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _reshard(module: Any) -> None:
    """Every FSDP unit back to its shard: a forward without backward (validation, with
    ``reshard_after_forward=False``) leaves the gathered parameters registered in place of
    the sharded ones, which would count the whole model (FSDP2's public ``reshard``; the
    next forward gathers again)."""
    from torch.distributed.fsdp import FSDPModule

    for unit in module.modules():
        if isinstance(unit, FSDPModule):
            unit.reshard()


def allocator_counters(device: Any) -> dict[str, Any] | None:
    """The CUDA allocator's allocation retries (it freed its cache to satisfy a request) and
    out-of-memory errors since the process started, and the device's memory (GiB: what a
    plan checks a model state against); None off CUDA."""
    import torch

    if getattr(device, "type", None) != "cuda":
        return None
    stats = torch.cuda.memory_stats(device)
    return {
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "ooms": int(stats.get("num_ooms", 0)),
        "device_memory_gib": torch.cuda.get_device_properties(device).total_memory / 2**30,
    }


def rank_memory(trainer: Any) -> dict[str, Any]:
    """What one rank sends in the end-of-run gather (``model_state``)."""
    module = trainer.lightning_module
    _reshard(module)
    part: dict[str, Any] = dict(model_state_bytes(module, trainer.optimizers))
    counters = allocator_counters(trainer.strategy.root_device)
    if counters is not None:
        part.update(counters)
    return part


def memory_section(
    per_rank: list[dict[str, Any]], reserved_gib: list[float] | None, accelerator: str
) -> dict[str, Any] | None:
    """The record's ``memory``: per rank (rank order) the model state's bytes and its parts,
    and on GPUs training's reserved peak, allocation retries, OOMs and the device's memory
    (None elsewhere, with the reason). None where no rank measured its model state."""
    parts = [r.get("model_state") for r in per_rank]
    if any(p is None for p in parts):
        return None
    keys = ("model_state_bytes", "parameter_bytes", "gradient_bytes", "optimizer_state_bytes")
    out: dict[str, Any] = {k: [int(p[k]) for p in parts] for k in keys}
    on_gpu = all("alloc_retries" in p for p in parts)
    out["reserved_peak_gib"] = reserved_gib if on_gpu else None
    out["alloc_retries"] = [p["alloc_retries"] for p in parts] if on_gpu else None
    out["ooms"] = [p["ooms"] for p in parts] if on_gpu else None
    out["device_memory_gib"] = [p.get("device_memory_gib") for p in parts] if on_gpu else None
    out["allocator_reason"] = None if on_gpu else f"a {accelerator} run: no CUDA allocator to read"
    return out
