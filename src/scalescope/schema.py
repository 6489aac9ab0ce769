"""Self-documenting, self-validating config dataclasses.

A field's type annotation says what is accepted; ``metadata`` carries its help text and an
optional check. :func:`build` turns a plain mapping (from YAML) into the dataclass, rejecting
unknown keys with the list of valid ones and naming the offending key in every message.
Kept free of torch so that configs validate on a login node in milliseconds.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from .errors import ConfigError

T = TypeVar("T")
Check = Callable[[Any], str | None]
"""Returns None when the value is fine, else a short phrase saying what is wrong."""


def option(default: Any = MISSING, *, help: str, check: Check | None = None) -> Any:  # noqa: A002
    """A config field with its documentation and an optional value check."""
    meta = {"help": help, "check": check}
    if isinstance(default, (list, dict)):
        frozen = default
        return dataclasses.field(default_factory=lambda: type(frozen)(frozen), metadata=meta)
    if is_dataclass(default) and isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def positive(value: Any) -> str | None:
    return None if value is None or value == "auto" or value > 0 else "must be > 0"


def non_negative(value: Any) -> str | None:
    return None if value is None or value == "auto" or value >= 0 else "must be >= 0"


def fraction(value: Any) -> str | None:
    return None if 0 < value < 1 else "must be between 0 and 1 (exclusive)"


def all_positive(value: Any) -> str | None:
    return None if all(v > 0 for v in value) else "every entry must be > 0"


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " or ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin is list:
        return f"a list of {_type_name(get_args(tp)[0])}"
    if origin is dict:
        return "a mapping"
    if tp is type(None):
        return "null"
    if is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true/false"}.get(
        tp, str(tp)
    )


def _convert(value: Any, tp: Any, where: str) -> Any:
    """Return ``value`` as type ``tp`` or raise ConfigError naming ``where``."""
    origin = get_origin(tp)
    if origin is Literal:
        if value in get_args(tp) and type(value) in {type(a) for a in get_args(tp)}:
            return value
        # YAML reads `precision: 32` as an int; accept the string form of literal strings.
        if str(value) in get_args(tp):
            return str(value)
    elif origin in (Union, types.UnionType):
        meant: ConfigError | None = None
        for arm in get_args(tp):
            try:
                return _convert(value, arm, where)
            except ConfigError as exc:
                # a mapping given for an optional section: its own error says what is wrong
                if is_dataclass(arm) and isinstance(value, Mapping) and meant is None:
                    meant = exc
        if meant is not None:
            raise meant
    elif origin is list:
        if isinstance(value, (list, tuple)):
            (item,) = get_args(tp)
            return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    elif origin is dict:
        if isinstance(value, Mapping):
            return dict(value)
    elif is_dataclass(tp):
        if isinstance(value, Mapping):
            return build(tp, value, where=where)  # type: ignore[arg-type]
    elif tp is type(None):
        if value is None:
            return None
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")


class UnknownKeyError(ConfigError):
    """A key the schema does not know, with the closest valid one; its message names where
    the key came from once :meth:`from_route` says it (a file, the command line, ...)."""

    def __init__(self, key: str, valid: list[str], where: str, route: str = "") -> None:
        self.key, self.valid, self.where, self.route = key, valid, where, route
        leaf = key.rsplit(".", 1)[-1]
        close = difflib.get_close_matches(leaf, valid, n=1, cutoff=0.6)
        prefix = f"{where}." if where else ""
        self.suggestion = f"{prefix}{close[0]}" if close else None
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        head = f"{route}: " if route else ""
        super().__init__(
            f"{head}unknown key {key}{hint} (valid keys{' in ' + where if where else ''}: "
            f"{', '.join(valid)})"
        )

    def from_route(self, route: str) -> UnknownKeyError:
        return UnknownKeyError(self.key, self.valid, self.where, route)


def build(cls: type[T], data: Mapping[str, Any] | None, *, where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; every problem names its dotted key."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(valid))
    prefix = f"{where}." if where else ""
    if unknown:
        raise UnknownKeyError(f"{prefix}{unknown[0]!s}", valid, where)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        key = f"{prefix}{f.name}"
        if f.name in data:
            value = _convert(data[f.name], hints[f.name], key)
        elif f.default is not MISSING or f.default_factory is not MISSING:
            continue
        else:
            raise ConfigError(f"missing required key {key}")
        check: Check | None = f.metadata.get("check")
        problem = check(value) if check else None
        if problem:
            raise ConfigError(f"{key}: {problem}, got {value!r}")
        kwargs[f.name] = value
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate(where)
    return obj


def to_dict(obj: Any) -> Any:
    """A plain, YAML/JSON-friendly copy of a config dataclass."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, help) rows for the config reference in docs/config.md."""
    rows: list[tuple[str, str, str, str]] = []
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        if is_dataclass(tp):
            rows.extend(describe(tp, f"{key}."))  # type: ignore[arg-type]
            continue
        if f.default is not MISSING:
            default = repr(f.default)
        elif f.default_factory is not MISSING:
            default = repr(f.default_factory())
        else:
            default = "(required)"
        rows.append((key, _type_name(tp), default, f.metadata.get("help", "")))
    return rows


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested dict, creating the intermediate mappings."""
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted}: {part} is not a section")
        node = child
    node[parts[-1]] = value


__all__ = [
    "build",
    "dataclass",
    "describe",
    "fraction",
    "non_negative",
    "option",
    "positive",
    "set_dotted",
    "to_dict",
]


def below_one(count: Any) -> bool:
    """Not a count of at least one (a bool is not a count)."""
    return isinstance(count, bool) or count < 1


def check_axis(
    key: str,
    values: list[Any],
    *,
    bad: Callable[[Any], bool] | None = None,
    wanted: str = "",
) -> None:
    """A sweep axis (every shape at each value): a non-empty list, every value one that
    ``bad`` accepts, none twice."""
    if not values:
        raise ConfigError(f"{key}: the list is empty; leave it out or name one")
    wrong = [v for v in values if bad is not None and bad(v)]
    if wrong:
        raise ConfigError(f"{key}: {wrong[0]!r} is not {wanted}")
    twice = sorted({v for v in values if values.count(v) > 1})
    if twice:
        raise ConfigError(f"{key}: {twice[0]} is listed twice")
