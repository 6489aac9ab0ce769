"""The fused recurrent kernels' FLOP formulas, checked against torch's own count of the same
layers run as separate matrix products (oneDNN off): equal but for the two products the
fused kernels compute and the separate ones skip."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from scalescope.workloads.flop_formulas import FORMULAS, flop_counter

BATCH, TIME, INPUT, HIDDEN = 4, 10, 16, 32
TOKENS = BATCH * TIME


def _train_step_flops(layer: nn.Module, counter: FlopCounterMode) -> int:
    x = torch.randn(BATCH, TIME, INPUT)
    with counter:
        out, _ = layer(x)
        out.sum().backward()
    return counter.get_total_flops()


def _separate_products_flops(layer: nn.Module) -> int:
    """torch's own count of the layer run as separate matrix products (oneDNN off)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # oneDNN's flags warn about TF32 on Intel GPUs
        with torch.backends.mkldnn.flags(enabled=False):
            return _train_step_flops(layer, FlopCounterMode(display=False))


def _matrices(layer: nn.Module) -> list[torch.Tensor]:
    return [w for w in layer._flat_weights if w.dim() == 2]


def _skipped_by_separate_products(layer: nn.Module) -> int:
    """What the separate products leave out: the first layer's input gradient (the input
    needs none) and each layer and direction's hidden gradient into the zero initial state."""
    directions = 2 if layer.bidirectional else 1
    names = [n for n in layer._flat_weights_names if n.startswith("weight_")]
    first_ih = [
        w for n, w in zip(names, _matrices(layer), strict=True) if n.startswith("weight_ih_l0")
    ]
    hh = [w for n, w in zip(names, _matrices(layer), strict=True) if n.startswith("weight_hh")]
    assert len(first_ih) == directions
    return 2 * TOKENS * sum(w.numel() for w in first_ih) + 2 * BATCH * sum(w.numel() for w in hh)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("layers", [1, 2])
def test_a_cpu_lstm_counts_what_its_separate_products_count(layers: int, bidirectional: bool):
    torch.manual_seed(0)
    lstm = nn.LSTM(INPUT, HIDDEN, num_layers=layers, batch_first=True, bidirectional=bidirectional)
    fused = _train_step_flops(lstm, flop_counter())
    weights = sum(w.numel() for w in _matrices(lstm))
    assert fused == 3 * 2 * TOKENS * weights  # forward, then data and weight gradients

    separate = _separate_products_flops(lstm)
    assert separate == fused - _skipped_by_separate_products(lstm)


def test_without_the_formulas_a_cpu_lstm_counts_nothing():
    """Why the formulas exist: the counter alone sees no product in oneDNN's kernel."""
    lstm = nn.LSTM(INPUT, HIDDEN, batch_first=True)
    assert _train_step_flops(lstm, FlopCounterMode(display=False)) == 0


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
def test_the_gpu_kernels_formula_is_the_separate_products_count_with_what_they_skip(kind):
    """cuDNN's kernel cannot run here: its formula, given the shapes its call gets (every
    layer's parameters in one list, a projection's too), against the separate products."""
    torch.manual_seed(0)
    layer = kind(INPUT, HIDDEN, num_layers=2, batch_first=True, bidirectional=True)
    shapes = [w.shape for w in layer._flat_weights]
    input_shape = torch.Size([BATCH, TIME, INPUT])
    forward = FORMULAS[torch.ops.aten._cudnn_rnn](input_shape, shapes, 4)
    backward = FORMULAS[torch.ops.aten._cudnn_rnn_backward](
        input_shape, shapes, 4, None, None, None, None, None, None, None,
        output_mask=[True, True, True, True],
    )  # fmt: skip
    separate = _separate_products_flops(layer)
    assert forward + backward == separate + _skipped_by_separate_products(layer)


def test_weights_not_asked_for_halve_the_gpu_backward_and_a_projection_is_counted():
    lstm = nn.LSTM(INPUT, HIDDEN, proj_size=8, batch_first=True)
    shapes = [w.shape for w in lstm._flat_weights]
    input_shape = torch.Size([TIME, BATCH, INPUT])
    forward = FORMULAS[torch.ops.aten._cudnn_rnn](input_shape, shapes, 5)
    assert forward == 2 * TOKENS * (4 * HIDDEN * INPUT + 4 * HIDDEN * 8 + 8 * HIDDEN)
    backward = FORMULAS[torch.ops.aten._cudnn_rnn_backward]
    data_only = backward(input_shape, shapes, 5, [False, True, True, False])
    assert data_only == forward
    assert backward(input_shape, shapes, 5, [True, True, True, True]) == 2 * forward


def test_a_packed_sequence_counts_its_real_steps():
    """A packed input is (total steps, features): its padding is never counted."""
    shapes = [torch.Size([4 * HIDDEN, INPUT]), torch.Size([4 * HIDDEN, HIDDEN])]
    packed = FORMULAS[torch.ops.aten._cudnn_rnn](torch.Size([23, INPUT]), shapes, 2)
    assert packed == 2 * 23 * 4 * HIDDEN * (INPUT + HIDDEN)


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_attention_counts_what_the_math_backends_products_count(causal: bool):
    """The CPU's fused attention kernel, counted with the formulas, against the same attention
    evaluated as batched matrix products (the math backend), which the counter counts itself:
    the same, plus the scores the fused kernel recomputes in backward (torch counts that
    product for the GPU's fused kernels too)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    batch, heads, seq, dim = 2, 4, 64, 16
    q, k, v = (torch.randn(batch, heads, seq, dim, requires_grad=True) for _ in range(3))

    def step(counter: FlopCounterMode) -> int:
        with counter:
            F.scaled_dot_product_attention(q, k, v, is_causal=causal).sum().backward()
        return counter.get_total_flops()

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fused = step(flop_counter())
        assert step(FlopCounterMode(display=False)) == 0  # the kernel the formulas are for
    with sdpa_kernel(SDPBackend.MATH):
        math = step(FlopCounterMode(display=False))
    recomputed_scores = 2 * batch * heads * seq * seq * dim
    assert math > 0 and fused == math + recomputed_scores
