"""A config's text: YAML read as people mean it, ``key=value`` overrides, deep merges, and
the route (file, command line, sweep file) that a bad key came by."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, yaml_problem
from ..schema import UnknownKeyError, set_dotted


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML with YAML 1.2 core-schema scalars.

    PyYAML follows YAML 1.1, where ``off``/``on``/``yes``/``no`` are booleans (so
    ``tracking.mode: off`` would arrive as False) and ``1e-3`` is a string (no dot). Under
    1.2 only true/false are booleans and ``1e-3`` is a float, which is what people mean.
    """


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"),
)


def load_yaml_text(text: str) -> Any:
    return yaml.load(text, Loader=_Yaml12Loader)  # a SafeLoader subclass: no object tags


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``key.sub=value`` pairs; values are read as YAML scalars/lists (``[64,32]``, ``true``)."""
    data: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", key):
            raise ConfigError(f"override {pair!r}: expected key=value, e.g. trainer.max_epochs=3")
        try:
            value = load_yaml_text(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        set_dotted(data, key, value)
    return data


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge: ``extra`` wins; mappings merge key by key."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def read_yaml(path: str | os.PathLike[str], what: str = "config") -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what} file expected, got a folder: {p}")
    if not p.is_file():
        raise ConfigError(f"{what} file not found: {p}")
    try:
        data = load_yaml_text(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: not valid YAML ({yaml_problem(exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of keys at the top level")
    return data


OverrideLayers = Sequence[tuple[str, Mapping[str, Any]]]
"""Override layers in the order they apply, each with the route it came by (``the command
line``, ``SCALESCOPE_OVERRIDES``, a sweep file's ``overrides``)."""


def has_dotted(data: Mapping[str, Any], key: str) -> bool:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


KEY_AT_START = re.compile(r"^([A-Za-z_]\w*(?:\.\w+)+): ")
"""The dotted key a value's error opens with (``trainer.max_epochs: expected an integer``)."""


def name_route(exc: ConfigError, layers: OverrideLayers, default: str | None) -> ConfigError:
    """``exc`` with the route its key came by: the last override layer that sets the key it
    names (an unknown key, or the key a bad value's message opens with), else the file
    (``default``)."""
    unknown = isinstance(exc, UnknownKeyError)
    named = KEY_AT_START.match(str(exc))
    key = exc.key if unknown else named.group(1) if named else None
    route = next((r for r, layer in reversed(layers) if key and has_dotted(layer, key)), default)
    if unknown:
        return exc.from_route(route) if route else exc
    return ConfigError(f"{route}: {exc}" if route is not None else str(exc))
