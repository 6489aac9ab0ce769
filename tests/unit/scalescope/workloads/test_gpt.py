"""The ``gpt`` workload: parameters, synthetic tokens, the FLOP convention, real training.

The training runs are real ``scalescope train`` processes (1 and 2 ranks, gloo on the CPU),
marked ``slow``; validation errors answer before torch is imported.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from scalescope.errors import ConfigError
from scalescope.workloads import build_workload, validate_params
from scalescope.workloads.gpt import GptModel, make_tokens
from scalescope.workloads.params import GptParams

# --- parameters ---------------------------------------------------------------------------------


def test_base_preset_is_gpt2_small_sized() -> None:
    model = GptModel(validate_params("gpt", {"preset": "base"}).shape(), lr=1e-3, weight_decay=0)
    n = sum(p.numel() for p in model.parameters())  # the tied head is counted once
    assert 100e6 < n < 150e6
    assert model.shape.seq_len == 1024


def test_too_few_sequences_for_one_global_batch(tmp_path: Path) -> None:
    from scalescope.config import check_one_step

    with pytest.raises(ConfigError, match=r"^workload\.train_sequences: 16 training samples hold"):
        check_one_step(validate_params("gpt", {"train_sequences": 16}), 32)


@pytest.mark.parametrize(
    ("workload", "params", "key"),
    [
        ("spiral", {"num_samples": 100}, "num_samples"),
        ("resnet", {"train_samples": 16}, "train_samples"),
    ],
)
def test_too_few_samples_names_the_workloads_own_key(workload: str, params: dict, key: str) -> None:
    from scalescope.config import check_one_step

    with pytest.raises(ConfigError, match=rf"^workload\.{key}: "):
        check_one_step(validate_params(workload, params), 4096)


# --- tokens -------------------------------------------------------------------------------------


def test_tokens_are_the_same_for_one_seed_and_follow_the_source() -> None:
    p = validate_params("gpt", {"train_sequences": 96, "val_sequences": 32, "noise": 0.2})
    a, b = make_tokens(p), make_tokens(p)
    assert torch.equal(a, b)
    assert a.shape == (128, p.shape().seq_len + 1)
    assert not torch.equal(a, make_tokens(validate_params("gpt", {"data_seed": 1})))
    v = p.shape().vocab_size
    assert int(a.min()) >= 0 and int(a.max()) < v
    # Order 1: each token has one most frequent successor, taken ~(1 - noise) of the time.
    pairs = torch.zeros(v, v)
    pairs.index_put_((a[:, :-1].flatten(), a[:, 1:].flatten()), torch.ones(a[:, 1:].numel()), True)
    share = float(pairs.max(dim=1).values.sum() / pairs.sum())
    assert 0.75 < share < 0.9


def test_datamodule_targets_are_inputs_shifted_by_one() -> None:
    p = validate_params("gpt", {"train_sequences": 64, "val_sequences": 16})
    _, dm = build_workload("gpt", p, batch_size=8, seed=3, steps_per_call=4)
    dm.setup("fit")
    groups = list(dm.train_dataloader())
    assert dm.train_dataloader().num_steps == 8 and len(groups) == 2
    x, y = groups[0][0]
    assert x.shape == y.shape == (8, p.shape().seq_len)
    assert torch.equal(x[:, 1:], y[:, :-1])
    seen = sum(int(vx.shape[0]) for vx, _ in dm.val_dataloader())
    assert seen == 16  # validation covers every sequence once


# --- FLOPs --------------------------------------------------------------------------------------


def counted_flops_per_sample(params: GptParams, batch: int = 2) -> tuple[float, float]:
    """(FlopCounterMode's count of one forward + backward, per sequence; the formula)."""
    model, dm = build_workload("gpt", params, batch_size=batch, seed=0)
    dm.setup("fit")
    x, y = next(iter(dm._batches(dm.train_tokens, batch, shuffle=True)))
    # The CPU's fused attention kernel has no FlopCounterMode formula in torch 2.x (it would
    # count 0); the math backend asks for the same full S x S products as two counted bmms.
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        loss = model.micro_batch_loss(x, y)
        loss.backward()
    return counter.get_total_flops() / batch, model.flops_per_sample()


@pytest.mark.parametrize(
    "params",
    [
        {"preset": "tiny"},
        {"n_layers": 3, "d_model": 128, "n_heads": 4, "seq_len": 256, "vocab_size": 1024},
        {"n_layers": 1, "d_model": 96, "n_heads": 3, "seq_len": 64, "mlp_ratio": 2},
    ],
)
def test_flops_formula_matches_flop_counter(params: dict[str, int]) -> None:
    counted, formula = counted_flops_per_sample(
        validate_params("gpt", {**params, "train_sequences": 8, "val_sequences": 2})
    )
    assert counted == pytest.approx(formula, rel=0.05)


@settings(max_examples=30, deadline=None)
@given(
    layers=st.integers(1, 48),
    heads=st.integers(1, 16),
    head_dim=st.integers(1, 128),
    seq=st.integers(1, 4096),
    vocab=st.integers(2, 100_000),
)
def test_flops_formula_terms(layers: int, heads: int, head_dim: int, seq: int, vocab: int) -> None:
    """6 x (block weights + head) per token plus 12 L S^2 d; linear in layers' share."""
    p = GptParams(
        n_layers=layers, d_model=heads * head_dim, n_heads=heads, seq_len=seq, vocab_size=vocab
    )
    d = heads * head_dim
    flops = GptModel.flops_per_sample(_Stub(p))  # type: ignore[arg-type]
    expected = 6 * (12 * layers * d * d + d * vocab) * seq + 12 * layers * seq * seq * d
    assert flops == expected
    assert math.isfinite(flops) and flops > 0


class _Stub:
    """The attributes ``flops_per_sample`` reads, without building the weights."""

    def __init__(self, p: GptParams) -> None:
        self.shape = p.shape()

    def block_matmul_params(self) -> int:
        return GptModel.block_matmul_params(self)  # type: ignore[arg-type]


# --- real training ------------------------------------------------------------------------------
