"""`scalescope sweep` as a real process: a sweep file's plan checked against what the
workload's records will count, before anything is submitted or written; the command line's
own mistakes in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from core_helpers import REPO, clean_env
from sweep_helpers import write_sweep

PLAN_TOKENS = "plan: {work: 2e11, unit: tokens}\n"
SPIRAL = "name: t\nworkload: {name: spiral}\ntrainer: {batch_size: 8, accelerator: cpu}\n"


def scalescope(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scalescope.cli", *argv],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("scalescope sweep: error: "), line
    return line


@pytest.mark.timeout(300)
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "submission"])
def test_a_plan_in_tokens_over_spiral_is_refused_before_anything(
    tmp_path: Path, dry_run: bool
) -> None:
    sweep = write_sweep(tmp_path, shapes=((1, 1),), train=SPIRAL, extra=PLAN_TOKENS)
    argv = ["sweep", "--config", str(sweep), "--executor", "local"]
    proc = scalescope(tmp_path, *argv, *(["--dry-run"] if dry_run else []))
    line = _one_error_line(proc)
    assert f"{sweep}: plan.unit: tokens, but workload spiral counts no tokens" in line
    assert "plan in samples or steps" in line and "--plan-unit" not in line
    assert not (tmp_path / "outputs").exists()


@pytest.mark.timeout(300)
def test_a_users_module_that_says_its_tokens_plans_in_tokens(tmp_path: Path) -> None:
    """The module's ``tokens_per_sample`` class attribute is read where it is imported: the
    dry run passes, where the same module without it is refused."""
    shutil.copytree(
        REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__py*")
    )
    (tmp_path / "mylm.py").write_text(
        "from examples.my_project.model import MyModel\n\n\n"
        "class MyLM(MyModel):\n    tokens_per_sample = 16\n"
    )
    train = (REPO / "examples" / "my_project.yaml").read_text()
    said = write_sweep(
        tmp_path,
        shapes=((1, 1),),
        train=train,
        extra=PLAN_TOKENS,
        overrides="  workload.name: mylm:MyLM\n",
    )
    proc = scalescope(tmp_path, "sweep", "--config", str(said), "--executor", "local", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "dry run, nothing submitted" in proc.stdout
    silent = write_sweep(tmp_path, shapes=((1, 1),), train=train, extra=PLAN_TOKENS)
    proc = scalescope(
        tmp_path, "sweep", "--config", str(silent), "--executor", "local", "--dry-run"
    )
    assert "plan.unit: tokens, but workload examples.my_project.model:MyModel" in (
        _one_error_line(proc)
    )
    assert not (tmp_path / "outputs").exists()


def test_a_sweep_given_the_summarys_project_option_names_project_nodes(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path, shapes=((1, 1),), train=SPIRAL)
    proc = scalescope(tmp_path, "sweep", "--config", str(sweep), "--project", "2,4")
    line = _one_error_line(proc)
    assert "--project: not an option of scalescope sweep" in line and "project_nodes" in line
    assert not (tmp_path / "outputs").exists()
