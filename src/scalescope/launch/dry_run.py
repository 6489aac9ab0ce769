"""What ``scalescope sweep --dry-run`` prints: the sweep, its order, and every shape's
resources and sbatch script (the submission's opening lines share the order's words)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .sweep_config import ShapePlan, SweepPlan


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _jobs_breakdown(plan: SweepPlan) -> str:
    """``2 shapes x 3 repeats``, or ``2 shapes x 2 precisions x 3 repeats`` (and ``x 2
    accumulations`` in a sweep over gradient accumulation)."""
    shapes = len({sp.shape.label for sp in plan.shapes})
    axis = ""
    if any(sp.precision_axis for sp in plan.shapes):
        axis += f" x {len({sp.precision for sp in plan.shapes})} precisions"
    if any(sp.accumulate_axis for sp in plan.shapes):
        axis += f" x {len({sp.accumulate for sp in plan.shapes})} accumulations"
    if any(sp.strategy_axis for sp in plan.shapes):
        axis += f" x {len({sp.strategy for sp in plan.shapes})} strategies"
    return f"{shapes} shapes{axis} x {plan.repeats} repeats"


def _what_is_shuffled(plan: SweepPlan) -> str:
    names = ["shape"]
    if any(sp.precision_axis for sp in plan.shapes):
        names.append("precision")
    if any(sp.accumulate_axis for sp in plan.shapes):
        names.append("accumulation")
    if any(sp.strategy_axis for sp in plan.shapes):
        names.append("strategy")
    if len(names) == 1:
        return "shapes"
    kind = {2: "pairs", 3: "triples"}.get(len(names), "tuples")
    return f"({', '.join(names)}) {kind}"


def _round_orders(plan: SweepPlan) -> list[str]:
    rounds: dict[int, list[str]] = {}
    for repeat, sp in plan.submission_order():
        rounds.setdefault(repeat, []).append(sp.label)
    return [f"{r + 1}: {' '.join(labels)}" for r, labels in rounds.items()]


def _same_order(plan: SweepPlan) -> str:
    """How the submission gets the dry run's order: the file fixes the seed, or --seed does."""
    if plan.seed_source == "drawn":
        return (
            f"drawn now; a submission draws its own: pass --seed {plan.order_seed} to submit "
            "this order"
        )
    return f"the seed comes from {plan.seed_source}: a submission uses the same"


def _summary(plan: SweepPlan) -> str:
    """What the summary at the sweep's end adds, as the sweep file asks (checked already):
    its projection (``project_nodes``, on ``project_network``) and its plan; '' for
    neither."""
    out = []
    if plan.project_nodes:
        nodes = ", ".join(str(n) for n in plan.project_nodes)
        on = (
            f" on the network of {_rel(plan.project_network)}"
            if plan.project_network
            else " on the network the runs measure"
        )
        out.append(f"projects to {nodes} node(s){on}")
    if plan.summary_plan:
        out.append(f"plans {plan.summary_plan['work']:g} {plan.summary_plan['unit']}")
    return "; ".join(out)


def _profiling(plan: SweepPlan) -> str | None:
    """Which jobs capture a profile (``trainer.profile``), or None where none does."""
    steps = {sp.config.trainer.profile.steps for sp in plan.shapes} - {0}
    if not steps:
        return None
    what = f"trainer.profile.steps={'/'.join(str(s) for s in sorted(steps))}"
    k = plan.profile_repeat
    if k is None:
        return f"every job profiles ({what})"
    return (
        f"repeat {k} of every shape (round {k + 1}) profiles ({what}); the other repeats run "
        "with trainer.profile.steps=0"
    )


def _profiled_jobs(plan: SweepPlan, sp: ShapePlan) -> str:
    """``, repeat 0 profiled``: which of a shape's jobs profile, where any does."""
    repeats = [r for r in range(plan.repeats) if sp.profiles(r)]
    if not repeats:
        return ""
    if len(repeats) == plan.repeats:
        return ", every one profiled"
    return f", repeat {', '.join(str(r) for r in repeats)} profiled"


def dry_run_lines(plan: SweepPlan, why: str, at_once: int | None = None) -> list[str]:
    """What --dry-run prints: the sweep, then every shape's resources and sbatch script;
    ``at_once``: :func:`~scalescope.launch.sweep.max_parallel`."""
    from .executor import local_parameters, render_sbatch

    where = plan.executor + (f" (profile {plan.profile.name})" if plan.profile else "")
    lines = [
        f"sweep {plan.sweep_id}: dry run, nothing submitted",
        f"  sweep file    {_rel(plan.sweep_file)}",
        f"  train config  {_rel(plan.train_config_file)}",
        f"  executor      {where}: {why}",
        f"  folder        {plan.sweep_dir}",
        f"  jobs          {plan.num_jobs} ({_jobs_breakdown(plan)})",
        f"  order         round by round, {_what_is_shuffled(plan)} shuffled "
        f"(seed {plan.order_seed}): " + "; ".join(_round_orders(plan)),
        f"  same order    {_same_order(plan)}",
    ]
    if plan.executor == "slurm":
        lines.append(
            f"  at once       {at_once} job(s), by afterany dependencies"
            if at_once
            else "  at once       no limit: Slurm starts each job when it fits"
            + (
                ""
                if plan.shapes and plan.shapes[0].resources.exclusive
                else ", and jobs may share a node (the profile's exclusive: true, or "
                "--max-parallel N)"
            )
        )
    profiling = _profiling(plan)
    if profiling:
        lines.append(f"  profile       {profiling}")
    summary = _summary(plan)
    if summary:
        lines.append(f"  summary       {summary}")
    for i, sp in enumerate(plan.shapes, 1):
        r = sp.resources
        t = sp.config.trainer
        lines += [
            "",
            f"[{i}/{len(plan.shapes)}] shape {sp.label}: world size {sp.shape.world_size}, "
            f"{t.scaling} scaling, global batch {sp.global_batch_size} "
            f"({sp.per_device_batch_size} per device), accelerator {t.accelerator}, "
            f"precision {t.precision}"
            + (f", strategy {t.strategy}" if sp.strategy_axis else "")
            + (
                f", {t.accumulate_grad_batches} micro-batches per step"
                if t.accumulate_grad_batches > 1
                else ""
            )
            + f", {plan.repeats} job(s)"
            + _profiled_jobs(plan, sp),
            f"  nodes {r.nodes}, tasks per node {r.tasks_per_node}, gpus per node "
            f"{r.gpus_per_node}, cpus per task {r.cpus_per_task}, "
            f"mem {f'{r.mem_gb} GB' if r.mem_gb is not None else 'site default'}, "
            f"time {r.timeout_min} min",
        ]
        if plan.executor == "slurm":
            lines.append(
                f"  partition {r.partition or 'default'}, account {r.account or '-'}, "
                f"qos {r.qos or '-'}, constraint {r.constraint or '-'}"
            )
            text = render_sbatch(plan, sp)
            if text is None:
                lines.append("  (this submitit version cannot render the sbatch script)")
            else:
                lines.append("  sbatch script:")
                lines += [f"    {ln}".rstrip() for ln in text.rstrip("\n").splitlines()]
        else:
            params = ", ".join(f"{k}={v}" for k, v in local_parameters(sp).items())
            lines.append(f"  submitit LocalExecutor: {params} ({at_once or 1} run(s) at a time)")
    return lines
