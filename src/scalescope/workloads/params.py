"""Workload parameter dataclasses (torch-free, so configs validate anywhere)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

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


RESNET_PRESETS: dict[str, dict[str, object]] = {
    # CPU tests: a few thousand 16x16 images, two narrow stages; an epoch takes about a second.
    "tiny": {
        "image_size": 16,
        "num_classes": 4,
        "widths": [8, 16],
        "depths": [1, 1],
        "train_samples": 2048,
        "val_samples": 512,
    },
    "small": {
        "image_size": 32,
        "num_classes": 10,
        "widths": [32, 64, 128],
        "depths": [2, 2, 2],
        "train_samples": 20_000,
        "val_samples": 2_000,
    },
    # ResNet-18's stages (64-128-256-512, two basic blocks each) at 64 px: one modern GPU.
    "base": {
        "image_size": 64,
        "num_classes": 100,
        "widths": [64, 128, 256, 512],
        "depths": [2, 2, 2, 2],
        "train_samples": 100_000,
        "val_samples": 10_000,
    },
}
"""What ``workload.preset`` fills in; a key given explicitly wins over its preset."""


def _cache_dir_problem(path: str) -> str | None:
    """Why ``path`` cannot hold the data cache, or None. Nothing is created: the nearest
    existing ancestor must be a writable folder (it is created on first use)."""
    import os

    p = os.path.abspath(os.path.expanduser(path))
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    if not os.path.isdir(p):
        return f"{p} is not a folder"
    if not os.access(p, os.W_OK | os.X_OK):
        return f"{p} is not writable"
    return None


@dataclass(frozen=True)
class ResnetParams:
    preset: Literal["tiny", "small", "base"] = option(
        "tiny",
        help="size preset (tiny: CPU tests, 16 px; small: 32 px; base: ResNet-18 stages at "
        "64 px for one GPU); the keys below left null take the preset's value",
    )
    image_size: int | None = option(None, help="image height and width in pixels", check=positive)
    num_classes: int | None = option(None, help="classes (one pattern each)", check=positive)
    widths: list[int] | None = option(
        None, help="channels of each stage (stage i>0 halves the resolution)"
    )
    depths: list[int] | None = option(None, help="basic blocks in each stage")
    train_samples: int | None = option(None, help="training images", check=positive)
    val_samples: int | None = option(None, help="validation images", check=positive)
    noise: float = option(
        0.8, help="std of the per-pixel noise, relative to the class pattern", check=non_negative
    )
    data_seed: int = option(0, help="seed of the generated images (identical on every rank)")
    norm: Literal["group", "batch"] = option(
        "group",
        help="group: GroupNorm, independent of the batch, so every world size follows the "
        "same trajectory; batch: BatchNorm with per-rank statistics (DDP's usual)",
    )
    lr: float = option(2e-3, help="Adam learning rate", check=positive)
    crop_padding: int | None = option(
        None,
        help="random-crop augmentation: pad by this many pixels, crop back (null = "
        "image_size // 8; 0 = no crop)",
        check=non_negative,
    )
    flip: bool = option(True, help="random horizontal flip augmentation")
    cache_dir: str | None = option(
        None,
        help="folder of the generated image shards (created once, shared by jobs); null = "
        "$SCALESCOPE_CACHE/data, else ~/.cache/scalescope/data",
    )
    verify_checksum: bool = option(
        True,
        help="check each shard's sha256 once per process on open (the size is always "
        "checked); false skips the full read for very large sets",
    )
    num_workers: int = option(
        0,
        help="DataLoader worker processes per rank (0 = load in the training process)",
        check=non_negative,
    )
    pin_memory: bool | Literal["auto"] = option(
        "auto", help="page-locked host batches for faster copies; auto = on when training on a GPU"
    )
    prefetch_factor: int | None = option(
        None,
        help="batches each worker loads ahead (needs num_workers > 0; null = 2)",
        check=positive,
    )
    persistent_workers: bool | Literal["auto"] = option(
        "auto",
        help="keep workers alive between epochs; auto = yes when num_workers > 0 (each epoch "
        "and each validation would otherwise start num_workers new processes inside the "
        "timed epoch); true needs num_workers > 0",
    )
    val_batch_size: int = option(512, help="validation batch per rank", check=positive)

    input_pipeline: ClassVar[bool] = True
    """Trains from a DataLoader: ``scalescope bench-data`` can time it."""

    def validate(self, where: str) -> None:
        from ..errors import ConfigError

        for key, value in RESNET_PRESETS[self.preset].items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)
        if self.crop_padding is None:
            object.__setattr__(self, "crop_padding", max(1, int(self.image_size or 0) // 8))
        widths, depths = self.widths or [], self.depths or []
        if not widths or any(w <= 0 for w in widths):
            raise ConfigError(f"{where}.widths: needs at least one stage, each > 0, got {widths}")
        if len(depths) != len(widths) or any(d <= 0 for d in depths):
            raise ConfigError(
                f"{where}.depths: one block count > 0 per stage ({len(widths)} stages), "
                f"got {depths}"
            )
        if (self.image_size or 0) < 2 ** (len(widths) - 1):
            raise ConfigError(
                f"{where}.image_size: {self.image_size} px cannot be halved {len(widths) - 1} times"
            )
        if self.crop_padding is not None and self.crop_padding >= (self.image_size or 0):
            raise ConfigError(
                f"{where}.crop_padding: must be smaller than image_size {self.image_size}, "
                f"got {self.crop_padding}"
            )
        if self.num_workers == 0 and self.prefetch_factor is not None:
            raise ConfigError(
                f"{where}.prefetch_factor: needs {where}.num_workers > 0 (the training "
                f"process loads batches itself with 0 workers), got {self.prefetch_factor}"
            )
        if self.num_workers == 0 and self.persistent_workers is True:
            raise ConfigError(
                f"{where}.persistent_workers: needs {where}.num_workers > 0 (there are no "
                "workers to keep)"
            )
        problem = _cache_dir_problem(self.resolved_cache_dir)
        if problem:
            raise ConfigError(f"{where}.cache_dir: cannot hold the data cache: {problem}")

    @property
    def resolved_cache_dir(self) -> str:
        import os

        if self.cache_dir:
            return os.path.abspath(os.path.expanduser(self.cache_dir))
        env = os.environ.get("SCALESCOPE_CACHE")
        base = env if env else os.path.join(os.path.expanduser("~"), ".cache", "scalescope")
        return os.path.abspath(os.path.join(base, "data"))
