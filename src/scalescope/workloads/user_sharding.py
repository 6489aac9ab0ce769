"""A user's module under ``trainer.strategy: fsdp``: its own ``configure_model``, or the block
classes ``fsdp.wrap`` names.

Lightning's ModelParallelStrategy refuses a module without ``configure_model`` only at
set-up, once every rank has started; :func:`check` says it before anything runs, and also
refuses a wrap rule that matches no submodule (the module is built on the meta device for
that: no memory, no initialisation). :func:`install_wrap_rule` gives a module the
``configure_model`` its rule describes: each matching submodule sharded, then the root.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from ..errors import ConfigError
from .sharding import FsdpSetting, data_parallel_mesh, describe, is_sharded, shard


def _names(cls: type) -> set[str]:
    """What a rule may call ``cls`` by: its name, or its full import path."""
    return {cls.__name__, f"{cls.__module__}.{cls.__qualname__}"}


def matching(module: nn.Module, rules: Sequence[str]) -> list[nn.Module]:
    """The submodules (not the root) whose class, or a class it derives from, a rule names,
    in registration order (forward order, for most modules)."""
    wanted = set(rules)
    return [
        m
        for name, m in module.named_modules()
        if name and any(_names(c) & wanted for c in type(m).__mro__)
    ]


def unmatched(module: nn.Module, rules: Sequence[str]) -> list[str]:
    """The rules that match no submodule of ``module``."""
    return [r for r in rules if not matching(module, [r])]


def check(resolved: Any, name: str, rules: Sequence[str] | None) -> None:
    """Before anything runs: a user's module under fsdp brings its own ``configure_model``
    or a wrap rule, and every rule matches a submodule. ConfigError names the key."""
    import lightning as L

    from .user_import import _defines

    cls = resolved.module_cls
    own = _defines(cls, "configure_model", L.LightningModule)
    if not rules:
        if not own:
            raise ConfigError(
                f"fsdp.wrap: {name} has no configure_model to shard itself under "
                "trainer.strategy=fsdp; name its block classes to shard, e.g. "
                "fsdp.wrap=[package.module.Block], or define configure_model"
            )
        return
    if own:
        raise ConfigError(
            f"fsdp.wrap: {name} shards itself in its own configure_model; leave fsdp.wrap "
            f"unset (got {list(rules)})"
        )
    module = _on_meta(cls, resolved.module_kwargs)
    if module is None:
        return  # not buildable without memory: the job checks the real module
    missing = unmatched(module, rules)
    if missing:
        raise ConfigError(f"fsdp.wrap: {missing_text(missing, module, name)}")


def missing_text(missing: Sequence[str], module: nn.Module, name: str) -> str:
    classes = sorted({type(m).__name__ for n, m in module.named_modules() if n})
    shown = ", ".join(classes[:12]) + (", ..." if len(classes) > 12 else "")
    return f"{', '.join(missing)} matches no submodule of {name}; its submodules' classes: {shown}"


def _on_meta(cls: type, kwargs: dict[str, Any]) -> nn.Module | None:
    """``cls(**kwargs)`` with every tensor on the meta device; None where it cannot be built
    that way (a constructor that reads its tensors' values)."""
    import torch

    try:
        with torch.device("meta"):
            module: nn.Module = cls(**kwargs)
        return module
    except Exception:
        return None


def install_wrap_rule(model: nn.Module, rules: Sequence[str], setting: FsdpSetting) -> None:
    """Give ``model`` (a user's LightningModule without a ``configure_model``) one that shards
    the submodules ``rules`` match, then the root: a subclass of its class, under its name."""
    cls = type(model)
    rule_list = list(rules)

    def configure_model(self: Any) -> None:
        if is_sharded(self):
            return
        shard(self, matching(self, rule_list), data_parallel_mesh(self), setting)
        self.sharding = describe(self, setting, applied_by="fsdp.wrap")

    model.__class__ = type(
        cls.__name__,
        (cls,),
        {
            "configure_model": configure_model,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
        },
    )
