"""What every tier shares: the tier marks, taken from the folder, hypothesis profiles, and time
limits that stretch on a slow machine.

A test's tier is where it lives (``tests/unit``, ``tests/integration``, ``tests/slurm``); the
folder's name becomes its marker, so ``-m unit`` and ``tests/unit`` select the same tests and
no decorator can disagree with the layout. A test file directly under ``tests/`` is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from time_limits import TIMEOUT_SCALE, measure_scale, stretch_limits

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "integration", "slurm")

# The property tests cost the same everywhere: `dev` for a quick local run, `ci` (chosen when
# CI is set) with more examples and a fixed database-free run, so CI never replays a failure
# found on someone's laptop and never writes .hypothesis/ into the clone.
settings.register_profile(
    "dev", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("SCALESCOPE_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty folder: `outputs/` appears there if anything is submitted."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def tier_of(path: Path) -> str | None:
    try:
        first = Path(path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in TIERS else None


def pytest_configure(config: pytest.Config) -> None:
    config.stash[TIMEOUT_SCALE] = measure_scale()


def pytest_report_header(config: pytest.Config) -> str | None:
    scale = config.stash.get(TIMEOUT_SCALE, 1.0)
    if scale == 1.0:
        return None
    return f"time limits x{scale:.1f} (this machine's speed against the reference one's)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            raise pytest.UsageError(
                f"{item.nodeid}: every test lives in tests/unit, tests/integration or tests/slurm"
            )
        item.add_marker(getattr(pytest.mark, tier))
    stretch_limits(config, items, config.stash[TIMEOUT_SCALE])


def pytest_collection_finish(session: pytest.Session) -> None:
    """With Slurm tests selected and the local cluster up, submit the Slurm tier's slow jobs
    now: they wait out a time limit and a requeue while the other tiers run (slurm_helpers)."""
    if session.config.option.collectonly or not any(
        tier_of(item.path) == "slurm" for item in session.items
    ):
        return
    if not os.environ.get("SLURM_CONF") or shutil.which("sbatch") is None:
        return  # no cluster yet: tests/slurm/conftest.py submits them when first needed
    from slurm_helpers import EARLY_JOBS, EarlyJobs

    root = Path(tempfile.mkdtemp(prefix="scalescope-early-jobs-"))
    try:
        session.config.stash[EARLY_JOBS] = EarlyJobs.start(root)
    except BaseException as exc:  # the tests that check these jobs fail with it
        session.config.stash[EARLY_JOBS] = exc


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Whatever the early jobs still do when the session ends (deselected, or a failed run)
    is cancelled, and their folder removed."""
    from slurm_helpers import EARLY_JOBS, EarlyJobs

    jobs = session.config.stash.get(EARLY_JOBS, None)
    if isinstance(jobs, EarlyJobs):
        jobs.cancel()
        shutil.rmtree(jobs.root, ignore_errors=True)
