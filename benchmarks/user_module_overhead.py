"""Harness tax on your own module: an unmodified LightningModule under scalescope against the
same module in a bare Lightning ``Trainer``.

Both ways train ``examples/my_project`` (its own module, data module, DataLoaders and
optimizer) for ``--epochs`` epochs on one CPU process, interleaved round by round in ONE
process so that the machine's noise falls on both:

* ``scalescope`` -- ``scalescope.job.run.entry.run_training`` with ``examples/my_project.yaml``: the
  job a user's ``scalescope train`` runs (topology, sample counting, the FLOPs probe before
  timing, the timing callback, the record), tracking off. Its figure is the record's
  ``steady_samples_per_s`` (epochs after the first; validation excluded).
* ``lightning``  -- ``L.Trainer(accelerator="cpu", devices=1, max_epochs=...)`` with
  Lightning's defaults (logger, checkpointing, model summary) and only the progress bar off
  (it would print to a pipe); timed by a callback over the same window: training batches of
  the epochs after the first, validation excluded, samples counted from the batches.

Prints the median samples/s of each and the ratio (target >= 0.95x). Never asserted in tests.

    python benchmarks/user_module_overhead.py [--rounds 5] [--epochs 10]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # examples/ is imported by path, as from the repository root

import lightning as L  # noqa: E402
import torch  # noqa: E402

from examples.my_project.model import MyData, MyModel  # noqa: E402
from scalescope.config import load_train_config  # noqa: E402
from scalescope.job.run.entry import run_training  # noqa: E402

CONFIG = REPO / "examples" / "my_project.yaml"


class SteadyClock(L.Callback):
    """Training time and samples of every epoch after the first, validation excluded."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.samples = 0
        self._epoch_start = 0.0
        self._val = 0.0
        self._val_start = 0.0
        self._epoch_samples = 0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_start, self._val, self._epoch_samples = time.perf_counter(), 0.0, 0

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, idx: int
    ) -> None:
        self._epoch_samples += int(batch[0].shape[0])

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_start = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val += time.perf_counter() - self._val_start

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch > 0:
            self.seconds += time.perf_counter() - self._epoch_start - self._val
            self.samples += self._epoch_samples


def run_scalescope(epochs: int, root: Path) -> float:
    cfg = load_train_config(
        CONFIG,
        {
            "trainer": {"max_epochs": epochs, "warmup_steps": "auto"},
            "tracking": {"mode": "off"},
            "output_dir": str(root),
        },
    )
    with contextlib.redirect_stdout(io.StringIO()):
        record = run_training(cfg)
    assert record is not None and record.steady_samples_per_s is not None
    return float(record.steady_samples_per_s)


def run_lightning(epochs: int, root: Path) -> float:
    cfg = load_train_config(CONFIG, {})
    model = MyModel(**cfg.workload["init_args"])
    data = MyData(batch_size=cfg.trainer.batch_size, **cfg.workload["datamodule_init_args"])
    clock = SteadyClock()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        enable_progress_bar=False,
        default_root_dir=str(root),
        callbacks=[clock],
    )
    trainer.fit(model, datamodule=data)
    return clock.samples / clock.seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=10)
    args = ap.parse_args()
    os.chdir(REPO)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU(s), "
        f"torch {torch.__version__}, lightning {L.__version__}; examples/my_project, "
        f"{args.epochs} epochs (first untimed), {args.rounds} interleaved rounds, 1 thread"
    )
    results: dict[str, list[float]] = {"scalescope": [], "lightning": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("scalescope", "lightning") if r % 2 == 0 else ("lightning", "scalescope")
            for way in order:
                root = Path(tmp) / f"{way}-{r}"
                run = run_scalescope if way == "scalescope" else run_lightning
                results[way].append(run(args.epochs, root))
            print(
                f"  round {r + 1}: scalescope {results['scalescope'][-1]:,.0f}, "
                f"lightning {results['lightning'][-1]:,.0f} samples/s"
            )
    med = {w: statistics.median(v) for w, v in results.items()}
    print("\nmedian samples/s:")
    for w, v in med.items():
        print(f"  {w:<11} {v:>9,.0f}")
    print(
        f"scalescope / lightning = {med['scalescope'] / med['lightning']:.3f}x  (target >= 0.95x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
