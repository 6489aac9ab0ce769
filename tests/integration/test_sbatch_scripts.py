"""The sbatch scripts in slurm_jobs/, submitted for real to the local cluster (CPU tasks).

Also checks, without Slurm, what the scripts read from the cluster profiles (golden files in
tests/golden/, through tests/golden.py) and their small shell helpers.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import golden
import pytest
from slurm_helpers import REPO

JOBS = REPO / "slurm_jobs"
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
PROFILES = sorted((REPO / "configs" / "clusters").glob("*.yaml"))


def _bash(snippet: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``snippet`` after sourcing common.sh, in a clean Slurm-free environment."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "MASTER_", "SCALESCOPE_"))
    }
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {JOBS}/common.sh; {snippet}"],
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        timeout=60,
    )


# --- without Slurm ---------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_setup_block_read_by_awk_equals_the_profile(profile: Path) -> None:
    out = _bash(f'scalescope_setup_block "{profile}"')
    assert out.returncode == 0, out.stderr
    golden.check_text(GOLDEN / f"setup_{profile.stem}.sh", out.stdout)
    from scalescope.launch.cluster import load_profile

    assert out.stdout == load_profile(profile).setup


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_profile_name_read_by_awk_equals_the_profile(profile: Path) -> None:
    from scalescope.launch.cluster import load_profile

    out = _bash(f'scalescope_profile_name "{profile}"')
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == load_profile(profile).name


@pytest.mark.parametrize(
    "line", ["name: gpu-site", 'name: "gpu-site"', "name: 'gpu-site'", "name: gpu-site  # site"]
)
def test_profile_name_forms(tmp_path: Path, line: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"{line}\npartition: gpu\nsetup: |\n  name: not-this\n")
    out = _bash(f'scalescope_profile_name "{path}"')
    assert out.stdout == "gpu-site\n", out


def test_every_golden_file_has_its_profile() -> None:
    stems = {p.stem for p in PROFILES}
    for file in GOLDEN.glob("setup_*.sh"):
        assert file.stem.removeprefix("setup_") in stems, f"{file} is stale: remove it"


@pytest.mark.parametrize(
    ("script", "nodes", "tasks"),
    [
        ("single_gpu.sh", 1, 1),
        ("multi_gpu_single_node.sh", 1, 4),
        ("multi_node_multi_gpu.sh", 2, 4),
    ],
)
def test_script_headers(script: str, nodes: int, tasks: int) -> None:
    text = (JOBS / script).read_text()
    directives = re.findall(r"^#SBATCH (\S+)", text, re.MULTILINE)
    assert f"--nodes={nodes}" in directives
    assert f"--ntasks-per-node={tasks}" in directives
    assert "--output=outputs/slurm-%j.out" in directives
    # No GPUs on the local cluster; partition and account belong to the command line.
    assert not any(
        d.startswith(("--gpus", "--gres", "--partition", "--account")) for d in directives
    )
    # sbatch stops reading directives at the first command.
    first_command = min(
        i for i, line in enumerate(text.splitlines()) if line and not line.startswith("#")
    )
    last_directive = max(
        i for i, line in enumerate(text.splitlines()) if line.startswith("#SBATCH")
    )
    assert last_directive < first_command


@pytest.mark.parametrize(
    ("env", "ok"),
    [
        ({"SLURM_GPUS_ON_NODE": "4", "SLURM_NTASKS_PER_NODE": "4"}, True),
        ({"SLURM_GPUS_PER_NODE": "a100:4", "SLURM_TASKS_PER_NODE": "4(x2)"}, True),
        ({"SLURM_NTASKS_PER_NODE": "2"}, True),  # CPU tasks
        ({"SLURM_GPUS_ON_NODE": "4", "SLURM_NTASKS_PER_NODE": "1"}, False),
        ({"SLURM_GPUS_PER_NODE": "2", "SLURM_TASKS_PER_NODE": "4"}, False),
        ({"SLURM_TASKS_PER_NODE": "2,1"}, False),  # uneven nodes
    ],
)
def test_gpus_per_node_must_equal_tasks_per_node(env: dict[str, str], ok: bool) -> None:
    out = _bash("scalescope_check_gpus", env)
    assert (out.returncode == 0) == ok, out.stderr
    if not ok:
        assert out.stderr.startswith("scalescope job: error: ")
        assert len(out.stderr.strip().splitlines()) == 1


def test_master_port_comes_from_the_job_id_unless_set() -> None:
    a = _bash("scalescope_master_port", {"SLURM_JOB_ID": "1234"}).stdout.strip()
    b = _bash("scalescope_master_port", {"SLURM_JOB_ID": "11234"}).stdout.strip()
    # Lightning's default gives both 16234; one of them would fail to rendezvous.
    assert a != b
    assert all(25000 <= int(p) < 32000 for p in (a, b))
    kept = _bash("scalescope_master_port", {"SLURM_JOB_ID": "1", "MASTER_PORT": "29500"})
    assert kept.stdout.strip() == "29500"


def test_script_outside_sbatch_says_how_to_submit() -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    out = subprocess.run(
        ["bash", str(JOBS / "single_gpu.sh")], capture_output=True, text=True, env=base, timeout=60
    )
    assert out.returncode != 0
    assert "submit with sbatch from the repository root" in out.stderr


# --- real jobs on the local cluster -----------------------------------------------------------
