"""The FLOP counter every measured count uses: torch's ``FlopCounterMode`` with formulas for
the fused kernels it has none for: recurrent layers, and attention on a CPU.

``FlopCounterMode`` counts matrix products, convolutions and attention by the operator that
ran. A recurrent layer (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) runs as one fused kernel on a
GPU (cuDNN's ``_cudnn_rnn``, MIOpen's ``miopen_rnn``) and an LSTM does on a CPU (oneDNN's
``mkldnn_rnn_layer``, one call per layer and direction). Without a formula those kernels
count nothing, and a recurrent model's FLOPs per sample (and its MFU) would be the rest of
the model alone: a tenth of the real figure for a small character LSTM.

The formulas count what the kernel computes, in the counter's convention (2 FLOPs per
multiply-add; biases and gate arithmetic not counted). Every 2-D weight of a layer and
direction (input-to-hidden, hidden-to-hidden, and a projection's) multiplies one vector per
token, so the forward pass is ``2 x tokens x`` the summed sizes of the weight matrices, and the
backward pass twice that: the gradients of the inputs and hidden states, and of the weights
(the latter only where the kernel is asked for them). Where cuDNN is off, the same layers run
as separate matrix products that the counter counts itself; those skip two products that the
fused kernels compute anyway (the first layer's input gradient, which the data never needs,
and the hidden gradient of the zero initial state), so they count slightly less.

``F.scaled_dot_product_attention`` on a CPU runs a fused flash kernel
(``_scaled_dot_product_flash_attention_for_cpu``) that the counter has no formula for either,
though it has one for the GPU's kernels: the CPU's is counted with torch's own attention
formulas (``sdpa_flop_count`` and its backward), as the GPU's are: what the math backend's
batched products count, plus the scores the fused backward recomputes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

aten = torch.ops.aten


def _tokens(input_shape: Sequence[int]) -> int:
    """Vectors the layer steps through: time x batch, or a packed sequence's total."""
    return math.prod(input_shape[:-1])


def _matrices(shapes: Sequence[Any]) -> int:
    """The summed sizes of the weight matrices among ``shapes`` (biases left out)."""
    return sum(math.prod(s) for s in shapes if s is not None and len(s) == 2)


def onednn_layer_flop(input_shape, weight_ih, weight_hh, *args, out_shape=None, **kwargs) -> int:
    """``aten.mkldnn_rnn_layer``: one layer, one direction."""
    return 2 * _tokens(input_shape) * _matrices([weight_ih, weight_hh])


def onednn_layer_backward_flop(
    input_shape, weight_ih, weight_hh, *args, out_shape=None, **kwargs
) -> int:
    """``aten.mkldnn_rnn_layer_backward``: the data and weight gradients of one layer."""
    return 2 * onednn_layer_flop(input_shape, weight_ih, weight_hh)


def fused_rnn_flop(input_shape, weights, *args, out_shape=None, **kwargs) -> int:
    """``aten._cudnn_rnn`` and ``aten.miopen_rnn``: every layer and direction in one call,
    ``weights`` their parameters in order."""
    return 2 * _tokens(input_shape) * _matrices(weights)


def fused_rnn_backward_flop(input_shape, weights, *args, out_shape=None, **kwargs) -> int:
    """``aten._cudnn_rnn_backward`` and ``aten.miopen_rnn_backward``: the data gradients
    always (the weights' need them), the weight gradients when the last of ``output_mask``
    (input, hidden, cell, weights) asks for them."""
    mask = kwargs.get("output_mask", args[-1] if args else None)
    wants_weights = bool(mask[3]) if mask is not None and len(mask) == 4 else True
    forward = fused_rnn_flop(input_shape, weights)
    return forward * (2 if wants_weights else 1)


def cpu_attention_flop(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """``aten._scaled_dot_product_flash_attention_for_cpu``: torch's attention formula."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query, key, value)


def cpu_attention_backward_flop(grad_out, query, key, value, *args, out_shape=None, **kwargs):
    """``aten._scaled_dot_product_flash_attention_for_cpu_backward``."""
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out, query, key, value)


FORMULAS = {
    aten.mkldnn_rnn_layer: onednn_layer_flop,
    aten.mkldnn_rnn_layer_backward: onednn_layer_backward_flop,
    aten._cudnn_rnn: fused_rnn_flop,
    aten._cudnn_rnn_backward: fused_rnn_backward_flop,
    aten.miopen_rnn: fused_rnn_flop,
    aten.miopen_rnn_backward: fused_rnn_backward_flop,
    aten._scaled_dot_product_flash_attention_for_cpu: cpu_attention_flop,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_attention_backward_flop,
}


def flop_counter() -> Any:
    """A ``FlopCounterMode`` (not printing) that also counts the kernels of ``FORMULAS``."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False, custom_mapping=FORMULAS)
