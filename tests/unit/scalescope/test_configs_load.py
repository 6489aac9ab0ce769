"""Every file under configs/ loads and validates: train configs, cluster profiles, and sweeps
planned against some committed profile."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from scalescope.config import TrainConfig, load_train_config, resolve_batch
from scalescope.errors import ConfigError
from scalescope.launch.cluster import ClusterProfile, load_profile
from scalescope.launch.sweep_config import load_sweep_config, plan_sweep

REPO = Path(__file__).resolve().parents[3]
CONFIGS = REPO / "configs"
TRAIN_CONFIGS = sorted([*CONFIGS.glob("*.yaml"), *(CONFIGS / "diagnosis").glob("*.yaml")])
SWEEPS = sorted((CONFIGS / "sweeps").glob("*.yaml"))
CLUSTERS = sorted((CONFIGS / "clusters").glob("*.yaml"))


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(CONFIGS)) for p in paths]


def test_every_yaml_under_configs_is_covered() -> None:
    everything = set(CONFIGS.rglob("*.yaml")) | set(CONFIGS.rglob("*.yml"))
    assert everything == set(TRAIN_CONFIGS) | set(SWEEPS) | set(CLUSTERS)
    assert TRAIN_CONFIGS and SWEEPS and CLUSTERS


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=_ids(TRAIN_CONFIGS))
def test_train_config_loads(path: Path) -> None:
    cfg = load_train_config(path)
    assert isinstance(cfg, TrainConfig)
    assert cfg.to_dict()["workload"]["name"] == cfg.workload_name
    resolve_batch(cfg.trainer, 1)


@pytest.mark.parametrize("path", CLUSTERS, ids=_ids(CLUSTERS))
def test_cluster_profile_loads(path: Path) -> None:
    profile = load_profile(path)
    assert isinstance(profile, ClusterProfile)
    assert profile.name
    profile.check_shape(1, 1)  # every site can hold the smallest job


@pytest.mark.parametrize("path", SWEEPS, ids=_ids(SWEEPS))
def test_sweep_loads_and_plans_on_some_cluster_profile(path: Path) -> None:
    """A sweep validates completely (train config and batch split of every shape, shapes
    against the site's limits) against at least one committed cluster profile."""
    sweep = load_sweep_config(path)
    problems: list[str] = []
    for profile_path in CLUSTERS:
        try:
            plan = plan_sweep(
                sweep, path, executor="slurm", profile=load_profile(profile_path), sweep_id="t"
            )
        except ConfigError as exc:
            problems.append(f"{profile_path.name}: {exc}")
            continue
        axes = (sweep.precisions, sweep.accumulate_grad_batches, sweep.strategies)
        entries = len(sweep.shapes) * math.prod(len(axis or [None]) for axis in axes)
        assert len(plan.shapes) == entries  # every shape at every value of every axis
        for shape_plan in plan.shapes:
            world = shape_plan.shape.world_size
            assert shape_plan.per_device_batch_size * world == shape_plan.global_batch_size
        return
    pytest.fail(f"{path.name} fits no profile under configs/clusters:\n" + "\n".join(problems))


def test_local_sweep_plans_for_the_local_executor() -> None:
    """The README's first sweep runs on a machine without Slurm or a GPU."""
    path = CONFIGS / "sweeps" / "local.yaml"
    plan = plan_sweep(
        load_sweep_config(path), path, executor="local", sweep_id="t", gpu_count=lambda: 0
    )
    assert all(s.config.trainer.accelerator == "cpu" for s in plan.shapes)
    assert all(s.resources.gpus_per_node == 0 for s in plan.shapes)
