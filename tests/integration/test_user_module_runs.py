"""A user's own LightningModule with real processes: trained at 1 and 2 processes, a local sweep
with its speedup row, a module that raises, manual optimization, a refused module.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from core_helpers import TRAIN_TIMEOUT_S, TrainRun, clean_env, run_train
from user_module_helpers import (
    BAD,
    EXAMPLE,
    EXAMPLE_FLOPS,
    MODEL,
    QUIET,
    REPO,
    _example_sweep,
    write_package,
)

from scalescope import cli
from scalescope.job.run.trainer_setup import TENSORBOARD_LOGS
from scalescope.job.tracking.comet import read_offline_archive
from scalescope.record import ResultRecord, decode_line


def test_a_refused_workload_exits_2_from_a_real_process(tmp_path: Path) -> None:
    run = run_train(
        REPO, *QUIET, BAD[0][0], output_dir=tmp_path / "out", module_args=("--config", EXAMPLE)
    )
    assert run.returncode == 2, run.describe()
    assert run.stderr.strip().count("\n") == 0 and BAD[0][1] in run.stderr, run.describe()
    assert not (tmp_path / "out").exists()


# 4,000 points, a quarter held out: 3,000 training samples per epoch, which 64 does not
# divide: 46 full batches and one of 56 (47 steps). Counting finds 3,000, steps x batch
# would say 3,008.
SHORT_LAST = ("workload.datamodule_init_args.num_samples=4000", "trainer.max_epochs=2")


def _check_example_record(r: ResultRecord, world: int) -> None:
    assert r.identity.workload == f"{MODEL}:MyModel"
    assert r.identity.world_size == world
    assert r.steps == 2 * 47 and r.steps_per_epoch == 47
    assert r.train_samples == 3000 and r.val_samples == 1000
    assert r.samples_per_s == pytest.approx(2 * 3000 / r.train_time_s)
    assert r.warmup_steps == 47 and r.steady_steps == 47
    assert r.steady_time_s is not None and r.steady_samples_per_s is not None
    assert r.steady_samples_per_s == pytest.approx(3000 / r.steady_time_s)
    assert r.flops_source == "measured"
    assert r.model_flops_per_sample == EXAMPLE_FLOPS
    assert r.val_loss_final is not None and r.val_acc_final is not None  # as the module logs them
    assert r.val_loss_best is not None and r.val_loss_best <= r.val_loss_final
    assert r.config["workload"]["init_args"]["hidden"] == 128


def test_train_the_example_in_one_process(tmp_path: Path) -> None:
    run = run_train(
        REPO, *QUIET, *SHORT_LAST, output_dir=tmp_path, module_args=("--config", EXAMPLE)
    )
    assert run.returncode == 0, run.describe()
    (r,) = run.results()
    _check_example_record(r, world=1)
    assert json.loads(Path(r.identity.run_dir, "result.json").read_text())["flops_source"] == (
        "measured"
    )


@pytest.fixture(scope="module")
def example_two(tmp_path_factory: pytest.TempPathFactory) -> TrainRun:
    """The example at 2 processes, the diagnosis on (the default)."""
    return run_train(
        REPO,
        *QUIET,
        *SHORT_LAST,
        "trainer.devices=2",
        output_dir=tmp_path_factory.mktemp("example-two"),
        module_args=("--config", EXAMPLE),
    )


def test_train_the_example_in_two_processes(example_two: TrainRun) -> None:
    # Lightning's DistributedSampler gives each rank 1,500 samples: 46 batches of 32 and one
    # of 28 each; the counts summed over ranks are the same 3,000 per epoch.
    assert example_two.returncode == 0, example_two.describe()
    (r,) = example_two.results()
    _check_example_record(r, world=2)
    assert r.identity.per_device_batch_size == 32  # passed to MyData(batch_size=...)


def test_the_example_is_diagnosed_and_trains_the_same(
    tmp_path: Path, example_two: TrainRun
) -> None:
    """Automatic optimization, its own loaders, self.log in its step: the diagnosis (and
    its calibration through the module's own training_step) leaves training as it was."""
    off = run_train(
        REPO,
        *QUIET,
        *SHORT_LAST,
        "trainer.devices=2",
        "diagnosis.enabled=false",
        output_dir=tmp_path,
        module_args=("--config", EXAMPLE),
    )
    assert off.returncode == 0, off.describe()
    ((on,), (off_r,)) = example_two.results(), off.results()
    assert on.val_loss_final == off_r.val_loss_final
    d = on.diagnosis
    assert d is not None and d["calibration"]["status"] == "measured", d
    assert all(r["input_wait_s"] > 0 for r in d["ranks"])  # a real DataLoader
    assert off_r.diagnosis is not None and off_r.diagnosis["status"] == "off"


def _summarize(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "analysis.summarize", str(folder)],
        cwd=folder,
        env=clean_env({"COLUMNS": "240"}),
        capture_output=True,
        text=True,
        timeout=TRAIN_TIMEOUT_S,
        check=False,
    )


@pytest.mark.timeout(600)
def test_local_sweep_of_the_example_shows_a_speedup_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the job imports examples/ from the submit directory
    sweep = _example_sweep(
        tmp_path,
        shapes="  - {nodes: 1, devices_per_node: 1}\n  - {nodes: 1, devices_per_node: 2}\n",
    )
    argv = ["--config", str(sweep), "--executor", "local", "--sweep-id", "mine-e2e"]
    rc = cli.main(["sweep", *argv, "trainer.max_epochs=2", "tracking.mode='off'"])
    out = capsys.readouterr().out
    assert rc == 0, out
    sweep_dir = tmp_path / "outputs" / "sweeps" / "mine-e2e"
    jobs = json.loads((sweep_dir / "sweep.json").read_text())["jobs"]
    assert [j["state"] for j in jobs] == ["COMPLETED", "COMPLETED"], out
    for job in jobs:
        events = [decode_line(ln) for ln in Path(job["stdout"]).read_text().splitlines()]
        (r,) = [e for e in events if isinstance(e, ResultRecord)]
        assert r.flops_source == "measured" and r.train_samples == 3072
    summary = _summarize(sweep_dir)
    assert summary.returncode == 0, summary.stderr
    text = summary.stdout
    assert re.search(r"^my-project\b", text, re.M), text  # the series' headline table
    # its 1x2 row: one run, with its speedup over the 1-device baseline
    assert re.search(r"^1x2\s+1\s+[\d,.]+\s+\d+\.\d\dx", text, re.M), text


BOOM = """\
from examples.my_project.model import MyModel


class Boom(MyModel):
    def training_step(self, batch, batch_idx):
        raise RuntimeError("boom: the loss went NaN in step 0")
"""


@pytest.mark.timeout(600)
def test_a_module_that_raises_gives_a_failed_row_with_its_exception(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = _example_sweep(tmp_path, shapes="  - {nodes: 1, devices_per_node: 1}\n")
    write_package(tmp_path, "boompkg", BOOM)
    argv = ["--config", str(sweep), "--executor", "local", "--sweep-id", "boom"]
    rc = cli.main(["sweep", *argv, "workload.name=boompkg.model:Boom", "tracking.mode='off'"])
    out = capsys.readouterr().out
    assert rc == 1, out
    sweep_dir = tmp_path / "outputs" / "sweeps" / "boom"
    (job,) = json.loads((sweep_dir / "sweep.json").read_text())["jobs"]
    assert job["state"] == "FAILED", out
    summary = _summarize(sweep_dir)
    text = summary.stdout + summary.stderr
    assert "RuntimeError: boom: the loss went NaN in step 0" in text, text


def test_a_module_written_against_pytorch_lightning_trains_unmodified(tmp_path: Path) -> None:
    """The example as many users' code is written, ``import pytorch_lightning as pl`` (the
    standalone copy that ``lightning`` installs beside itself): trained at 2 processes by
    scalescope's trainer, built from ``lightning``, it is counted as the example is."""
    source = (REPO / "examples" / "my_project" / "model.py").read_text()
    assert "import lightning as L" in source
    write_package(
        tmp_path,
        "plproject",
        source.replace("import lightning as L", "import pytorch_lightning as L"),
    )
    run = run_train(
        tmp_path,
        *QUIET,
        *SHORT_LAST,
        "trainer.devices=2",
        "workload.name=plproject.model:MyModel",
        "workload.datamodule=plproject.model:MyData",
        output_dir=tmp_path / "out",
        module_args=("--config", str(REPO / EXAMPLE)),
    )
    assert run.returncode == 0, run.describe()
    (r,) = run.results()
    assert r.identity.workload == "plproject.model:MyModel"
    assert r.identity.world_size == 2 and r.identity.per_device_batch_size == 32
    assert r.steps == 2 * 47 and r.train_samples == 3000
    assert r.model_flops_per_sample == EXAMPLE_FLOPS
    assert r.val_loss_final is not None and r.val_acc_final is not None


WITH_LOGGER = """\
from lightning.pytorch.callbacks import LearningRateMonitor

from examples.my_project.model import MyModel


class Logged(MyModel):
    \"\"\"Reaches for a logger: its own callback logs the learning rate, and it logs its
    hyperparameters through self.logger, as under a Trainer of its author's.\"\"\"

    def configure_callbacks(self):
        return [LearningRateMonitor(logging_interval="step")]

    def on_fit_start(self):
        self.logger.log_hyperparams({"note": "from the module"})
"""


def _logging_module(tmp_path: Path, source: str, name: str, *overrides: str) -> TrainRun:
    """The example project's module subclassed by ``source`` (package ``name``'s), trained
    on the example's data, logging every 10 steps."""
    write_package(tmp_path, name.split(".")[0], source)
    return run_train(
        tmp_path,
        *QUIET,
        *SHORT_LAST,
        "trainer.log_every_n_steps=10",
        *overrides,
        f"workload.name={name}",
        f"workload.datamodule={MODEL}:MyData",
        output_dir=tmp_path / "out",
        module_args=("--config", str(REPO / EXAMPLE)),
        env={"PYTHONPATH": str(REPO)},
    )


def test_a_module_that_needs_a_logger_trains_and_its_logs_are_kept(tmp_path: Path) -> None:
    run = _logging_module(
        tmp_path,
        WITH_LOGGER,
        "loggedpkg.model:Logged",
        "trainer.logger=csv",  # the CSV file alone: self.logger is it
    )
    assert run.returncode == 0, run.describe()
    (r,) = run.results()
    assert r.steps == 2 * 47
    logs = Path(r.identity.run_dir) / "module_logs"
    rows = (logs / "metrics.csv").read_text().splitlines()
    assert "lr-AdamW" in rows[0].split(","), rows[0]
    assert len(rows) - 1 >= 2 * 47 // 10  # a row every 10 steps, and the epochs' own
    assert "note: from the module" in (logs / "hparams.yaml").read_text()
    assert not (logs.parent / TENSORBOARD_LOGS).exists()


WITH_TENSORBOARD = """\
from examples.my_project.model import MyModel


class Boarded(MyModel):
    \"\"\"Written under Lightning's default logger, TensorBoard's: it calls the SummaryWriter's
    own API through self.logger.experiment.\"\"\"

    def on_train_epoch_end(self):
        for name, p in self.named_parameters():
            self.logger.experiment.add_histogram(name, p, self.current_epoch)
        self.logger.experiment.add_text("note", "from the module", self.current_epoch)
"""


def test_a_module_written_for_tensorboard_trains_and_writes_its_events(tmp_path: Path) -> None:
    """Under trainer.logger=auto, with tensorboardX installed (the test tools install it), the
    module gets Lightning's default, TensorBoard's logger, first: before it, the CSVLogger
    alone, and the module's add_histogram failed rank 0 ("'ExperimentWriter' object has no
    attribute 'add_histogram'")."""
    run = _logging_module(tmp_path, WITH_TENSORBOARD, "boardpkg.model:Boarded", "trainer.devices=2")
    assert run.returncode == 0, run.describe()
    # nor the CSV logger's warning that it will delete what it found in its folder
    assert "has no attribute" not in run.combined and "not empty" not in run.combined
    (r,) = run.results()
    logs = Path(r.identity.run_dir) / "module_logs"
    (events,) = (logs.parent / TENSORBOARD_LOGS).glob("events.out.tfevents.*")  # rank 0's
    # every epoch's histograms and text, beside what self.log wrote every 10 steps
    assert events.stat().st_size > 1000
    assert events.read_bytes().count(b"from the module") == 2
    rows = (logs / "metrics.csv").read_text().splitlines()
    assert len(rows) - 1 >= 2 * 47 // 10 // 2  # the CSV file is still written beside it


MANUAL = """\
import torch.nn.functional as F

from examples.my_project.model import MyModel


class Manual(MyModel):
    \"\"\"Manual optimization: training_step steps the optimizer itself and returns None.\"\"\"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
"""


def test_a_manual_optimization_module_returning_none_is_timed(tmp_path: Path) -> None:
    # Its steps still advance global_step, so the timing callback reaches its every-N read
    # with no loss to read: it must stamp the clock after a device sync instead.
    _example_sweep(tmp_path, shapes="")
    write_package(tmp_path, "manualpkg", MANUAL)
    run = run_train(
        tmp_path,
        "workload.name=manualpkg.model:Manual",
        "trainer.max_epochs=2",
        "trainer.log_every_n_steps=5",
        "tracking.mode='off'",
        output_dir=tmp_path / "out",
        module_args=("--config", "examples/my_project.yaml"),
    )
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    assert result.steps == 2 * result.steps_per_epoch and result.steady_samples_per_s
    assert result.step_time_s is not None  # windows from the stamps without a loss


GAN = """\
import torch
from torch import nn
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Points(L.LightningDataModule):
    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        self.data = TensorDataset(torch.randn(2048, 16, generator=g))

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=64, drop_last=True)


class TinyGan(L.LightningModule):
    \"\"\"Two optimizers stepped by hand: the discriminator's backward leaves the generator
    without a gradient, which DDP refuses unless told to look for unused parameters.\"\"\"

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.gen = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 16))
        self.disc = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        (real,) = batch
        g_opt, d_opt = self.optimizers()
        fake = self.gen(torch.randn(real.shape[0], 8))
        ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)
        bce = nn.functional.binary_cross_entropy_with_logits
        d_loss = bce(self.disc(real), ones) + bce(self.disc(fake.detach()), zeros)
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()
        g_loss = bce(self.disc(fake), ones)
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()

    def configure_optimizers(self):
        return [torch.optim.Adam(self.gen.parameters()), torch.optim.Adam(self.disc.parameters())]
"""

GAN_FLOPS = 2 * (1536 + 3 * 1088 + (1088 + 64) * 2 + 2 * 1088 + 1536 + 1024)
"""Its step's multiply-adds a sample, 2 FLOPs each: the generator's forward (8x64 + 64x16 =
1536), the discriminator's three forwards (16x64 + 64x1 = 1088 each), the discriminator's
loss backward through its two passes (weight gradients, 1088, and the hidden layer's input
gradient, 64, each; the data needs none), the generator's loss backward through the
discriminator (weights and inputs, 2 x 1088) and the generator (its weights, 1536, and its
hidden layer's input, 1024)."""


def test_a_gan_needs_find_unused_parameters_and_trains_with_it(tmp_path: Path) -> None:
    """DDP refuses a backward that leaves parameters without a gradient: the job says which
    setting allows it, in one line, and with it the GAN trains, its FLOPs counted on its first
    step (its training step needs its trainer), its batch and its throughput in samples, its
    steps as Lightning counts them."""
    write_package(tmp_path, "ganpkg", GAN)
    args = (
        "workload.name=ganpkg.model:TinyGan",
        "workload.datamodule=ganpkg.model:Points",
        "trainer.scaling=weak",
        "trainer.batch_size=64",
        "trainer.max_epochs=2",
        "trainer.devices=2",
    )
    refused = run_train(tmp_path, *args, "tracking.mode='off'", output_dir=tmp_path / "no")
    assert refused.returncode == 2, refused.describe()
    assert (
        "error: trainer.find_unused_parameters: DDP found parameters of TinyGan that a "
        "backward did not use"
    ) in refused.stdout + refused.stderr, refused.describe()
    assert not refused.results()
    run = run_train(
        tmp_path,
        *args,
        "trainer.find_unused_parameters=true",
        "tracking.mode='offline'",
        output_dir=tmp_path / "yes",
    )
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    assert result.identity.per_device_batch_size == 64  # a batch, though it took two steps
    # Lightning's step counts both optimizers' steps: 2 a batch, 16 batches an epoch a rank;
    # the epoch's steps are those it ran, and the warm-up its first epoch, in those steps
    assert (result.steps, result.steps_per_epoch) == (2 * 2 * 16, 2 * 16), result
    assert (result.warmup_steps, result.steady_steps) == (32, 32), result
    assert result.train_samples == 2048 and result.steady_samples_per_s
    assert result.model_flops_per_sample == GAN_FLOPS and result.flops_source == "measured"
    assert result.config["trainer"]["find_unused_parameters"] is True
    # Comet's per-epoch throughput: the epoch's 2,048 samples over its time, not its 32
    # steps times the configured global batch (twice as many)
    metrics = read_offline_archive(result.tracking["archive"])["metrics"]
    times = [m["value"] for m in metrics["epoch_time_s"]]
    rates = [m["value"] for m in metrics["samples_per_s"]]
    assert rates == pytest.approx([2048 / t for t in times], rel=1e-6), (rates, times)


WORKERS_LSTM = """\
import torch
from torch import nn
import lightning as L
from torch.utils.data import DataLoader, TensorDataset


class Sequences(L.LightningDataModule):
    def __init__(self, batch_size=16):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(256, 6, 4, generator=g), torch.randn(256, 1, generator=g)
        self.data = TensorDataset(x, y)

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=self.batch_size, shuffle=True, num_workers=1,
                          persistent_workers=True)


class Recurrent(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 8, batch_first=True)
        self.head = nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        out, _ = self.lstm(x)
        return nn.functional.mse_loss(self.head(out[:, -1]), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
"""

WORKERS_LSTM_FLOPS = 3 * 2 * 6 * (4 * 8 * 4 + 4 * 8 * 8) + 3 * 2 * 8
"""A sample's FLOPs, 2 a multiply-add: an LSTM 4 -> 8 over 6 steps (its gate weights, 32 x 4
and 32 x 8, with each step's vectors: forward, then data and weight gradients, oneDNN's
kernel counted by scalescope's formula) and a Linear 8 -> 1 on the last step (forward, weight
gradient and input gradient, which the LSTM's backward needs)."""


def test_a_loader_that_keeps_its_workers_trains_on_two_ranks_and_its_lstm_is_counted(
    tmp_path: Path,
) -> None:
    """persistent_workers keeps one iterator, which Lightning has started when the FLOPs probe
    reads a batch at training's start: read from it, rank 0's first epoch ran a batch short
    and the ranks met in different collectives (gloo's size mismatch, or a wait until the
    collective timeout, by where the epoch ended)."""
    write_package(tmp_path, "lstmpkg", WORKERS_LSTM)
    run = run_train(
        tmp_path,
        "workload.name=lstmpkg.model:Recurrent",
        "workload.datamodule=lstmpkg.model:Sequences",
        "trainer.batch_size=32",
        "trainer.max_epochs=2",
        "trainer.devices=2",
        "trainer.collective_timeout_s=30",
        "tracking.mode='off'",
        output_dir=tmp_path / "out",
    )
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    assert (result.steps, result.steps_per_epoch) == (16, 8), result
    assert result.model_flops_per_sample == WORKERS_LSTM_FLOPS, result.model_flops_per_sample
