"""``trainer.strategy: fsdp`` refused before anything runs, in one line (exit 2): a user's
module with no way to be sharded, a wrap rule that matches nothing, 16-mixed; and the wrap
rule's matching itself."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from torch import nn
from user_module_helpers import EXAMPLE, MODEL, QUIET, REPO, assert_train_refused

from scalescope import cli
from scalescope.config import load_train_config
from scalescope.errors import ConfigError
from scalescope.workloads.user_sharding import matching, unmatched


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


FSDP = "trainer.strategy=fsdp"
REFUSED = [
    ((FSDP,), f"fsdp.wrap: {MODEL}:MyModel has no configure_model to shard itself"),
    ((FSDP, "fsdp.wrap=[Conv2d]"), "fsdp.wrap: Conv2d matches no submodule of"),
    ((FSDP, "fsdp.wrap=[Linear,Conv2d]"), "fsdp.wrap: Conv2d matches no submodule of"),
    ((FSDP, "trainer.precision=16-mixed", "fsdp.wrap=[Linear]"), "16-mixed is not run with"),
]


@pytest.mark.parametrize(("overrides", "expected"), REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_train_refuses_unshardable_setups_before_anything_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    overrides: tuple[str, ...],
    expected: str,
) -> None:
    monkeypatch.chdir(REPO)
    assert_train_refused(
        capsys, tmp_path / "out", ["--config", EXAMPLE, *QUIET, *overrides], expected
    )
    assert not (tmp_path / "out").exists()


def test_a_built_in_workload_takes_no_wrap_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = cli.main(
        ["train", *QUIET, f"output_dir={tmp_path}", "workload.name=gpt", FSDP, "fsdp.wrap=[Block]"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "fsdp.wrap: gpt is a built-in workload" in err, err


def test_16_mixed_is_refused_with_fsdp_at_load() -> None:
    with pytest.raises(ConfigError, match="16-mixed is not run with strategy fsdp"):
        load_train_config(None, [FSDP, "trainer.precision=16-mixed"])
    assert load_train_config(None, ["trainer.precision=16-mixed"]).trainer.strategy == "ddp"


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)


class Wider(Block):
    pass


def test_a_rule_matches_by_name_or_path_and_subclasses_never_the_root() -> None:
    model = nn.Sequential(Block(), Wider(), nn.ReLU())
    assert matching(model, ["Block"]) == [model[0], model[1]]
    assert matching(model, [f"{__name__}.Wider"]) == [model[1]]
    assert matching(model, ["Linear"]) == [model[0].fc, model[1].fc]
    assert matching(model, ["Sequential"]) == []  # the root is sharded last anyway
    assert unmatched(model, ["Block", "Conv2d", "Sequential"]) == ["Conv2d", "Sequential"]
