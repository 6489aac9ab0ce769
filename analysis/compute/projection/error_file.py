"""The shipped error model's file: ``model_error.json`` beside this module, written by ``python
-m analysis.project fit-error`` (:func:`write`) with the published tables' model
(:func:`.model_error.fit` through :func:`.published.noise_selection.fit_selected`) and the one a
sweep's projection draws with (:func:`.model_error.fit_sweep`), and read back (:func:`load`,
:func:`load_sweep`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from analysis.compute.projection.model_error import NOISE_GRID, ErrorModel

SHIPPED_PATH = Path(__file__).with_name("model_error.json")


def write(
    em: ErrorModel,
    path: Path = SHIPPED_PATH,
    selection: Sequence[dict[str, float]] = (),
    sweep: ErrorModel | None = None,
) -> None:
    """``em`` (with the noise grid and its ``selection``) at ``path``, and under ``sweep``
    the model a sweep's projection draws with (:func:`.model_error.fit_sweep`)."""
    from scalescope.atomic import write_text_atomic

    doc: dict[str, Any] = asdict(em)
    doc["noise_grid"] = list(NOISE_GRID)
    doc["noise_selection"] = list(selection)
    if sweep is not None:
        doc["sweep"] = asdict(sweep)
    write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def _model(data: dict[str, Any]) -> ErrorModel:
    got = {f.name: data[f.name] for f in fields(ErrorModel) if f.name in data}
    if got.get("share_band") is not None:
        got["share_band"] = tuple(got["share_band"])
    return ErrorModel(**got)


def load(path: Path = SHIPPED_PATH) -> ErrorModel:
    """The error model written at ``path``, the one published tables are scored with (its
    recorded selection is for the record)."""
    return _model(json.loads(path.read_text(encoding="utf-8")))


def load_sweep(path: Path = SHIPPED_PATH) -> ErrorModel:
    """The error model a sweep's projection draws with (:func:`fit_sweep`), written beside
    the published one at ``path`` by ``fit-error``."""
    return _model(json.loads(path.read_text(encoding="utf-8"))["sweep"])
