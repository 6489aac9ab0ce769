"""The loggers a user's module trains with (``trainer.logger``;
scalescope.job.run.trainer_setup.module_loggers): Lightning's own default where asked to
choose, TensorBoard's first where it can write, the CSV file always."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from scalescope.config import check_logger, load_train_config
from scalescope.errors import ConfigError
from scalescope.job.run.trainer_setup import MODULE_LOGS, TENSORBOARD_LOGS, module_loggers


@pytest.mark.parametrize(
    ("choice", "installed", "kinds"),
    [
        ("auto", True, [TensorBoardLogger, CSVLogger]),
        ("auto", False, [CSVLogger]),
        ("tensorboard", True, [TensorBoardLogger, CSVLogger]),
        ("csv", True, [CSVLogger]),
        ("csv", False, [CSVLogger]),
    ],
)
def test_the_module_gets_the_logger_its_own_trainer_would_give_it_first(
    tmp_path: Path, choice: str, installed: bool, kinds: list[type]
) -> None:
    loggers = module_loggers(tmp_path, choice, installed)
    assert [type(lg) for lg in loggers] == kinds
    # self.logger is the first: TensorBoard's SummaryWriter where a module written under
    # Lightning's default reaches for it; the CSV file is kept where it always was
    csv = loggers[-1]
    assert Path(csv.log_dir) == tmp_path / MODULE_LOGS
    if kinds[0] is TensorBoardLogger:
        assert Path(loggers[0].log_dir) == tmp_path / TENSORBOARD_LOGS


def test_tensorboard_where_it_cannot_write_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^trainer\.logger: tensorboard needs") as err:
        module_loggers(tmp_path, "tensorboard", installed=False)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="pip install tensorboardX"):
        check_logger("tensorboard", installed=False)
    check_logger("tensorboard", installed=True)
    check_logger("auto", installed=False)  # auto falls back to the CSV file, as Lightning does
    assert not list(tmp_path.iterdir())  # nothing written before the refusal


def test_the_key_is_read_and_checked_as_every_trainer_key() -> None:
    assert load_train_config(None, ["trainer.logger=csv"]).trainer.logger == "csv"
    assert load_train_config(None, []).trainer.logger == "auto"
    with pytest.raises(ConfigError, match=r"trainer\.logger: expected 'auto' or 'csv'"):
        load_train_config(None, ["trainer.logger=wandb"])
