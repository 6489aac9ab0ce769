"""Shared by the user_module tests of the unit and integration tiers."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core_helpers import REPO

EXAMPLE = "examples/my_project.yaml"
# The example MLP 32 -> 128 -> 128 -> 4: 6 FLOPs per multiply-add (forward 2, backward 4),
# less the input gradient of the first layer, which backward does not compute (the data need
# no gradient): 2 x 32 x 128.
EXAMPLE_MACS = 32 * 128 + 128 * 128 + 128 * 4
EXAMPLE_FLOPS = 6 * EXAMPLE_MACS - 2 * 32 * 128

MODEL = "examples.my_project.model"

QUIET = ("tracking.mode='off'",)

BAD = [
    (f"workload.name={MODEL.replace('model', 'nope')}:MyModel", "workload.name: cannot import"),
    (f"workload.name={MODEL}:Nope", "workload.name: 'examples.my_project.model' has no attribute"),
    (f"workload.name={MODEL}:MyData", "workload.name: examples.my_project.model:MyData is not a"),
    ("workload.datamodule=torch.nn:Linear", "workload.datamodule: torch.nn:Linear is not a"),
    ("workload.init_args.hiden=3", "workload.init_args: MyModel rejects them"),
    ("workload.datamodule_init_args.batch_size=8", "workload.datamodule_init_args.batch_size:"),
    ("workload.datamodule=null", "workload.datamodule: missing"),
    ("workload.name=my_project:Model:X", "workload.name: 'my_project:Model:X' is not an import"),
]


def _example_sweep(root: Path, *, shapes: str, extra: str = "") -> Path:
    """A copy of examples/ under ``root`` and a sweep file of it."""
    shutil.copytree(REPO / "examples", root / "examples", ignore=shutil.ignore_patterns("__py*"))
    sweep = root / "sweep.yaml"
    sweep.write_text(
        f"name: mine\ntrain_config: examples/my_project.yaml\nshapes:\n{shapes}"
        f"repeats: 1\norder_seed: 1\ntimeout_min: 10\n{extra}"
    )
    return sweep


def write_package(root: Path, name: str, source: str) -> None:
    """A package ``name`` under ``root`` whose ``model.py`` is ``source``: a user's module
    the project has never seen, importable as ``name.model`` from ``root``."""
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    (root / name / "model.py").write_text(source)


def assert_train_refused(capsys: Any, out: Path, argv: Sequence[str], expected: str) -> None:
    """``scalescope train`` with ``argv`` (and ``output_dir=out``), in-process, refused before
    anything ran: exit 2, one line that starts as the command's errors do and holds
    ``expected``, no rank started, nothing written."""
    from scalescope import cli

    rc = cli.main(["train", *argv, f"output_dir={out}"])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("scalescope train: error: ") and expected in err, err
    assert ":::SCALESCOPE" not in captured.out  # nothing started
    assert not out.exists()
