"""scalescope local-cluster as a command: its module keeps imports light in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

from slurm_helpers import REPO


def test_local_cluster_cli_module_keeps_imports_light() -> None:
    """The command must start fast on a login node: no torch behind it."""
    code = (
        "import sys, scalescope.launch.local_cluster as m, argparse; "
        "p = argparse.ArgumentParser(); m.add_arguments(p); "
        "print(any(k.split('.')[0] in ('torch', 'lightning', 'rich') for k in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert out.stdout.strip() == "False", out.stderr
