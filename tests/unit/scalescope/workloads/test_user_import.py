"""A user's own LightningModule, named by import path: refused inputs (one line, exit 2,
nothing run or submitted), real 1- and 2-process runs of examples/, a local sweep of it
summarised with a speedup row, and a module that raises in training_step shown as a failed
row with its exception line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from user_module_helpers import (
    BAD,
    EXAMPLE,
    MODEL,
    QUIET,
    REPO,
    _example_sweep,
    assert_train_refused,
)

from scalescope import cli
from scalescope.config import load_train_config
from scalescope.errors import ConfigError


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import roots that validation inserts stay inside the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


# --- refused before anything runs ---------------------------------------------------------------


@pytest.mark.parametrize(("override", "expected"), BAD, ids=[b[0] for b in BAD])
def test_train_refuses_bad_user_workloads(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    override: str,
    expected: str,
) -> None:
    monkeypatch.chdir(REPO)
    argv = ["--config", EXAMPLE, *QUIET, override]
    if override == "workload.datamodule=null":  # no config file: no datamodule_init_args
        argv = [*QUIET, f"workload.name={MODEL}:MyModel"]
    assert_train_refused(capsys, tmp_path / "out", argv, expected)


@pytest.mark.parametrize(("override", "expected"), BAD[:6], ids=[b[0] for b in BAD[:6]])
def test_sweep_dry_run_refuses_bad_user_workloads(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    override: str,
    expected: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = _example_sweep(tmp_path, shapes="  - {nodes: 1, devices_per_node: 1}\n")
    rc = cli.main(["sweep", "--config", str(sweep), "--executor", "local", "--dry-run", override])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("scalescope sweep: error: ") and expected in err, err
    assert not (tmp_path / "outputs").exists()


def test_sweep_dry_run_accepts_the_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    sweep = _example_sweep(tmp_path, shapes="  - {nodes: 1, devices_per_node: 2}\n")
    assert cli.main(["sweep", "--config", str(sweep), "--executor", "local", "--dry-run"]) == 0
    assert "world size 2" in capsys.readouterr().out


def test_user_keys_are_checked_without_imports() -> None:
    """The config layer checks the section's shape torch-free; a registered workload keeps its
    own keys."""
    cfg = load_train_config(
        None,
        [f"workload.name={MODEL}:MyModel", "workload.init_args.hidden=64"],
    )
    assert cfg.workload_params().init_args == {"hidden": 64}
    assert cfg.to_dict()["workload"] == {
        "name": f"{MODEL}:MyModel",
        "datamodule": None,
        "init_args": {"hidden": 64},
        "datamodule_init_args": {},
        "tokens_per_sample": None,
    }
    with pytest.raises(ConfigError, match=r"unknown key workload\.hidden"):
        load_train_config(None, [f"workload.name={MODEL}:MyModel", "workload.hidden=3"])
    with pytest.raises(ConfigError, match=r"unknown key workload\.init_args"):
        load_train_config(None, ["workload.init_args.hidden=3"])  # spiral has no init_args


# --- real runs ------------------------------------------------------------------------------------
