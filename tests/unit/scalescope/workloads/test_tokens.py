"""Tokens in one sample (scalescope.workloads.tokens): the one answer the job, the sweep's
check and the summary's plan share."""

from __future__ import annotations

import pytest

from scalescope.errors import ConfigError
from scalescope.workloads.tokens import no_tokens, tokens_per_sample
from scalescope.workloads.user_import import declared_tokens

USER = "examples.my_project.model:MyModel"


def test_gpt_counts_its_sequence_length() -> None:
    assert tokens_per_sample({"name": "gpt"}) == 32  # the tiny preset's
    assert tokens_per_sample({"name": "gpt", "preset": "small"}) == 256
    assert tokens_per_sample({"name": "gpt", "preset": "small", "seq_len": 64}) == 64


@pytest.mark.parametrize("name", ["spiral", "resnet"])
def test_the_other_built_in_workloads_count_no_tokens(name: str) -> None:
    assert tokens_per_sample({"name": name}) is None
    assert tokens_per_sample({"name": name}, declared=512) is None
    assert (
        no_tokens(name) == f"workload {name} counts no tokens (of the built-in workloads, gpt does)"
    )


def test_a_users_module_says_it_with_the_key_or_the_attribute() -> None:
    assert tokens_per_sample({"name": USER}) is None
    assert tokens_per_sample({"name": USER, "tokens_per_sample": None}, declared=None) is None
    assert tokens_per_sample({"name": USER, "tokens_per_sample": 128}) == 128
    assert tokens_per_sample({"name": USER}, declared=512) == 512
    # the train config's key over the class attribute (a length set by a constructor argument)
    assert tokens_per_sample({"name": USER, "tokens_per_sample": 128}, declared=512) == 128
    assert tokens_per_sample({"name": USER, "tokens_per_sample": True}) is None  # not a count
    said = no_tokens(USER)
    assert "workload.tokens_per_sample" in said and "class attribute" in said


class _Module:
    tokens_per_sample = 1024


class _Data:
    tokens_per_sample = 1024


class _Plain:
    pass


def test_the_class_attribute_is_read_from_the_module_or_its_data_module() -> None:
    assert declared_tokens(_Module, None) == 1024
    assert declared_tokens(_Plain, _Data) == 1024
    assert declared_tokens(_Module, _Data) == 1024
    assert declared_tokens(_Plain, None) is None
    assert declared_tokens(_Plain, _Plain) is None


def test_a_wrong_or_disagreeing_attribute_is_one_line_naming_the_class() -> None:
    bad = type("Bad", (), {"tokens_per_sample": 12.5})
    with pytest.raises(ConfigError, match=r"^Bad.tokens_per_sample: a class attribute .* got 12.5"):
        declared_tokens(bad, None)
    prop = type("Prop", (), {"tokens_per_sample": property(lambda self: 3)})
    with pytest.raises(ConfigError, match=r"^Prop.tokens_per_sample: a class attribute"):
        declared_tokens(prop, None)
    other = type("Other", (), {"tokens_per_sample": 2048})
    with pytest.raises(ConfigError, match=r"_Module.tokens_per_sample = 1024, Other.*disagree"):
        declared_tokens(_Module, other)
