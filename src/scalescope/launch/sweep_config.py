"""Sweep config (configs/sweeps/*.yaml) -> validated :class:`SweepPlan`.

A sweep file names a train config, overrides applied to every run, the shapes to measure
and how often to repeat each::

    name: spiral-cpu              # sweep family: sweep id prefix and Comet project
    train_config: ../spiral.yaml  # relative to THIS file (absolute paths work too)
    overrides:                    # dotted train-config keys, applied to every run
      trainer.max_epochs: 3
    shapes:                       # world size = nodes x devices_per_node
      - {nodes: 1, devices_per_node: 1}
      - {nodes: 1, devices_per_node: 2}
    precisions: ["32", "bf16-mixed"]  # optional: every shape at each; default: the train
                                      # config's trainer.precision
    strategies: [ddp, fsdp]       # optional, likewise: DDP against FSDP, a series each
    accumulate_grad_batches: [1, 4]   # optional, likewise: micro-batches per optimizer step
    repeats: 3                    # runs per shape, submitted in rounds (see below)
    profile_repeat: null          # optional: only this repeat (0-based) of every shape runs
                                  # the trainer.profile overrides; the others run unprofiled
    timeout_min: 20               # per job; null = the cluster profile's timeout_min
    order_seed: null              # shuffles the shapes within each round; null = random
    project_nodes: [2, 4, 8]      # optional: the summary projects to these node counts
    project_network: net.yaml     # optional: on this network between nodes (--network;
                                  # e.g. inter_line_rate_gbit_s: 800), relative to THIS file
    plan: {work: 2e11, unit: tokens}  # optional: and plans this training (time, node-hours)

Repeats are interleaved: round 1 submits every shape once, in a shuffled order, then round 2,
and so on (:meth:`SweepPlan.submission_order`). With ``precisions``, each shape runs at
each precision: a plan entry (:class:`ShapePlan`) is a (shape, precision) pair, the jobs are
shapes x precisions x repeats, and each round holds every pair once, shuffled (and likewise
with ``accumulate_grad_batches`` and ``strategies``: a plan entry is then a (shape,
precision, accumulation, strategy) tuple). A slow period
on the cluster (a busy file system, a noisy neighbour) then falls on several shapes instead of
biasing all repeats of one.
The order and its seed are kept in ``sweep.json``.

``train_config`` (and ``project_network``) is resolved against the sweep file's folder, not
the current directory, so that a sweep means the same thing wherever it is launched from.

:func:`plan_sweep` validates *everything* before anything is submitted: the train config of
every shape (through :func:`~scalescope.config.load_train_config`), the batch split of every
world size, every shape against the cluster profile, and GPUs asked of a machine without
them, and an import-path workload's classes and constructor arguments (which imports
lightning, for that case only). This module imports neither torch nor submitit otherwise.
"""

from __future__ import annotations

import importlib
import os
import random
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..config import (
    TrainConfig,
    check_one_step,
    check_workload,
    load_train_config,
    resolve_batch,
    shard_size,
)
from ..config.files import OverrideLayers, merge, name_route
from ..errors import ConfigError
from ..schema import set_dotted
from ..workloads.tokens import tokens_per_sample
from .plan_spec import check_plan
from .resources import (
    GpuCounter,
    Resources,
    Shape,
    local_gpu_count,
    local_resources,
    may_use_gpus,
    slurm_resources,
)
from .sweep_file import NAME, SweepConfig, load_sweep_config

__all__ = ["ShapePlan", "SweepConfig", "SweepPlan", "load_sweep_config", "plan_sweep"]

if TYPE_CHECKING:
    from .cluster import ClusterProfile

ExecutorKind = Literal["slurm", "local"]

# Keys the sweep itself sets for every run: an override of them would be silently lost.
SWEEP_OWNED_KEYS = (
    "trainer.num_nodes",
    "trainer.devices",
    "sweep_id",
    "output_dir",
    "cluster",
    "repeat_index",
)


@dataclass(frozen=True)
class ShapePlan:
    shape: Shape
    config: TrainConfig
    per_device_batch_size: int
    global_batch_size: int
    resources: Resources
    precision_axis: bool = False
    """Whether the sweep lists precisions: the label then names the precision too."""
    accumulate_axis: bool = False
    """Whether the sweep lists accumulate_grad_batches: the label then names it too."""
    strategy_axis: bool = False
    """Whether the sweep lists strategies: the label then names the strategy too."""
    profile_repeat: int | None = None
    """The one repeat that runs ``config``'s ``trainer.profile``; None: every repeat does."""

    @property
    def precision(self) -> str:
        return self.config.trainer.precision

    @property
    def accumulate(self) -> int:
        return self.config.trainer.accumulate_grad_batches

    @property
    def strategy(self) -> str:
        return self.config.trainer.strategy

    @property
    def label(self) -> str:
        """``1x2``, ``1x2@bf16-mixed`` in a sweep over precisions, ``1x2@acc4`` in one over
        gradient accumulation, ``1x2@fsdp`` in one over strategies (all three:
        ``1x2@bf16-mixed@acc4@fsdp``)."""
        label = self.shape.label
        if self.precision_axis:
            label += f"@{self.precision}"
        if self.accumulate_axis:
            label += f"@acc{self.accumulate}"
        if self.strategy_axis:
            label += f"@{self.strategy}"
        return label

    def profiles(self, repeat: int) -> bool:
        """Whether that repeat of this entry captures a profile."""
        on = self.config.trainer.profile.steps > 0
        return on and (self.profile_repeat is None or repeat == self.profile_repeat)

    def config_for(self, repeat: int) -> TrainConfig:
        """The config of that repeat: ``config``, its profile off for the repeats that
        ``profile_repeat`` leaves out."""
        if self.profile_repeat is None or repeat == self.profile_repeat:
            return self.config
        trainer = self.config.trainer
        off = replace(trainer, profile=replace(trainer.profile, steps=0))
        return replace(self.config, trainer=off)

    def config_dict(self, repeat: int | None = None) -> dict[str, Any]:
        """The config as it travels to a run: that repeat's, or ``config`` itself."""
        return (self.config if repeat is None else self.config_for(repeat)).to_dict()


@dataclass(frozen=True)
class SweepPlan:
    sweep_id: str
    name: str
    sweep_file: Path
    train_config_file: Path
    sweep_dir: Path
    """``<output_dir>/sweeps/<sweep_id>``: submitit job folders, run directories, sweep.json."""
    executor: ExecutorKind
    repeats: int
    shapes: list[ShapePlan]
    """One entry per (shape, precision, accumulation); the shape alone without those axes."""
    profile: ClusterProfile | None
    order_seed: int = 0
    seed_source: str = "drawn"
    """Where ``order_seed`` came from: ``--seed``, the sweep file's ``order_seed``, or
    ``drawn`` at random when the plan was made."""
    """Seed of the shape order within each round (:meth:`submission_order`)."""
    project_nodes: tuple[int, ...] = ()
    """Node counts the summary projects to (none: no projection)."""
    summary_plan: dict[str, Any] | None = None
    """The training the summary plans (:class:`PlanSpec`'s fields); None: no plan."""
    project_network: Path | None = None
    """The network profile the summary's projection takes (``--network``); None: what the
    runs measured."""
    profile_repeat: int | None = None
    """The repeat of every shape that captures a profile (``trainer.profile``); None: every
    repeat runs as its config says."""

    @property
    def num_jobs(self) -> int:
        return self.repeats * len(self.shapes)

    @property
    def cluster(self) -> str:
        """The name runs record as their cluster: the profile's, else ``local``."""
        return self.profile.name if self.profile else "local"

    def submission_order(self) -> list[tuple[int, ShapePlan]]:
        """(repeat, shape) in the order jobs are submitted: round by round, every shape (every
        shape x precision pair) once per round, shuffled within the round by a generator
        seeded from ``order_seed`` and the round, so the same seed always gives the same
        order."""
        out: list[tuple[int, ShapePlan]] = []
        for repeat in range(self.repeats):
            shapes = list(self.shapes)
            random.Random(f"{self.order_seed}:{repeat}").shuffle(shapes)
            out.extend((repeat, sp) for sp in shapes)
        return out


def make_sweep_id(name: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{name}-{stamp}"


def _nested(overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Dotted override keys (``trainer.max_epochs``) as the nested mapping configs merge."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", str(key)):
            raise ConfigError(f"{where}: {key!r} is not a dotted config key")
        nested: dict[str, Any] = {}
        set_dotted(nested, str(key), value)
        out = merge(out, nested)
    return out


def _sets_trainer_key(overrides: Mapping[str, Any], key: str) -> bool:
    extra = overrides.get("trainer")
    return isinstance(extra, Mapping) and key in extra


def _sets_project(overrides: Mapping[str, Any]) -> bool:
    extra = overrides.get("tracking")
    return isinstance(extra, Mapping) and "project" in extra


def plan_sweep(
    sweep: SweepConfig,
    sweep_file: str | os.PathLike[str],
    *,
    executor: ExecutorKind,
    profile: ClusterProfile | None = None,
    sweep_id: str | None = None,
    repeats: int | None = None,
    extra_overrides: Mapping[str, Any] | None = None,
    gpu_count: GpuCounter = local_gpu_count,
    order_seed: int | None = None,
) -> SweepPlan:
    """Validate every shape of ``sweep`` and return what to submit; raise ConfigError otherwise.

    ``extra_overrides`` (from the command line; dotted or nested keys) win over the sweep's
    overrides.
    """
    sweep_path = Path(sweep_file)
    _check_request(executor, profile, repeats)
    train_path = _beside(sweep_path, "train_config", sweep.train_config)
    overrides, routes = _overrides(sweep, sweep_path, extra_overrides)
    sweep_id = sweep_id or make_sweep_id(sweep.name)
    if not NAME.match(sweep_id):
        raise ConfigError(f"sweep id {sweep_id!r}: use letters, digits, '.', '_' and '-' only")

    def load(extra: Mapping[str, Any]) -> Any:
        """The train config with ``extra``; a wrong key or value named with the route it came
        by (the sweep file's overrides, the command line, or the train file)."""
        return load_train_config(train_path, extra, routes=routes)

    base = load(overrides)
    resolved = _check_base_workload(base, train_path, routes)
    if sweep.plan is not None:  # the summary's plan, against what the records will count
        declared = getattr(resolved, "tokens_per_sample", None)
        try:
            check_plan(
                sweep.plan,
                tokens_per_sample(base.to_dict()["workload"], declared),
                base.workload_name,
            )
        except ConfigError as exc:
            raise ConfigError(f"{sweep_path}: {exc}") from None
    network = _project_network_path(sweep, sweep_path)
    _check_profile_repeat(sweep, base, repeats if repeats is not None else sweep.repeats)
    sweep_dir = (Path(base.output_dir) / "sweeps" / sweep_id).absolute()
    plans = _ShapePlanner(
        sweep, executor, profile, overrides, sweep_id, sweep_dir, load, gpu_count
    ).plan_all()
    seed, seed_source = _order_seed(sweep, order_seed)
    return SweepPlan(
        sweep_id=sweep_id,
        name=sweep.name,
        sweep_file=sweep_path,
        train_config_file=train_path,
        sweep_dir=sweep_dir,
        executor=executor,
        repeats=repeats if repeats is not None else sweep.repeats,
        shapes=plans,
        profile=profile,
        order_seed=seed,
        seed_source=seed_source,
        project_nodes=tuple(sweep.project_nodes or ()),
        summary_plan=asdict(sweep.plan) if sweep.plan is not None else None,
        project_network=network,
        profile_repeat=sweep.profile_repeat,
    )


def _check_profile_repeat(sweep: SweepConfig, base: TrainConfig, repeats: int) -> None:
    """``profile_repeat`` names a repeat the sweep runs, and a profile to take in it."""
    k = sweep.profile_repeat
    if k is None:
        return
    if k >= repeats:
        raise ConfigError(
            f"profile_repeat: {k} names no repeat: the sweep runs {repeats} repeat(s) of every "
            f"shape, numbered from 0 to {repeats - 1}"
        )
    if base.trainer.profile.steps <= 0:
        raise ConfigError(
            f"profile_repeat: {k}, but nothing asks for a profile: set trainer.profile.steps "
            "(e.g. 5) in the overrides; profile_repeat keeps it to that one repeat"
        )


def _check_request(
    executor: ExecutorKind, profile: ClusterProfile | None, repeats: int | None
) -> None:
    if repeats is not None and repeats < 1:
        raise ConfigError(f"--repeats: must be > 0, got {repeats}")
    if executor == "slurm" and profile is None:
        raise ConfigError(
            "the slurm executor needs a cluster profile: "
            "pass --cluster configs/clusters/<site>.yaml"
        )


def _beside(sweep_path: Path, key: str, value: str, *, folder: bool = False) -> Path:
    """The file (or, with ``folder``, the folder) the sweep file's ``key`` names (``value``:
    absolute, or relative to the sweep file's folder), which must exist; the error names the
    key and where it looked."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = sweep_path.parent / path
    if path.is_dir() and not folder:
        raise ConfigError(f"{sweep_path}: {key} {value!r} is a folder ({path}); name a file")
    if not (path.is_file() or (folder and path.is_dir())):
        raise ConfigError(
            f"{sweep_path}: {key} {value!r} not found (looked for {path}; relative paths are "
            "relative to the sweep file's folder)"
        )
    return path


def _project_network_path(sweep: SweepConfig, sweep_path: Path) -> Path | None:
    """The sweep file's ``project_network``, found (relative to the sweep file) and read as the
    summary will read it, before anything is submitted; None where it names none. Read by the
    analysis package's reader where it is installed beside the launcher (without it, no
    summary is made, and the file is only looked for)."""
    if sweep.project_network is None:
        return None
    # a profile, an all-reduce table, or earlier scalescope runs across nodes (a folder)
    path = _beside(sweep_path, "project_network", sweep.project_network, folder=True)
    try:
        reader = importlib.import_module("analysis.compute.projection.network_runs")
    except ImportError:
        return path.absolute()
    try:
        reader.read_network(str(path))
    except ValueError as exc:
        raise ConfigError(f"{sweep_path}: project_network: {exc}") from None
    return path.absolute()


def _overrides(
    sweep: SweepConfig, sweep_path: Path, extra_overrides: Mapping[str, Any] | None
) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """The overrides every run gets (the command line's over the sweep file's, the sweep's
    name as the Comet project unless they set one) and the routes they came by."""
    from_file = _nested(sweep.overrides, f"{sweep_path}: overrides")
    from_cli = _nested(extra_overrides or {}, "command-line override")
    overrides = merge(from_file, from_cli)
    routes = [(f"{sweep_path}: overrides", from_file), ("the command line", from_cli)]
    _check_overrides(sweep, overrides)
    # One Comet project per sweep family: the sweep's name, over the train file's project.
    if not _sets_project(overrides):
        overrides = merge(overrides, {"tracking": {"project": sweep.name}})
    return overrides, routes


def _check_base_workload(base: TrainConfig, train_path: Path, routes: OverrideLayers) -> Any:
    """What checking the workload resolved (an import-path workload's classes), or None; its
    errors named with the route their key came by (:func:`~scalescope.config.files.name_route`)."""
    try:
        # An import-path workload is imported and checked here, on the submitting machine
        # (this imports lightning); built-in workloads need nothing more.
        return check_workload(base, resolve_batch(base.trainer, 1))
    except ConfigError as exc:
        raise name_route(exc, routes, str(train_path)) from None


def _check_overrides(sweep: SweepConfig, overrides: Mapping[str, Any]) -> None:
    """Refuse an override of what the sweep sets for every run itself."""
    for key in SWEEP_OWNED_KEYS:
        node: Any = overrides
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            raise ConfigError(
                f"override {key}: the sweep sets it for every run (from shapes, the sweep id and "
                "the sweep folder); remove it"
            )
    for axis, key, plural in (
        (sweep.precisions, "precision", "precisions"),
        (sweep.accumulate_grad_batches, "accumulate_grad_batches", "accumulate_grad_batches"),
        (sweep.strategies, "strategy", "strategies"),
    ):
        if axis is not None and _sets_trainer_key(overrides, key):
            raise ConfigError(
                f"override trainer.{key}: the sweep's {plural} list sets it for every run; "
                "remove one of the two"
            )


@dataclass
class _ShapePlanner:
    """Plans each (shape, precision, accumulation) entry of a sweep with what they share."""

    sweep: SweepConfig
    executor: ExecutorKind
    profile: ClusterProfile | None
    overrides: dict[str, Any]
    sweep_id: str
    sweep_dir: Path
    load: Callable[[Mapping[str, Any]], Any]
    gpu_count: GpuCounter
    gpus_here: int | None = None
    """Asked once, and only when a local run could use GPUs."""

    def plan_all(self) -> list[ShapePlan]:
        sweep = self.sweep
        precisions: list[str | None] = list(sweep.precisions) if sweep.precisions else [None]
        accumulations: list[int | None] = (
            list(sweep.accumulate_grad_batches) if sweep.accumulate_grad_batches else [None]
        )
        strategies: list[str | None] = list(sweep.strategies) if sweep.strategies else [None]
        if self.executor == "slurm":
            assert self.profile is not None
            for shape in sweep.shapes:  # what the cluster can hold comes before batch arithmetic
                self.profile.check_shape(shape.nodes, shape.devices_per_node)
        return [
            self.plan(shape, precision, acc, strategy)
            for shape in sweep.shapes
            for precision in precisions
            for acc in accumulations
            for strategy in strategies
        ]

    def plan(
        self, shape: Shape, precision: str | None, acc: int | None, strategy: str | None = None
    ) -> ShapePlan:
        where = f"shape {shape.label} (world size {shape.world_size})"
        if precision is not None:
            where += f" at precision {precision}"
        if acc is not None:
            where += f" with {acc} micro-batches per step"
        if strategy is not None:
            where += f" under {strategy}"
        per_run = self._run_overrides(shape, precision, acc, strategy)
        try:
            cfg = self.load(per_run)
            batch = resolve_batch(cfg.trainer, shape.world_size)
            # The trainer's own rules, asked here so that no job fails on them later (an
            # import-path workload was imported above: checking it again costs nothing).
            check_one_step(cfg.workload_params(), batch.global_batch_size)
            check_workload(cfg, batch)
            shard_size(cfg, shape.nodes, shape.devices_per_node)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return ShapePlan(
            shape=shape,
            config=cfg,
            per_device_batch_size=batch.per_device_batch_size,
            global_batch_size=batch.global_batch_size,
            resources=self._resources(shape, cfg, where),
            precision_axis=self.sweep.precisions is not None,
            accumulate_axis=self.sweep.accumulate_grad_batches is not None,
            strategy_axis=self.sweep.strategies is not None,
            profile_repeat=self.sweep.profile_repeat,
        )

    def _run_overrides(
        self, shape: Shape, precision: str | None, acc: int | None, strategy: str | None
    ) -> dict[str, Any]:
        """The overrides of one run: its shape and axes, the sweep's id, folder and cluster."""
        trainer: dict[str, Any] = {"num_nodes": shape.nodes, "devices": shape.devices_per_node}
        axes = {"precision": precision, "accumulate_grad_batches": acc, "strategy": strategy}
        trainer.update({k: v for k, v in axes.items() if v is not None})
        return merge(
            self.overrides,
            {
                "trainer": trainer,
                "sweep_id": self.sweep_id,
                "output_dir": str(self.sweep_dir),
                "cluster": self.profile.name if self.profile else "local",
            },
        )

    def _resources(self, shape: Shape, cfg: TrainConfig, where: str) -> Resources:
        if self.executor == "slurm":
            assert self.profile is not None
            return slurm_resources(self.sweep.timeout_min, shape, cfg, self.profile, where)
        if self.gpus_here is None and may_use_gpus(cfg, self.profile):
            self.gpus_here = self.gpu_count()
        return local_resources(
            self.sweep.timeout_min, shape, cfg, self.profile, where, self.gpus_here or 0
        )


def _order_seed(sweep: SweepConfig, order_seed: int | None) -> tuple[int, str]:
    """The seed of the shape order within each round, and where it came from."""
    if order_seed is not None:
        return order_seed, "--seed"
    if sweep.order_seed is not None:
        return sweep.order_seed, "the sweep file's order_seed"
    return secrets.randbelow(2**31), "drawn"
