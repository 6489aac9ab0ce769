"""``python -m analysis.project`` in separate processes: what only a fresh interpreter shows.

Everything else about the command is tested in this process (tests/unit/analysis/test_backtest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from analysis_helpers import REPO

CASES = REPO / "benchmarks" / "projection_cases.yaml"


def test_the_refit_is_the_same_to_the_bit_whatever_the_hash_seed(tmp_path: Path) -> None:
    """Python salts the hash of a string per process (PYTHONHASHSEED), so a sum taken in the
    order of a set of source names changes in its last bits from one run to the next. The
    error model must not: the shipped file is a refit, byte for byte, on any interpreter run."""
    outs = []
    for seed in ("1", "2", "3"):
        out = tmp_path / f"fit-{seed}.json"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        argv = ["fit-error", str(CASES), "--draws", "40", "--out", str(out)]
        done = subprocess.run(
            [sys.executable, "-m", "analysis.project", *argv],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
