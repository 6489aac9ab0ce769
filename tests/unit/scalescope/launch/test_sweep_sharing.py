"""Jobs of a sweep that would share a node: one at a time on one machine (the local executor,
and the local cluster's profile, whose two nodes are one machine's cores) unless
``--max-parallel`` says otherwise, and whole nodes on a cluster whose profile says
``exclusive: true``."""

from __future__ import annotations

from pathlib import Path

import pytest
from sweep_helpers import CPU_PROFILE, sweep_cli, write_profile, write_sweep

from scalescope.launch import slurm_info
from scalescope.launch.cluster import load_profile
from scalescope.launch.executor import render_sbatch
from scalescope.launch.sweep import max_parallel
from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

REPO = Path(__file__).resolve().parents[4]
LOCAL_CLUSTER = REPO / "configs" / "clusters" / "local.yaml"


def _plan(sweep: Path, executor: str, profile: Path | None = None):  # type: ignore[no-untyped-def]
    return plan_sweep(
        load_sweep_config(sweep),
        sweep,
        executor=executor,  # type: ignore[arg-type]
        profile=load_profile(profile) if profile else None,
        sweep_id="t",
    )


def test_one_machine_runs_one_job_at_a_time_unless_told(in_tmp: Path) -> None:
    sweep = write_sweep(in_tmp, shapes=((1, 1), (1, 2), (2, 1)))
    local = _plan(write_sweep(in_tmp), "local")
    assert max_parallel(local, None) == 1
    assert max_parallel(local, 2) == 2
    on_local_cluster = _plan(sweep, "slurm", LOCAL_CLUSTER)
    assert load_profile(LOCAL_CLUSTER).max_parallel == 1
    assert max_parallel(on_local_cluster, None) == 1
    assert max_parallel(on_local_cluster, 6) == 6  # --max-parallel wins over the profile
    site = _plan(sweep, "slurm", write_profile(in_tmp, CPU_PROFILE))
    assert max_parallel(site, None) is None  # a real cluster: Slurm schedules


def test_the_dry_run_says_how_many_run_at_once(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slurm_info, "partition_limits", lambda **_: None)  # sinfo: no answer
    sweep = write_sweep(in_tmp)
    argv = ("--config", str(sweep), "--executor", "slurm", "--dry-run")
    assert sweep_cli(*argv, "--cluster", str(LOCAL_CLUSTER)) == 0
    assert "at once       1 job(s), by afterany dependencies" in capsys.readouterr().out
    profile = write_profile(in_tmp, CPU_PROFILE)
    assert sweep_cli(*argv, "--cluster", str(profile)) == 0
    out = capsys.readouterr().out
    assert (
        "at once       no limit: Slurm starts each job when it fits, and jobs may share a " in out
    )
    exclusive = write_profile(in_tmp, CPU_PROFILE + "exclusive: true\n", "whole.yaml")
    assert sweep_cli(*argv, "--cluster", str(exclusive)) == 0
    out = capsys.readouterr().out
    assert "at once       no limit: Slurm starts each job when it fits\n" in out
    assert "#SBATCH --exclusive" in out


def test_exclusive_asks_slurm_for_whole_nodes_once(in_tmp: Path) -> None:
    sweep = write_sweep(in_tmp)

    def script(profile_text: str, name: str) -> str:
        plan = _plan(sweep, "slurm", write_profile(in_tmp, profile_text, name))
        text = render_sbatch(plan, plan.shapes[0])
        assert text is not None
        return text

    assert "--exclusive" not in script(CPU_PROFILE, "shared.yaml")
    assert script(CPU_PROFILE + "exclusive: true\n", "whole.yaml").count("--exclusive") == 1
    both = CPU_PROFILE + "exclusive: true\nsbatch_extra: ['--exclusive']\n"
    assert script(both, "both.yaml").count("--exclusive") == 1
    example = load_profile(REPO / "configs" / "clusters" / "example_a100.yaml")
    assert example.exclusive and "--exclusive" not in example.sbatch_extra
