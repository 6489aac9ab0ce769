"""Workload parameter dataclasses (torch-free, so configs validate anywhere)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..schema import all_positive, fraction, non_negative, option, positive


@dataclass(frozen=True)
class SpiralParams:
    num_samples: int = option(10_000, help="points in the data set (both spirals)", check=positive)
    noise: float = option(
        0.05, help="std of Gaussian noise added to each point", check=non_negative
    )
    turns: float = option(2.0, help="how many turns each spiral makes", check=positive)
    val_fraction: float = option(
        0.2, help="share of points held out for validation", check=fraction
    )
    data_seed: int = option(0, help="seed of the data set (identical on every rank)")
    hidden_sizes: list[int] = option(
        [64, 32, 16], help="widths of the hidden layers of the MLP", check=all_positive
    )
    dropout: float = option(0.0, help="dropout after each hidden layer (0 = none)")
    lr: float = option(3e-3, help="Adam learning rate", check=positive)

    @property
    def val_samples(self) -> int:
        return max(1, round(self.num_samples * self.val_fraction))

    @property
    def train_samples(self) -> int:
        return self.num_samples - self.val_samples

    def validate(self, where: str) -> None:
        from ..errors import ConfigError

        if not 0 <= self.dropout < 1:
            raise ConfigError(f"{where}.dropout: must be in [0, 1), got {self.dropout!r}")
        if not self.hidden_sizes:
            raise ConfigError(f"{where}.hidden_sizes: needs at least one layer")
        if (
            self.num_samples * (1 - self.val_fraction) < 2
            or self.num_samples * self.val_fraction < 1
        ):
            raise ConfigError(
                f"{where}.num_samples: too few samples to split, got {self.num_samples}"
            )


GPT_PRESETS: dict[str, dict[str, int]] = {
    # Trains a step in milliseconds on one CPU thread: tests and smoke runs.
    "tiny": {"n_layers": 2, "d_model": 32, "n_heads": 2, "seq_len": 32, "vocab_size": 64},
    # A few seconds per step on a CPU core, a fraction of a millisecond on a GPU.
    "small": {"n_layers": 6, "d_model": 384, "n_heads": 6, "seq_len": 256, "vocab_size": 8192},
    # GPT-2 "small" sized (124M parameters, tied embedding): one modern GPU.
    "base": {"n_layers": 12, "d_model": 768, "n_heads": 12, "seq_len": 1024, "vocab_size": 50304},
}
"""Named sizes of the ``gpt`` workload; free parameters override single entries."""


@dataclass(frozen=True)
class GptShape:
    """The resolved architecture of a ``gpt`` run (preset plus overrides)."""

    n_layers: int
    d_model: int
    n_heads: int
    seq_len: int
    vocab_size: int
    mlp_ratio: int


@dataclass(frozen=True)
class GptParams:
    preset: Literal["tiny", "small", "base"] = option(
        "tiny", help="named size (tiny: CPU tests; small; base: ~124M parameters, one GPU)"
    )
    n_layers: int | None = option(
        None, help="transformer blocks; null = the preset's", check=positive
    )
    d_model: int | None = option(None, help="width; null = the preset's", check=positive)
    n_heads: int | None = option(
        None, help="attention heads (must divide d_model); null = the preset's", check=positive
    )
    seq_len: int | None = option(
        None, help="tokens per sequence (one sample); null = the preset's", check=positive
    )
    vocab_size: int | None = option(None, help="vocabulary; null = the preset's", check=positive)
    mlp_ratio: int = option(4, help="MLP hidden width / d_model", check=positive)
    train_sequences: int = option(
        2048, help="training sequences generated (identically on every rank)", check=positive
    )
    val_sequences: int = option(256, help="validation sequences generated", check=positive)
    noise: float = option(
        0.1,
        help="share of tokens drawn uniformly at random; the rest follow the source's fixed "
        "successor of the previous token (an order-1 Markov source, so the loss can fall "
        "from ln(vocab_size) towards its entropy)",
        check=lambda v: None if 0 <= v < 1 else "must be in [0, 1)",
    )
    data_seed: int = option(0, help="seed of the token data (identical on every rank)")
    lr: float = option(1e-3, help="AdamW learning rate", check=positive)
    weight_decay: float = option(0.0, help="AdamW weight decay", check=non_negative)

    def shape(self) -> GptShape:
        preset = GPT_PRESETS[self.preset]

        def pick(key: str) -> int:
            value = getattr(self, key)
            return preset[key] if value is None else int(value)

        return GptShape(
            n_layers=pick("n_layers"),
            d_model=pick("d_model"),
            n_heads=pick("n_heads"),
            seq_len=pick("seq_len"),
            vocab_size=pick("vocab_size"),
            mlp_ratio=self.mlp_ratio,
        )

    @property
    def train_samples(self) -> int:
        return self.train_sequences

    @property
    def val_samples(self) -> int:
        return self.val_sequences

    def validate(self, where: str) -> None:
        from ..errors import ConfigError

        s = self.shape()
        if s.d_model % s.n_heads:
            raise ConfigError(
                f"{where}.n_heads: {s.n_heads} heads do not divide d_model {s.d_model}"
            )
        if s.vocab_size < 2:
            raise ConfigError(f"{where}.vocab_size: needs at least 2 tokens, got {s.vocab_size}")
