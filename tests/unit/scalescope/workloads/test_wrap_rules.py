"""``fsdp.wrap`` as users write it (scalescope.workloads.user_sharding): a dotted class is
imported and matched by class, subclasses included, a bare name by class name; a rule that
leaves parameters in the root of a module whose training_step never calls its forward is
refused before anything runs, in one line naming those parameters and the fix."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from torch import nn
from user_module_helpers import EXAMPLE, QUIET, REPO, assert_train_refused

from scalescope.errors import ConfigError
from scalescope.workloads.user_sharding import calls_forward, left_in_root, matching

BAG = "examples/wrap_rules.yaml"


@pytest.fixture(autouse=True)
def _keep_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))


class Head(nn.Linear):
    pass


def test_a_dotted_rule_is_imported_and_matched_by_class() -> None:
    model = nn.Sequential(nn.Embedding(8, 4), nn.Linear(4, 4), Head(4, 2), nn.ReLU())
    # torch defines Linear in torch.nn.modules.linear: the path users write still matches
    assert matching(model, ["torch.nn.Linear"]) == [model[1], model[2]]
    assert matching(model, ["torch.nn.Embedding", "torch.nn.Linear"]) == list(model)[:3]
    assert matching(model, [f"{__name__}.Head"]) == [model[2]]
    assert matching(model, ["Linear"]) == [model[1], model[2]]  # bare: by class name
    assert matching(model, ["torch.nn.Conv2d"]) == []
    for bad in ("torch.nn.NoSuch", "no_such_package.Block", "torch.nn.functional.relu"):
        with pytest.raises(ConfigError, match=f"fsdp.wrap: {bad} names no class"):
            matching(model, [bad])


def test_what_a_rule_leaves_in_the_root_and_who_calls_forward() -> None:
    sys.path.insert(0, str(REPO))
    from examples.my_project.model import MyModel
    from examples.wrap_rules.bag import Bag

    bag = Bag()
    assert left_in_root(bag, ["torch.nn.Embedding"]) == ["head.weight", "head.bias"]
    assert left_in_root(bag, ["torch.nn.Embedding", "torch.nn.Linear"]) == []
    assert calls_forward(Bag) is False and calls_forward(MyModel) is True


REFUSED = [
    (
        (BAG, "fsdp.wrap=[torch.nn.Embedding]"),
        "fsdp.wrap: examples.wrap_rules.bag:Bag never calls its forward (self(...)), so FSDP2 "
        "would never gather the parameters the rule leaves in the root (head.weight, head.bias)",
    ),
    ((BAG, "fsdp.wrap=[torch.nn.Embeding]"), "fsdp.wrap: torch.nn.Embeding names no class"),
]


@pytest.mark.parametrize(("overrides", "expected"), REFUSED, ids=["root", "typo"])
def test_train_refuses_before_anything_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    overrides: tuple[str, ...],
    expected: str,
) -> None:
    monkeypatch.chdir(REPO)
    config, *rest = overrides
    assert_train_refused(capsys, tmp_path / "out", ["--config", config, *QUIET, *rest], expected)


@pytest.mark.parametrize(
    ("config", "rule"),
    [(EXAMPLE, "[torch.nn.Linear]"), (BAG, "[torch.nn.Embedding,torch.nn.Linear]")],
)
def test_the_rules_users_write_pass_the_checks(
    monkeypatch: pytest.MonkeyPatch, config: str, rule: str
) -> None:
    from scalescope.config import check_workload, load_train_config, resolve_batch

    monkeypatch.chdir(REPO)
    sys.path.insert(0, str(REPO))
    cfg = load_train_config(config, ["trainer.strategy=fsdp", f"fsdp.wrap={rule}"])
    assert check_workload(cfg, resolve_batch(cfg.trainer, 2)) is not None  # else ConfigError
