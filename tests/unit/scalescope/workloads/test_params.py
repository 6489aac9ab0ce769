"""The built-in workloads' parameters (scalescope.workloads.params): presets and what a given
value overrides, and bad values refused in one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from resnet_helpers import _params

from scalescope.config import load_train_config
from scalescope.errors import ConfigError
from scalescope.workloads import validate_params
from scalescope.workloads.params import GPT_PRESETS


def test_presets_resolve_and_free_parameters_override_them() -> None:
    p = validate_params("gpt", {"preset": "small", "n_layers": 3})
    shape = p.shape()
    assert shape.n_layers == 3
    assert shape.d_model == GPT_PRESETS["small"]["d_model"]
    assert shape.seq_len == GPT_PRESETS["small"]["seq_len"]
    assert validate_params("gpt", {}).shape().d_model == GPT_PRESETS["tiny"]["d_model"]


@pytest.mark.parametrize(
    ("params", "key", "phrase"),
    [
        ({"preset": "huge"}, "workload.preset", "'tiny' or 'small' or 'base'"),
        ({"d_model": 64, "n_heads": 5}, "workload.n_heads", "do not divide d_model 64"),
        ({"preset": "small", "n_heads": 7}, "workload.n_heads", "do not divide d_model 384"),
        ({"n_layers": 0}, "workload.n_layers", "must be > 0"),
        ({"noise": 1.0}, "workload.noise", "must be in [0, 1)"),
        ({"vocab_size": 1}, "workload.vocab_size", "at least 2"),
        ({"layers": 2}, "workload.layers", "valid keys in workload"),
    ],
)
def test_bad_params_are_one_line_naming_the_key(
    params: dict[str, object], key: str, phrase: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_train_config(None, {"workload": {"name": "gpt", **params}})
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert key in message and phrase in message


def test_presets_fill_only_what_is_not_given(tmp_path: Path) -> None:
    p = _params(tmp_path, preset="small", image_size=24)
    assert (p.image_size, p.num_classes, p.widths, p.depths) == (24, 10, [32, 64, 128], [2, 2, 2])
    assert p.crop_padding == 3
    base = _params(tmp_path, preset="base")
    assert base.widths == [64, 128, 256, 512] and base.image_size == 64
