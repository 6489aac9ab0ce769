"""Harness tax: how fast does scalescope's training path run compared with alternatives?

Runs the spiral workload three ways in ONE process, interleaved round by round (this
machine is noisy; interleaving spreads the noise over all three):

* ``plain``      -- a plain PyTorch loop over in-memory index batches (the floor);
* ``scalescope`` -- the Lightning Trainer exactly as ``scalescope train`` builds it
  (``scalescope.job.run.trainer_setup.build_trainer``, the same module, data module and timing
  callback,
  timed by that callback's own epoch clock);
* ``tutorial``   -- the tutorial's way: a DataLoader over a TensorDataset and
  ``self.log(..., on_step=True, on_epoch=True, prog_bar=True)`` every step, with Lightning's
  default logger, progress bar and checkpointing.

Each run trains ``--epochs`` epochs; the first is warm-up and not timed. Timed: the training
steps of the remaining epochs (validation is off for all three). Prints the median steps/s of
each way and the ratios. Never used in a test's assertion: timings are reported, not asserted.

    python benchmarks/overhead.py [--rounds 5] [--epochs 4] [--batch-size 256] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from scalescope.config import TrainerConfig
from scalescope.job.clocks.timing import TimingCallback
from scalescope.job.run.topology import Topology
from scalescope.job.run.trainer_setup import build_trainer
from scalescope.workloads.params import SpiralParams
from scalescope.workloads.spiral import SpiralDataModule, SpiralMLP, make_spirals

ONE_PROCESS = Topology("local", 1, 1, 0, 0, 0, "bench", None, None, 0)


class StepClock(L.Callback):
    """Times training steps after the first (warm-up) epoch; CPU only, so no device sync."""

    def __init__(self) -> None:
        self.start = 0.0
        self.steps = 0
        self.seconds = 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start = time.perf_counter()
        self.epoch_steps = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # type: ignore[no-untyped-def]
        self.epoch_steps += 1

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch > 0:
            self.seconds += time.perf_counter() - self.start
            self.steps += self.epoch_steps


class TutorialMLP(L.LightningModule):
    """The tutorial's module: the same network, automatic optimization, ``self.log`` per step."""

    def __init__(self, params: SpiralParams) -> None:
        super().__init__()
        self.lr = params.lr
        self.net = SpiralMLP(params.hidden_sizes, params.dropout, params.lr).net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):  # type: ignore[no-untyped-def]
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def run_plain(params: SpiralParams, batch: int, epochs: int, seed: int) -> float:
    torch.manual_seed(seed)
    x, y = make_spirals(params)
    n_val = round(params.num_samples * params.val_fraction)
    x, y = x[n_val:], y[n_val:]
    model = SpiralMLP(params.hidden_sizes, params.dropout, params.lr)
    opt = torch.optim.Adam(model.parameters(), lr=params.lr)
    n_batches = x.shape[0] // batch
    steps, seconds = 0, 0.0
    for epoch in range(epochs):
        g = torch.Generator().manual_seed(seed + epoch)
        order = torch.randperm(x.shape[0], generator=g)[: n_batches * batch].view(n_batches, batch)
        start = time.perf_counter()
        for idx in order:
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
        if epoch > 0:
            seconds += time.perf_counter() - start
            steps += n_batches
    return steps / seconds


def run_scalescope(
    params: SpiralParams, batch: int, epochs: int, seed: int, root: Path, steps_per_call: int
) -> float:
    L.seed_everything(seed, verbose=False)
    model = SpiralMLP(params.hidden_sizes, params.dropout, params.lr)
    cfg = TrainerConfig(
        batch_size=batch, max_epochs=epochs, accelerator="cpu", steps_per_call=steps_per_call
    )
    dm = SpiralDataModule(params, batch_size=batch, seed=seed, steps_per_call=cfg.steps_per_call)
    timing = TimingCallback(process_start=time.time(), log_every_n_steps=cfg.log_every_n_steps)
    trainer = build_trainer(
        cfg,
        ONE_PROCESS,
        accelerator="cpu",
        run_dir=root,
        callbacks=[timing],
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=dm)
    # scalescope's own epoch clock, as in a real run; epoch 0 is the warm-up
    t = timing.t
    return sum(t.epoch_steps[1:]) / sum(t.epoch_times_s[1:])


def run_tutorial(params: SpiralParams, batch: int, epochs: int, seed: int, root: Path) -> float:
    L.seed_everything(seed, verbose=False)
    x, y = make_spirals(params)
    n_val = round(params.num_samples * params.val_fraction)
    loader = DataLoader(
        TensorDataset(x[n_val:], y[n_val:]), batch_size=batch, shuffle=True, drop_last=True
    )
    model = TutorialMLP(params)
    clock = StepClock()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        default_root_dir=str(root),
        callbacks=[clock],
        limit_val_batches=0,
        log_every_n_steps=1,
    )
    # The progress bar writes to the terminal; keep it out of the benchmark's report.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer.fit(model, train_dataloaders=loader)
    return clock.steps / clock.seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=4, help="per run; the first is warm-up")
    ap.add_argument("--batch-size", type=int, default=TrainerConfig().batch_size)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--steps-per-call",
        type=int,
        default=TrainerConfig().steps_per_call,
        help="scalescope's trainer.steps_per_call (1 shows Lightning's per-call cost)",
    )
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import logging

    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.pop("SLURM_NTASKS", None)  # one local process, whatever the shell
    params = SpiralParams()
    steps_per_epoch = int(params.num_samples * (1 - params.val_fraction)) // args.batch_size
    print(
        f"spiral MLP {params.hidden_sizes}, {params.num_samples} samples, batch "
        f"{args.batch_size} ({steps_per_epoch} steps/epoch), {args.epochs} epochs per run "
        f"(first untimed), {args.rounds} interleaved rounds, {args.threads} CPU thread(s)"
    )
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, lightning "
        f"{L.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores"
    )

    results: dict[str, list[float]] = {"plain": [], "scalescope": [], "tutorial": []}
    ways = list(results)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ways[r % 3 :] + ways[: r % 3]  # rotate who goes first
            for way in order:
                root = Path(tmp) / f"{way}-{r}"
                if way == "plain":
                    rate = run_plain(params, args.batch_size, args.epochs, seed=r)
                elif way == "scalescope":
                    rate = run_scalescope(
                        params, args.batch_size, args.epochs, r, root, args.steps_per_call
                    )
                else:
                    rate = run_tutorial(params, args.batch_size, args.epochs, r, root)
                results[way].append(rate)
            print(
                f"round {r + 1}: " + ", ".join(f"{w} {results[w][-1]:,.0f}" for w in ways),
                flush=True,
            )

    med = {w: statistics.median(v) for w, v in results.items()}
    print("\nmedian steps/s (ms/step):")
    for w in ways:
        print(f"  {w:<11} {med[w]:>9,.0f}  ({1000 / med[w]:.3f} ms)")
    print(f"scalescope / plain    = {med['scalescope'] / med['plain']:.2f}x  (target >= 0.8x)")
    print(f"scalescope / tutorial = {med['scalescope'] / med['tutorial']:.2f}x  (target >= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
