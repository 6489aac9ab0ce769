"""FSDP2's sharding of a module (``trainer.strategy: fsdp``): each block, then the root.

:func:`shard` applies torch's ``fully_shard`` to the blocks a module names and then to the
module itself, on the data-parallel mesh Lightning's ``ModelParallelStrategy`` built, and
says what it applied (the record's ``sharding``). A module sharded by its own
``configure_model`` is read the same way afterwards (:func:`describe`). The root is sharded
last and keeps what no block holds: the embeddings and, in ``gpt``, the LM head whose weight
*is* the token embedding's (tied weights must live in one FSDP unit, and the root is the one
that holds both ends).

Mixed precision is FSDP2's ``MixedPrecisionPolicy``: under ``trainer.precision: bf16-mixed``
each unit gathers its parameters in bf16 and reduces its gradients in fp32, the sharded
parameters and the optimizer state staying fp32; Lightning's autocast runs as under DDP.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

PARAM_DTYPES = {"bf16-mixed": torch.bfloat16}
"""trainer.precision -> the dtype FSDP gathers parameters in (fp32 otherwise)."""
DATA_PARALLEL = "data_parallel"
"""The dimension of Lightning's device mesh FSDP shards over."""
HSDP_DIMS = ("replicate", "shard")
"""HSDP's 2-D mesh: the shard groups replicate each other along the first dimension, and
shard the module among their ranks along the second (FSDP2's convention)."""


@dataclass(frozen=True)
class FsdpSetting:
    """What the job asks of the sharding: from ``fsdp.*`` and ``trainer.precision``."""

    reshard_after_forward: bool = True
    precision: str = "32"
    shard_size: int | None = None
    """Under hsdp, the ranks of one shard group (consecutive ranks: a node's by default);
    None: FSDP, sharded over every rank."""

    @property
    def param_dtype(self) -> torch.dtype | None:
        return PARAM_DTYPES.get(self.precision)

    def policy(self) -> Any:
        """FSDP2's mixed-precision policy: bf16 gathers with fp32 reductions under
        bf16-mixed, fp32 throughout (torch's default policy) otherwise."""
        from torch.distributed.fsdp import MixedPrecisionPolicy

        dtype = self.param_dtype
        if dtype is None:
            return MixedPrecisionPolicy()
        return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def autocast_dtype(precision: str) -> str | None:
    """The dtype Lightning's autocast computes in under ``precision`` (None: no autocast)."""
    return {"bf16-mixed": "bfloat16", "16-mixed": "float16"}.get(precision)


def data_parallel_mesh(module: Any) -> Any:
    """The 1-D mesh to shard over: the data-parallel dimension of Lightning's mesh."""
    mesh = module.device_mesh
    return mesh[DATA_PARALLEL] if DATA_PARALLEL in (mesh.mesh_dim_names or ()) else mesh


def sharding_mesh(module: Any, setting: FsdpSetting | None) -> Any:
    """The mesh ``fully_shard`` takes: FSDP's 1-D data-parallel one, or under hsdp a 2-D
    (replicate x shard) mesh of the same ranks, each shard group ``setting.shard_size``
    consecutive ranks (a node's, when the size is a node's devices)."""
    mesh = data_parallel_mesh(module)
    if setting is None or setting.shard_size is None:
        return mesh
    from torch.distributed.device_mesh import init_device_mesh

    world, size = mesh.size(), setting.shard_size
    return init_device_mesh(mesh.device_type, (world // size, size), mesh_dim_names=HSDP_DIMS)


def mesh_groups(mesh: Any) -> dict[str, list[list[int]]]:
    """Per dimension of ``mesh``, the groups of ranks that communicate along it (under hsdp:
    ``shard``, the ranks that gather and reduce-scatter together; ``replicate``, those that
    all-reduce each shard's gradients)."""
    ranks = mesh.mesh
    names = list(mesh.mesh_dim_names or (f"dim{i}" for i in range(ranks.dim())))
    out = {}
    for i, name in enumerate(names):
        along = ranks.movedim(i, -1).reshape(-1, ranks.shape[i])
        out[name] = sorted(along.tolist())
    return out


def shard(module: nn.Module, blocks: Iterable[nn.Module], mesh: Any, setting: FsdpSetting) -> None:
    """``fully_shard`` each of ``blocks``, then ``module`` (the root). The root's parameters
    are gathered once per step and kept until backward whatever the setting: the root is
    left to FSDP2's own choice (``reshard_after_forward=None``), which keeps the root's
    gathered after forward since backward would gather them again at once. Passing the
    setting to the root too turned that off: one more all-gather of the root every step."""
    from torch.distributed.fsdp import fully_shard

    policy = setting.policy()
    for block in blocks:
        fully_shard(
            block,
            mesh=mesh,
            reshard_after_forward=setting.reshard_after_forward,
            mp_policy=policy,
        )
    fully_shard(module, mesh=mesh, reshard_after_forward=None, mp_policy=policy)


def is_sharded(module: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def sharded_roots(module: nn.Module) -> list[nn.Module]:
    """The outermost modules ``fully_shard`` was applied to within ``module``: ``module``
    itself where it is one, else those of its children (a LightningModule that shards an
    inner model, as Lightning's examples do, or shards its blocks alone). Switching
    the gradient sync of each switches every unit's below it."""
    if is_sharded(module):
        return [module]
    return [root for child in module.children() for root in sharded_roots(child)]


def describe(module: nn.Module, setting: FsdpSetting | None, applied_by: str) -> dict[str, Any]:
    """The record's ``sharding``: the modules ``fully_shard`` wrapped (by name, the root as
    ``""``) and their classes, the mesh, whether the blocks free their gathered parameters
    after forward, and what parameters are gathered and gradients reduced in, read back from
    FSDP's own state (read only) where the module sharded itself; ``applied_by`` says who
    applied it; ``unit_bytes``, each unit's gathered bytes (:func:`unit_bytes`)."""
    from torch.distributed.fsdp import FSDPModule

    units = [(name, m) for name, m in module.named_modules() if isinstance(m, FSDPModule)]
    groups = [(name, g) for name, m in units for g in _param_groups(m)]
    out: dict[str, Any] = {
        "applied_by": applied_by,
        "wrapped": [name for name, _ in units],
        "wrapped_classes": sorted({_own_class(m) for _, m in units}),
        "unit_bytes": unit_bytes(units),
        "mesh": None,
        "param_dtype": None,
        "reduce_dtype": None,
        "reshard_after_forward": None,
    }
    if groups:
        first = groups[0][1]
        mesh = first.mesh_info.mesh
        out["mesh"] = {
            "dims": list(mesh.mesh_dim_names or ()),
            "shape": list(mesh.shape),
            "device_type": mesh.device_type,
            "groups": mesh_groups(mesh),
        }
        out["param_dtype"] = _dtype(first.mp_policy.param_dtype)
        out["reduce_dtype"] = _dtype(first.mp_policy.reduce_dtype)
        # The root keeps its parameters after forward whatever it was asked: the blocks say.
        blocks = {g.post_forward_mesh_info is not None for name, g in groups if name} or None
        out["reshard_after_forward"] = blocks.pop() if blocks and len(blocks) == 1 else None
    if setting is not None:
        out["reshard_after_forward"] = setting.reshard_after_forward
    return out


def unit_bytes(units: list[tuple[str, Any]]) -> list[int]:
    """Each FSDP unit's own parameters, unsharded, in the dtype it gathers them in (its
    policy's ``param_dtype``, else the parameter's own), in ``units``' order: the modules'
    order, the root first, as forward gathers them (the root's gather comes first, then each
    block's as forward reaches it). A parameter belongs to the innermost unit holding it (the
    root's are those no block holds; a tied weight counts once), so the units' bytes add up
    to the model's parameters in that dtype. The all-gather of a unit moves these bytes
    (padding to a multiple of the ranks aside)."""
    owner: dict[int, tuple[int, Any]] = {}
    for i, (_, unit) in enumerate(units):  # outer units first: an inner one takes its own
        for p in unit.parameters():
            owner[id(p)] = (i, p)
    out = [0] * len(units)
    for i, p in owner.values():
        dtype = _gathered_dtype(units[i][1]) or p.dtype
        out[i] += p.numel() * dtype.itemsize  # a DTensor's numel is the unsharded one
    return out


def _gathered_dtype(unit: nn.Module) -> torch.dtype | None:
    """What a unit gathers its parameters in where its policy says (None: their own)."""
    return policy_dtypes(unit)[0]


def policy_dtypes(unit: nn.Module) -> tuple[torch.dtype | None, torch.dtype | None]:
    """(param_dtype, reduce_dtype) of a unit's mixed-precision policy: None each where it
    sets none, or the unit has no parameters of its own."""
    groups = _param_groups(unit)
    if not groups:
        return None, None
    return groups[0].mp_policy.param_dtype, groups[0].mp_policy.reduce_dtype


def _param_groups(unit: nn.Module) -> list[Any]:
    """FSDP2's parameter groups of one unit (none for a unit without parameters of its own)."""
    state = unit._get_fsdp_state()  # type: ignore[operator]
    return list(getattr(state, "_fsdp_param_groups", []) or [])


def _own_class(unit: nn.Module) -> str:
    """The module's own class, not the FSDP subclass ``fully_shard`` swapped in."""
    from torch.distributed.fsdp import FSDPModule

    own = next(c for c in type(unit).__mro__[1:] if not issubclass(c, FSDPModule))
    return own.__name__


def _dtype(dtype: torch.dtype | None) -> str | None:
    """``"bfloat16"``; None where FSDP keeps the parameter's own dtype."""
    return None if dtype is None else str(dtype).removeprefix("torch.")
