"""GPT: a decoder-only transformer language model on synthetic tokens, compute-bound.

Architecture: learned token and position embeddings, ``n_layers`` pre-norm blocks
(LayerNorm -> causal self-attention through ``scaled_dot_product_attention(is_causal=True)``
-> residual; LayerNorm -> MLP with GELU -> residual), a final LayerNorm and an LM head tied
to the token embedding (as GPT-2). Linear layers carry no bias.

Data: an order-1 Markov source generated identically on every rank from ``data_seed``
(nothing is downloaded). Every token but the first is, with probability ``1 - noise``, the
fixed successor of the previous token under a seeded permutation of the vocabulary, else a
uniformly random token. The loss falls from ln(vocab_size) towards the source's entropy,
so a run shows learning and not just arithmetic. The sequences live in device memory and are
sharded exactly like the spiral's (global batch ``k`` the same samples at every world size;
rank ``r`` takes slice ``r``), grouped ``steps_per_call`` batches per Lightning call.

FLOPs per sample (one sequence of ``S`` tokens), the convention of
:meth:`GptModel.flops_per_sample`::

    6 * (N_blocks + d_model * vocab_size) * S  +  12 * n_layers * S**2 * d_model

``N_blocks`` are the matmul weights of the blocks (``(4 + 2 * mlp_ratio) * d_model**2`` per
layer). The LM head is a real ``d_model x vocab_size`` matmul per token and counts, although
its weight is the (tied) embedding; embedding lookups are not matmuls and count nothing, nor
do LayerNorms, GELU, softmax and the loss. The attention term is the two ``S x S`` matmuls
(Q K^T and A V: ``4 * S**2 * d_model`` forward per layer, twice that backward) over the
*full* score matrix, not halved for the causal mask: this is the PaLM / nanoGPT MFU
convention and what ``torch.utils.flop_counter.FlopCounterMode`` counts, since the kernels
are asked for the full product. Kernels that skip fully masked blocks (flash attention) do
about half the attention work, so at ``base`` (S = 1024, attention 13% of the total) MFU is
about 7% higher than the work the kernel actually did.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import InMemoryDataModule, ShardedBatches, StepGroups, WorkloadModule
from .params import GptParams, GptShape

VAL_BATCH_SEQUENCES = 64
"""Validation batches; the logits of one are ``batch x seq_len x vocab_size`` floats."""


def make_tokens(params: GptParams) -> Tensor:
    """``[train + val, seq_len + 1]`` int64 token ids on the CPU, the same on every rank."""
    shape = params.shape()
    n, s, v = params.train_sequences + params.val_sequences, shape.seq_len + 1, shape.vocab_size
    g = torch.Generator().manual_seed(params.data_seed)
    successor = torch.randperm(v, generator=g)
    random_tokens = torch.randint(0, v, (n, s), generator=g)
    keep_random = torch.rand(n, s, generator=g) < params.noise
    out = torch.empty(n, s, dtype=torch.long)
    out[:, 0] = random_tokens[:, 0]
    for t in range(1, s):  # S vectorised steps over all sequences
        out[:, t] = torch.where(keep_random[:, t], random_tokens[:, t], successor[out[:, t - 1]])
    return out


def cross_entropy(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """Next-token cross entropy on the logits in the dtype they come in (bf16 under
    bf16-mixed), outside autocast, which would first copy all ``batch x seq_len x vocab_size``
    of them to fp32 (about 3 GiB a step at ``base``, batch 16): the softmax kernels accumulate
    in fp32 whatever their input's dtype."""
    with torch.autocast(logits.device.type, enabled=False):
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction=reduction)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        # [b, s, d] -> [b, heads, s, d / heads]
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model, bias=False),
            nn.GELU(),
            nn.Linear(mlp_ratio * d_model, d_model, bias=False),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GptModel(WorkloadModule):
    def __init__(self, shape: GptShape, *, lr: float, weight_decay: float) -> None:
        super().__init__()
        self.shape, self.lr, self.weight_decay = shape, lr, weight_decay
        self.automatic_optimization = False
        d = shape.d_model
        self.wte = nn.Embedding(shape.vocab_size, d)
        self.wpe = nn.Embedding(shape.seq_len, d)
        self.blocks = nn.ModuleList(
            Block(d, shape.n_heads, shape.mlp_ratio) for _ in range(shape.n_layers)
        )
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, shape.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # tied, as in GPT-2
        self.apply(self._init)
        # validation sums: loss, correct tokens, tokens -- reduced over ranks at epoch end
        self._val_sums = torch.zeros(3, dtype=torch.float64)
        self.val_history: list[tuple[int, float, float]] = []

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx: Tensor, targets: Tensor | None = None) -> Tensor:
        """The logits; with ``targets``, the mean loss instead: inside ``forward`` so that
        ``trainer.compile`` (which compiles ``forward``) fuses the loss with the LM head."""
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits  # type: ignore[no-any-return]
        return cross_entropy(logits, targets)

    def fsdp_blocks(self) -> list[nn.Module]:
        """The transformer blocks; the root keeps the embeddings, the final norm and the LM
        head, whose weight is the token embedding's (tied weights stay in one unit)."""
        return list(self.blocks)

    def block_matmul_params(self) -> int:
        """``N_blocks``: the weights of every matmul inside the blocks."""
        s = self.shape
        return s.n_layers * (4 + 2 * s.mlp_ratio) * s.d_model**2

    def flops_per_sample(self) -> float:
        """Training FLOPs per sequence; the convention is in the module docstring."""
        s = self.shape
        dense = 6 * (self.block_matmul_params() + s.d_model * s.vocab_size) * s.seq_len
        attention = 12 * s.n_layers * s.seq_len**2 * s.d_model
        return float(dense + attention)

    def micro_batch_loss(self, x: Tensor, y: Tensor) -> Tensor:
        return self(x, y)  # type: ignore[no-any-return]

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        if x.shape[0] == 0:
            return
        logits = self(x)
        # per token, then summed in float64: a sum of 64k losses in bf16 would keep 3 digits
        loss = cross_entropy(logits, y, reduction="none").sum(dtype=torch.float64)
        correct = (logits.argmax(dim=-1) == y).sum()
        self._val_sums += torch.stack(
            [loss, correct.double(), self._val_sums.new_tensor(y.numel())]
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """AdamW, fused into one kernel per step where the weights are on a GPU (the for-each
        form launches several per group of tensors)."""
        on_gpu = all(p.is_cuda for p in self.parameters())
        return torch.optim.AdamW(
            self.parameters(), lr=self.lr, weight_decay=self.weight_decay, fused=on_gpu or None
        )


class GptDataModule(InMemoryDataModule[GptParams]):
    """Token sequences in device memory; inputs are tokens ``[:-1]``, targets ``[1:]``."""

    train_tokens = val_tokens = torch.empty(0, dtype=torch.long)
    """This rank's copy of the sequences, on the device (set by ``setup``)."""

    @property
    def num_train(self) -> int:
        return self.params.train_sequences

    @property
    def num_val(self) -> int:
        return self.params.val_sequences

    def setup(self, stage: str) -> None:
        tokens = make_tokens(self.params)
        tokens = tokens.to(self._data_device())
        self.val_tokens = tokens[: self.params.val_sequences]
        self.train_tokens = tokens[self.params.val_sequences :]

    def _batches(self, tokens: Tensor, batch_size: int, *, shuffle: bool) -> ShardedBatches:
        return self._sharded(tokens[:, :-1], tokens[:, 1:], batch_size, shuffle=shuffle)

    def train_dataloader(self) -> StepGroups:
        return StepGroups(
            self._batches(self.train_tokens, self.batch_size, shuffle=True), self.steps_per_call
        )

    def val_dataloader(self) -> ShardedBatches:
        return self._batches(self.val_tokens, VAL_BATCH_SEQUENCES, shuffle=False)


def build(
    params: GptParams, *, batch_size: int, seed: int, steps_per_call: int = 1
) -> tuple[GptModel, GptDataModule]:
    model = GptModel(params.shape(), lr=params.lr, weight_decay=params.weight_decay)
    dm = GptDataModule(params, batch_size=batch_size, seed=seed, steps_per_call=steps_per_call)
    return model, dm
