"""A user's module under ``trainer.strategy: fsdp``: its own ``configure_model``, or the block
classes ``fsdp.wrap`` names.

Lightning's ModelParallelStrategy refuses a module without ``configure_model`` only at
set-up, once every rank has started; :func:`check` says it before anything runs, and also
refuses a wrap rule that matches no submodule (the module is built on the meta device for
that: no memory, no initialisation), and a rule that leaves parameters in the root of a module
that never calls its forward (FSDP2 gathers the root's own parameters in the root's forward: a
``training_step`` that calls its submodules directly would meet them still sharded, on every
rank). A dotted rule (``torch.nn.Linear``) is imported and matched by class, subclasses
included; a bare one (``Linear``) by class name. :func:`install_wrap_rule` gives a module the
``configure_model`` its rule describes: each matching submodule sharded, then the root.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from ..errors import ConfigError
from .sharding import FsdpSetting, describe, is_sharded, shard, sharding_mesh


def rule_class(rule: str) -> type | None:
    """The class a dotted rule names, imported as a user writes it (``torch.nn.Linear``, though
    torch defines it in ``torch.nn.modules.linear``; ``package.module.Outer.Inner``); None for a
    bare name, which is matched by class name. ConfigError where a dotted rule imports nothing
    or names no class."""
    import importlib

    if "." not in rule:
        return None
    parts = rule.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest importable module, then attributes
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        if isinstance(obj, type):
            return obj
        break
    raise ConfigError(f"fsdp.wrap: {rule} names no class that can be imported")


def _matches(m: nn.Module, rule: str, cls: type | None) -> bool:
    """Whether submodule ``m`` is one ``rule`` names: an instance of the class a dotted rule
    imports (subclasses included), or of a class whose name a bare rule gives."""
    if cls is not None:
        return isinstance(m, cls)
    return any(c.__name__ == rule for c in type(m).__mro__)


def matching(module: nn.Module, rules: Sequence[str]) -> list[nn.Module]:
    """The submodules (not the root) whose class, or a class it derives from, a rule names,
    in registration order (forward order, for most modules)."""
    wanted = [(rule, rule_class(rule)) for rule in rules]
    return [
        m
        for name, m in module.named_modules()
        if name and any(_matches(m, rule, cls) for rule, cls in wanted)
    ]


def left_in_root(module: nn.Module, rules: Sequence[str]) -> list[str]:
    """The parameters no submodule a rule matches holds: they stay in the root's own FSDP
    unit, whose parameters FSDP2 gathers in the root's forward."""
    held = {id(p) for m in matching(module, rules) for p in m.parameters()}
    return [name for name, p in module.named_parameters() if id(p) not in held]


def calls_forward(cls: type) -> bool | None:
    """Whether the class (or a base it defines methods in, short of Lightning's) calls its own
    forward anywhere (``self(`` or ``self.forward(``), read from its source; None where the
    source cannot be read."""
    import inspect

    import lightning as L

    found = False
    for base in cls.__mro__:
        if base in (L.LightningModule, nn.Module, object) or base.__module__.startswith(
            ("lightning", "torch")
        ):
            continue
        try:
            source = inspect.getsource(base)
        except (OSError, TypeError):
            return None
        found = found or "self(" in source or "self.forward(" in source
    return found


def unmatched(module: nn.Module, rules: Sequence[str]) -> list[str]:
    """The rules that match no submodule of ``module``."""
    return [r for r in rules if not matching(module, [r])]


def check(resolved: Any, name: str, rules: Sequence[str] | None, strategy: str = "fsdp") -> None:
    """Before anything runs: a user's module under fsdp brings its own ``configure_model``
    or a wrap rule, and every rule matches a submodule; under hsdp, a wrap rule (the 2-D mesh
    is scalescope's to build: a module's own ``configure_model`` shards on the mesh it takes).
    ConfigError names the key."""
    import lightning as L

    from .user_import import _defines, on_meta

    cls = resolved.module_cls
    own = _defines(cls, "configure_model", L.LightningModule)
    if strategy == "hsdp" and (own or not rules):
        raise ConfigError(
            f"fsdp.wrap: under trainer.strategy=hsdp scalescope shards {name} on its 2-D mesh "
            "by a wrap rule: name its block classes, e.g. fsdp.wrap=[package.module.Block]"
            + (" (its own configure_model shards on Lightning's 1-D mesh: use fsdp)" if own else "")
        )
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
    module = on_meta(cls, resolved.module_kwargs)
    if module is None:
        return  # not buildable without memory: the job checks the real module
    missing = unmatched(module, rules)
    if missing:
        raise ConfigError(f"fsdp.wrap: {missing_text(missing, module, name)}")
    root = left_in_root(module, rules)
    if root and calls_forward(cls) is False:
        raise ConfigError(f"fsdp.wrap: {bypass_text(root, name)}")


def bypass_text(root: Sequence[str], name: str) -> str:
    """Why a module that never calls its forward cannot keep parameters in the root."""
    shown = ", ".join(root[:6]) + (", ..." if len(root) > 6 else "")
    return (
        f"{name} never calls its forward (self(...)), so FSDP2 would never gather the "
        f"parameters the rule leaves in the root ({shown}); add their modules' classes to "
        "fsdp.wrap, or call self(...) in training_step"
    )


def missing_text(missing: Sequence[str], module: nn.Module, name: str) -> str:
    classes = sorted({type(m).__name__ for n, m in module.named_modules() if n})
    shown = ", ".join(classes[:12]) + (", ..." if len(classes) > 12 else "")
    return f"{', '.join(missing)} matches no submodule of {name}; its submodules' classes: {shown}"


def install_wrap_rule(model: nn.Module, rules: Sequence[str], setting: FsdpSetting) -> None:
    """Give ``model`` (a user's LightningModule without a ``configure_model``) one that shards
    the submodules ``rules`` match, then the root: a subclass of its class, under its name."""
    cls = type(model)
    rule_list = list(rules)

    def configure_model(self: Any) -> None:
        if is_sharded(self):
            return
        shard(self, matching(self, rule_list), sharding_mesh(self, setting), setting)
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
