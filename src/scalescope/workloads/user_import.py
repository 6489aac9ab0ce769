"""Users' own LightningModules, named by import path: ``package.module:ClassName``.

Config (the ``workload`` section)::

    workload:
      name: examples.my_project.model:MyModel        # a LightningModule subclass
      datamodule: examples.my_project.model:MyData   # its LightningDataModule (optional when
                                                     # the module has its own train_dataloader)
      init_args: {hidden: 64}                        # keyword arguments of MyModel(...)
      datamodule_init_args: {num_samples: 4096}      # keyword arguments of MyData(...)
      tokens_per_sample: 1024                        # a language model's tokens per sample
                                                     # (optional; see below)

:class:`UserParams` validates the section without importing anything. :func:`check` imports
the classes (and so lightning) and refuses, with one line naming the key, a path that does
not import, a class of the wrong kind and constructor arguments the class rejects; the
trainer calls it before anything starts and ``scalescope sweep`` on the submitting machine.

Import paths resolve against the Python path plus the working directory (inserted first,
as ``python -m`` does): run from the folder that holds the package. A sweep's jobs insert
the directory the sweep was submitted from (see :class:`scalescope.launch.executor.SweepRun`).

Batch size: when the data module's constructor (or the module's, when there is no data
module) takes a ``batch_size`` argument, scalescope passes the per-device batch size that
``trainer.batch_size`` and ``trainer.scaling`` give, and refuses a ``batch_size`` in the init
args (it would bypass the scaling mode). Without such an argument the loaders' own batch
size is used as written; samples are counted from what the loader yields either way
(:mod:`scalescope.workloads.user_measurement`, inside the job).

Tokens: a language model says how many tokens one sample holds with
``workload.tokens_per_sample`` or a ``tokens_per_sample`` class attribute on its module or
data module, read here once (:attr:`Resolved.tokens_per_sample`); the key wins over the
attribute. :mod:`scalescope.workloads.tokens` gives the answer every side uses.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, described
from ..schema import option, positive
from .tokens import KEY as TOKENS_KEY
from .tokens import is_count

IMPORT_PATH = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
BATCH_SIZE_ARG = "batch_size"


def is_import_path(name: str) -> bool:
    """``package.module:ClassName`` (anything with a colon is meant as one)."""
    return ":" in name


def check_syntax(key: str, value: str) -> None:
    if not IMPORT_PATH.match(value):
        raise ConfigError(
            f"{key}: {value!r} is not an import path; expected package.module:ClassName"
        )


@dataclass(frozen=True)
class UserParams:
    """The ``workload`` keys of an import-path workload (besides ``name``)."""

    datamodule: str | None = option(
        None,
        help="import path package.module:ClassName of the LightningDataModule; null = the "
        "module's own train_dataloader",
    )
    init_args: dict[str, Any] = option({}, help="keyword arguments of the module's constructor")
    datamodule_init_args: dict[str, Any] = option(
        {}, help="keyword arguments of the data module's constructor"
    )
    tokens_per_sample: int | None = option(
        None,
        help="a language model's tokens in one sample (its sequence length): lets the "
        "summary plan in tokens (plan.unit: tokens); over the module's or data module's "
        "tokens_per_sample attribute; null = the attribute's, else no tokens counted",
        check=positive,
    )

    def validate(self, where: str) -> None:
        if self.datamodule is not None:
            check_syntax(f"{where}.datamodule", self.datamodule)
        elif self.datamodule_init_args:
            raise ConfigError(
                f"{where}.datamodule_init_args: given without {where}.datamodule; name the "
                "data module they are for"
            )


def add_import_root(path: str | os.PathLike[str] | None = None) -> None:
    """Put ``path`` (default: the working directory) first on sys.path, once."""
    root = os.path.abspath(path if path is not None else os.getcwd())
    if root not in (os.path.abspath(p or os.curdir) for p in sys.path):
        sys.path.insert(0, root)


MIRRORED = {"pytorch_lightning": "lightning.pytorch", "lightning_fabric": "lightning.fabric"}
"""Lightning's standalone packages, by the namespace of the unified package they copy. The
two are separate copies (both installed with ``lightning``): a module written against
``pytorch_lightning`` is not a LightningModule of ``lightning``, and the trainer scalescope
builds, its callbacks and its strategies would refuse it. Imported through
:class:`_Mirror`, ``import pytorch_lightning as pl`` gives ``lightning.pytorch``: the user's
module trains unmodified."""


def _mirrored(name: str) -> str | None:
    """The unified package's module a standalone package's module ``name`` copies, or None."""
    for standalone, unified in MIRRORED.items():
        if name == standalone or name.startswith(standalone + "."):
            return unified + name[len(standalone) :]
    return None


class _Mirror(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an import of a standalone Lightning package's module with the unified
    package's module itself (:data:`MIRRORED`): one module under both names, so a class is the
    same class whichever name imported it. The standalone name's spec carries the module's
    own spec (``loader_state``), which the module keeps."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        real = _mirrored(fullname)
        if real is None:
            return None
        module = importlib.import_module(real)
        spec = importlib.util.spec_from_loader(
            fullname, self, is_package=hasattr(module, "__path__")
        )
        if spec is not None:
            spec.loader_state = module.__spec__
        return spec

    def create_module(self, spec: Any) -> Any:
        return sys.modules[spec.loader_state.name]

    def exec_module(self, module: Any) -> None:
        # the import system gave the module the standalone name's spec: it keeps its own
        module.__spec__ = module.__spec__.loader_state


def mirror_lightning() -> None:
    """Install :class:`_Mirror` first on the import path, once. Where a standalone package
    was imported already (before any user module), its own copy stays."""
    if not any(isinstance(f, _Mirror) for f in sys.meta_path):
        sys.meta_path.insert(0, _Mirror())


def load(key: str, path: str) -> Any:
    """The object ``path`` names; ConfigError naming ``key`` and what failed."""
    check_syntax(key, path)
    add_import_root()
    mirror_lightning()
    module_name, attr = path.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        raise ConfigError(
            f"{key}: cannot import module {module_name!r}: no module named {missing!r} (import "
            f"paths resolve from the working directory {os.getcwd()} and the Python path)"
        ) from None
    except Exception as exc:  # the user's module raised while importing
        raise ConfigError(
            f"{key}: importing module {module_name!r} failed: {described(exc)}"
        ) from None
    where = module_name
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"{key}: {where!r} has no attribute {part!r}")
        obj = getattr(obj, part)
        where = f"{where}.{part}"
    return obj


def _kind(obj: Any) -> str:
    if inspect.isclass(obj):
        # each base by its module too: another copy's LightningModule is not lightning's
        bases = (f"{b.__module__}.{b.__qualname__}" for b in obj.__bases__)
        return f"a class deriving from {', '.join(bases)}"
    if inspect.isfunction(obj):
        return "a function"
    if inspect.ismodule(obj):
        return "a module"
    return f"a {type(obj).__name__}"


def load_class(key: str, path: str, base: type, what: str) -> type:
    obj = load(key, path)
    if not (inspect.isclass(obj) and issubclass(obj, base)):
        raise ConfigError(f"{key}: {path} is not a {what} subclass (it is {_kind(obj)})")
    return obj


def takes_batch_size(cls: type) -> bool:
    try:
        return BATCH_SIZE_ARG in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def _bind(
    key: str,
    cls: type,
    args: Mapping[str, Any],
    batch_size: int | None,
    batch_error: str | None = None,
) -> dict[str, Any]:
    """The keyword arguments ``cls`` is built with; refuses what its signature rejects
    (and, with ``batch_error``, a ``batch_size`` argument scalescope has no size for)."""
    kwargs = dict(args)
    if batch_error is not None and takes_batch_size(cls):
        raise ConfigError(f"{batch_error} ({cls.__name__} takes it as batch_size)")
    if batch_size is not None and takes_batch_size(cls):
        if BATCH_SIZE_ARG in kwargs:
            raise ConfigError(
                f"{key}.{BATCH_SIZE_ARG}: set by scalescope from trainer.batch_size and "
                "trainer.scaling (the per-device batch); remove it and set trainer.batch_size"
            )
        kwargs[BATCH_SIZE_ARG] = batch_size
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{key}: {cls.__name__} rejects them ({exc})") from None
    except ValueError:  # no signature to check (a C extension): the constructor will say
        pass
    return kwargs


@dataclass(frozen=True)
class Resolved:
    """What :func:`check` found: the classes and the exact constructor arguments."""

    module_cls: type
    module_kwargs: dict[str, Any]
    datamodule_cls: type | None
    datamodule_kwargs: dict[str, Any]
    tokens_per_sample: int | None = None
    """The classes' ``tokens_per_sample`` attribute (:func:`declared_tokens`), or None."""

    @property
    def batch_size_passed(self) -> bool:
        kwargs = self.datamodule_kwargs if self.datamodule_cls else self.module_kwargs
        return BATCH_SIZE_ARG in kwargs

    @property
    def batch_size_passed_to(self) -> str | None:
        """The class scalescope gave ``batch_size`` to, or None."""
        if not self.batch_size_passed:
            return None
        return (self.datamodule_cls or self.module_cls).__name__


def check(
    name: str,
    params: UserParams,
    *,
    batch_size: int | None = None,
    batch_error: str | None = None,
) -> Resolved:
    """Import and check an import-path workload (imports lightning); ConfigError otherwise.

    ``batch_size`` is the per-device (micro-)batch passed to a constructor that takes one;
    ``batch_error`` what to say instead when there is none to pass (an accumulation that does
    not divide the per-device batch).
    """
    import lightning as L

    module_cls = load_class("workload.name", name, L.LightningModule, "LightningModule")
    datamodule_cls = None
    if params.datamodule is not None:
        datamodule_cls = load_class(
            "workload.datamodule", params.datamodule, L.LightningDataModule, "LightningDataModule"
        )
    elif not _defines(module_cls, "train_dataloader", L.LightningModule):
        raise ConfigError(
            f"workload.datamodule: missing; {name} defines no train_dataloader of its own, so "
            "name its LightningDataModule (package.module:ClassName)"
        )
    module_kwargs = _bind(
        "workload.init_args",
        module_cls,
        params.init_args,
        batch_size if datamodule_cls is None else None,
        batch_error if datamodule_cls is None else None,
    )
    datamodule_kwargs: dict[str, Any] = {}
    if datamodule_cls is not None:
        datamodule_kwargs = _bind(
            "workload.datamodule_init_args",
            datamodule_cls,
            params.datamodule_init_args,
            batch_size,
            batch_error,
        )
    tokens = declared_tokens(module_cls, datamodule_cls)
    return Resolved(module_cls, module_kwargs, datamodule_cls, datamodule_kwargs, tokens)


def declared_tokens(module_cls: type, datamodule_cls: type | None) -> int | None:
    """The ``tokens_per_sample`` class attribute of the module or its data module (a whole
    number > 0); None where neither has one; ConfigError for another value or two that
    disagree."""
    found: dict[str, int] = {}
    for cls in (module_cls, datamodule_cls):
        value = getattr(cls, TOKENS_KEY, None) if cls is not None else None
        if cls is None or value is None:
            continue
        if not is_count(value):
            raise ConfigError(
                f"{cls.__name__}.{TOKENS_KEY}: a class attribute holding the tokens in one "
                f"sample, a whole number > 0 (e.g. {TOKENS_KEY} = 1024), got {value!r}; or set "
                f"workload.{TOKENS_KEY} in the train config"
            )
        found[cls.__name__] = int(value)
    if len(set(found.values())) > 1:
        said = ", ".join(f"{name}.{TOKENS_KEY} = {v}" for name, v in found.items())
        raise ConfigError(
            f"{said}: the module and its data module disagree; keep one, or set "
            f"workload.{TOKENS_KEY} in the train config"
        )
    return next(iter(found.values()), None)


def _defines(cls: type, method: str, base: type) -> bool:
    """Whether a class between ``cls`` and ``base`` in the MRO defines ``method``."""
    for klass in cls.__mro__:
        if klass is base:
            return False
        if method in vars(klass):
            return True
    return False


def on_meta(cls: type, kwargs: dict[str, Any]) -> Any:
    """``cls(**kwargs)`` with every tensor on the meta device, for what checks before start-up
    read of a module's structure; None where it cannot be built that way (a constructor that
    reads its tensors' values)."""
    import warnings

    import torch

    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")  # the probe's, not the user's to read
            return cls(**kwargs)
    except Exception:
        return None


AUTOMATIC_ONLY: dict[str, tuple[str, str]] = {
    "trainer.accumulate_grad_batches": (
        "accumulates gradients",
        "accumulate in its training_step and leave trainer.accumulate_grad_batches at 1",
    ),
    "trainer.gradient_clip_val": (
        "clips gradients",
        "call self.clip_gradients(optimizer, ...) before its optimizer steps and leave "
        "trainer.gradient_clip_val null",
    ),
}
"""What Lightning does for a module under automatic optimization only (and stops ``fit``
otherwise), by the key that asks for it: (what it does, what the module does instead)."""


def may_optimize_manually(cls: type) -> bool:
    """Whether a class between ``cls`` and LightningModule mentions ``automatic_optimization``
    in its source (or has none to read): only then is the module built to ask it, so that a
    module loading weights in its constructor is not built on the submitting machine."""
    import lightning as L

    for klass in cls.__mro__:
        if klass is L.LightningModule:
            return False
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            return True
        if "automatic_optimization" in source:
            return True
    return False


def manual_refusal(model: Any, asked: Mapping[str, Any]) -> str | None:
    """One line refusing the first of ``asked`` (keys of :data:`AUTOMATIC_ONLY` with the values
    set) where ``model`` optimizes manually; None where it does not or nothing is asked."""
    if not asked or model.automatic_optimization:
        return None
    key, got = next(iter(asked.items()))
    does, instead = AUTOMATIC_ONLY[key]
    return (
        f"{key}: {type(model).__name__} optimizes manually (automatic_optimization = False), "
        f"and Lightning {does} for automatic optimization only; {instead} (got {got})"
    )


def build(name: str, params: UserParams, *, batch_size: int) -> tuple[Any, Any]:
    """(module, data module or None), built as :func:`check` resolved them."""
    r = check(name, params, batch_size=batch_size)
    model = r.module_cls(**r.module_kwargs)
    datamodule = r.datamodule_cls(**r.datamodule_kwargs) if r.datamodule_cls else None
    return model, datamodule
