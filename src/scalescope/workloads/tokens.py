"""Tokens in one sample: the one answer to "does this workload count tokens, and how many
per sample", for every side that asks.

* The job puts it in the result record (``tokens_per_sample``).
* ``scalescope sweep`` refuses a sweep file's ``plan: {unit: tokens}`` on a workload that
  counts none, before anything is submitted.
* The summary turns a plan in tokens into samples with it (the record's field, or this
  module on an older record's config).

The answer, from the resolved config's ``workload`` section:

* the built-in ``gpt``: its sequence length (``workload.seq_len``, or its size's);
* a user's module (an import path): ``workload.tokens_per_sample`` in the train config;
  else the ``tokens_per_sample`` class attribute of its LightningModule or
  LightningDataModule, read where the classes are imported
  (:func:`scalescope.workloads.user_import.check`) and passed here as ``declared``;
* None for every other workload (``spiral``, ``resnet``, a module that says nothing).

Imports neither torch nor pandas: the analysis reads it on a laptop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KEY = "tokens_per_sample"
"""The config key (``workload.tokens_per_sample``), the class attribute and the record's
field share this name."""


def is_count(value: Any) -> bool:
    """A whole number of tokens > 0 (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def tokens_per_sample(workload: Mapping[str, Any], declared: int | None = None) -> int | None:
    """Tokens in one sample of ``workload`` (a resolved config's ``workload`` section: its
    ``name`` and parameters); ``declared``: the user's classes' ``tokens_per_sample``
    attribute. None when the workload counts no tokens."""
    name = workload.get("name")
    params = {k: v for k, v in workload.items() if k != "name"}
    if name == "gpt":
        from .params import GptParams

        try:
            return int(GptParams(**params).shape().seq_len)
        except (TypeError, ValueError):
            return None
    if isinstance(name, str) and ":" in name:  # a user's module, by import path
        for value in (params.get(KEY), declared):  # the train config's key first
            if isinstance(value, int) and is_count(value):
                return value
        return None
    return None


def no_tokens(workload: Any) -> str:
    """Why ``workload`` (its name) counts no tokens, and what would make it count them."""
    if isinstance(workload, str) and ":" in workload:
        return (
            f"workload {workload} does not say how many tokens one sample holds: set "
            f"workload.{KEY} in the train config, or a {KEY} class attribute on the module "
            "or its data module (docs/your-module.md)"
        )
    return f"workload {workload} counts no tokens (of the built-in workloads, gpt does)"
