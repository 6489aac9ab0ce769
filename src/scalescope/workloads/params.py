"""Workload parameter dataclasses (torch-free, so configs validate anywhere)."""

from __future__ import annotations

from dataclasses import dataclass

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
