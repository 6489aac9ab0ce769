"""The calibration's passes under FSDP2 (:mod:`.calibration`): gradient sync switched on every
sharded unit, the gradients a pass without it leaves behind, and every unit resharded after.

A pass without gradient sync (``set_requires_gradient_sync(False)``, FSDP2's ``no_sync``)
skips the reduce-scatters and keeps the all-gathers, which both kinds of window run: ``synced
- no_sync`` per pass is the exposed reduce-scatter only. Such a backward keeps its gradients
unsharded, on each sharded parameter's unsharded counterpart, where the module's own
``zero_grad`` (which sees the sharded parameters) does not reach them, and a later synced
backward would add them to its own. :func:`discard_unsharded_grads` drops them (set to None),
as ``zero_grad(set_to_none=True)`` drops the sharded ones. FSDP2 has no public call for that:
its per-parameter state is read through private attributes (torch 2.13:
``FSDPModule._get_fsdp_state()._fsdp_param_groups[i].fsdp_params``), and where a torch
version has none of them the calibration does not run under FSDP, with that reason.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ....collectives import DDP_GRADIENT, FSDP_REDUCE_SCATTER, FSDP_REPLICA_ALL_REDUCE
from ...faults.fsdp_comms import is_hybrid

ISOLATES = {
    "ddp": DDP_GRADIENT.operation,
    "fsdp": FSDP_REDUCE_SCATTER.operation,
    "hsdp": f"{FSDP_REDUCE_SCATTER.operation}+{FSDP_REPLICA_ALL_REDUCE.key}",
}
"""Per strategy, the collectives whose exposed time ``synced - no_sync`` per pass isolates
(the section's ``isolates``): DDP's gradient all-reduce; under FSDP the reduce-scatter only,
the all-gathers running in both kinds of window; under HSDP the reduce-scatter and the
all-reduce of each shard across the shard groups, which a pass without sync skips too."""


def isolates(units: list[Any]) -> str:
    """:data:`ISOLATES`' entry for a module sharded into ``units`` (none: DDP's): HSDP's
    where they are sharded over a 2-D mesh (replicate x shard)."""
    if not units:
        return ISOLATES["ddp"]
    return ISOLATES["hsdp" if any(is_hybrid(u) for u in units) else "fsdp"]


NO_GRAD_STATE = (
    "not run under FSDP2: this torch version's FSDP keeps no per-parameter state where it "
    "was looked for (_get_fsdp_state()._fsdp_param_groups[i].fsdp_params), so the "
    "gradients a window without gradient sync leaves unsharded could not be dropped"
)


def set_gradient_sync(units: list[Any], on: bool) -> None:
    """Whether the coming backward reduce-scatters, on every unit (each one once)."""
    for unit in units:
        unit.set_requires_gradient_sync(on, recurse=False)


def sharded_params(units: list[Any]) -> list[Any] | None:
    """FSDP2's per-parameter state (``FSDPParam``) of every unit, or None where this torch
    keeps none where it is looked for (private attributes, read only)."""
    out: list[Any] = []
    for unit in units:
        get_state = getattr(unit, "_get_fsdp_state", None)
        groups = getattr(get_state(), "_fsdp_param_groups", None) if get_state else None
        if groups is None:
            return None
        for group in groups:
            params = getattr(group, "fsdp_params", None)
            if params is None:
                return None
            out.extend(params)
    return out


def discard_unsharded_grads(params: list[Any]) -> None:
    """Drop the gradients a backward without gradient sync left unsharded: on the unsharded
    parameter (FSDP's own dtype) or, where the reductions run in another dtype (bf16
    gathers, fp32 reductions), upcast into its accumulated gradient."""
    for param in params:
        unsharded = getattr(param, "_unsharded_param", None)  # made at the first gather
        if unsharded is not None:
            unsharded.grad = None
        if getattr(param, "unsharded_accumulated_grad", None) is not None:
            param.unsharded_accumulated_grad = None


def resharded(units: list[Any]) -> None:
    """Every unit back to its shards, with FSDP's per-iteration state cleared, whatever the
    passes left (a validation pass leaves the root gathered; a pass that raised, units
    gathered mid-forward): FSDP2's recovery, ``reset_iter_state`` on each outermost unit,
    where this torch has it and the unit is FSDP's root; then each unit's own ``reshard``
    (a unit already resharded stays as it is)."""
    inner = {id(m) for unit in units for m in unit.modules() if m is not unit}
    for root in (unit for unit in units if id(unit) not in inner):
        reset = getattr(root, "reset_iter_state", None)
        # not FSDP's root, or what it waits on failed with the group: each reshard below
        with contextlib.suppress(Exception):
            if reset is not None:
                reset()
    for unit in units:
        unit.reshard()
