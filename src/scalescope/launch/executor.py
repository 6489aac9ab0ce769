"""The executor side of a sweep: pick Slurm or local, turn a :class:`ShapePlan` into submitit
parameters, render the sbatch script, submit.

Kept apart, as in submitit itself: this module submits and hands back :class:`JobHandle`
objects; :mod:`scalescope.launch.monitor` polls them; :class:`SweepRun` is what runs *inside* the
job. Nothing here prints.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import submitit
from submitit.helpers import DelayedSubmission

from ..errors import ConfigError, first_line
from ..record import ResultRecord
from .sweep_config import ExecutorKind, Shape, ShapePlan, SweepPlan

ExecutorChoice = Literal["auto", "slurm", "local"]

MAX_NUM_TIMEOUT = 1
"""Requeues after a *timeout* (preemption requeues are not counted): a benchmark that ran out
of time once is retried once, from scratch, not four times as submitit's default would."""

SINFO_TIMEOUT_S = 5.0


def slurm_reachable(timeout_s: float = SINFO_TIMEOUT_S) -> tuple[bool, str]:
    """Whether sbatch can reach a controller: ``sinfo`` answers within ``timeout_s``.

    submitit's AutoExecutor picks Slurm whenever ``srun`` is on PATH, which is also true on a
    machine with the client packages and no cluster; asking the controller is what counts.
    """
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return False, "sbatch/sinfo not on PATH"
    try:
        proc = subprocess.run(
            ["sinfo", "--noheader", "--format=%P"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"sinfo did not answer within {timeout_s:g} s"
    except OSError as exc:
        return False, f"sinfo failed: {exc}"
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return False, f"sinfo failed: {lines[-1] if lines else f'exit code {proc.returncode}'}"
    return True, "sinfo answered"


def choose_executor(requested: ExecutorChoice) -> tuple[ExecutorKind, str]:
    """(executor, why). ``auto`` is Slurm when a controller answers, else local."""
    if requested == "local":
        return "local", "asked for"
    if requested == "slurm":
        return "slurm", "asked for"
    ok, why = slurm_reachable()
    return ("slurm", why) if ok else ("local", f"no Slurm cluster ({why})")


def require_slurm() -> None:
    ok, why = slurm_reachable()
    if not ok:
        raise ConfigError(f"the slurm executor cannot submit: {why}")


# --- parameters --------------------------------------------------------------------------------


def _sbatch_extra(options: tuple[str, ...]) -> dict[str, Any]:
    """``['--exclusive', '--reservation=x']`` as submitit's ``additional_parameters``."""
    out: dict[str, Any] = {}
    for opt in options:
        if not opt.startswith("--") or len(opt) < 3:
            raise ConfigError(
                f"sbatch_extra: {opt!r}: use long options, e.g. --exclusive or --reservation=name"
            )
        key, sep, value = opt[2:].partition("=")
        if not sep:
            key, _, value = opt[2:].partition(" ")
        out[key.strip()] = value.strip() if value.strip() else True
    return out


def job_name(plan: SweepPlan, sp: ShapePlan) -> str:
    """``scalescope-<sweep>-<shape>``, with ``@<precision>`` (``@acc<k>``) when precision
    (gradient accumulation) is a sweep axis
    (two precisions of one shape are two jobs in squeue). Never "bash" or "interactive":
    Lightning treats those as not-a-batch-job."""
    return f"scalescope-{plan.name}-{sp.label}"


def slurm_parameters(plan: SweepPlan, sp: ShapePlan) -> dict[str, Any]:
    """SlurmExecutor parameters of one shape; the same dict renders the dry-run preview."""
    r = sp.resources
    params: dict[str, Any] = {
        "job_name": job_name(plan, sp),
        "time": r.timeout_min,
        "nodes": r.nodes,
        "ntasks_per_node": r.tasks_per_node,
        "cpus_per_task": r.cpus_per_task,
    }
    if r.gpus_per_node:
        params["gpus_per_node"] = r.gpus_per_node
    if r.mem_gb is not None:
        params["mem"] = f"{r.mem_gb}GB"
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(r, key)
        if value is not None:
            params[key] = value
    if r.setup:
        params["setup"] = list(r.setup)
    extra = _sbatch_extra(r.sbatch_extra)
    if r.exclusive and "exclusive" not in extra:
        params["exclusive"] = True
    if extra:
        params["additional_parameters"] = extra
    return params


def local_parameters(sp: ShapePlan) -> dict[str, Any]:
    """LocalExecutor parameters. GPUs stay hidden (CUDA_VISIBLE_DEVICES='') unless asked for."""
    r = sp.resources
    return {
        "nodes": 1,
        "tasks_per_node": r.tasks_per_node,
        "gpus_per_node": r.gpus_per_node,
        # LocalExecutor's default is 2 minutes: always pass the sweep's limit.
        "timeout_min": r.timeout_min,
    }


def job_folder(plan: SweepPlan) -> Path:
    """submitit's folder: one sub-folder per job id (``%j``) in the sweep folder."""
    return plan.sweep_dir / "%j"


def submit_command(folder: Path) -> str:
    """The command line submitit's SlurmExecutor puts in the script it submits.

    submitit has no public way to get it (``SlurmExecutor._submitit_command_str`` is private),
    so it is spelled out here exactly as submitit 1.5 spells it; the golden dry-run test
    notices when a submitit upgrade changes it.
    """
    return " ".join(
        [shlex.quote(sys.executable), "-u -m submitit.core._submit", shlex.quote(str(folder))]
    )


def render_sbatch(plan: SweepPlan, sp: ShapePlan) -> str | None:
    """The sbatch script submitit would submit for one run of this shape, or None if it
    cannot say.

    submitit renders the script only while submitting; the one function that renders it
    without submitting, ``submitit.slurm.slurm._make_sbatch_string``, is private and has no
    public equivalent in submitit 1.5.4. A dry run needs the text without a cluster, so it is
    used here behind an ImportError guard: a submitit that moves it gives a dry run without
    the script, never a crash.
    """
    try:
        from submitit.slurm.slurm import _make_sbatch_string
    except ImportError:
        return None
    params = slurm_parameters(plan, sp)
    folder = job_folder(plan)
    try:
        text: str = _make_sbatch_string(command=submit_command(folder), folder=folder, **params)
    except (ValueError, TypeError) as exc:
        first = first_line(exc) or type(exc).__name__
        raise ConfigError(f"shape {sp.label}: submitit refuses the parameters: {first}") from None
    return text


# --- inside the job ----------------------------------------------------------------------------


class SweepRun:
    """What every sweep job runs: rebuild the TrainConfig from a plain dict and train once.

    A small picklable object: no Trainer, logger or torch state is created before the job
    starts (building them here would pickle them, and CUDA/NCCL state does not survive that).
    """

    def __init__(
        self, config: dict[str, Any], shape: str, repeat: int, submit_dir: str | None = None
    ) -> None:
        self.config = config
        self.shape = shape
        self.repeat = repeat
        self.submit_dir = submit_dir
        """The submitting process's working directory: an import-path workload resolved
        there when the sweep was validated, so the job looks there too."""

    def __call__(self) -> ResultRecord | None:
        from ..config import load_train_config
        from ..job.run.entry import run_training

        if self.submit_dir is not None:
            from ..workloads.user_import import add_import_root

            add_import_root(self.submit_dir)
        return run_training(load_train_config(None, self.config))  # type: ignore[no-any-return]

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission:
        # Called by submitit on rank 0 at preemption or timeout: requeue the same run. A benchmark
        # is not resumed mid-way: it restarts cleanly and its record carries the restart count.
        return DelayedSubmission(SweepRun(self.config, self.shape, self.repeat, self.submit_dir))

    def __repr__(self) -> str:
        return f"SweepRun(shape={self.shape}, repeat={self.repeat})"


@contextlib.contextmanager
def clean_env() -> Iterator[None]:
    """Hide the submitting shell's Slurm/distributed variables from the job (a sweep started
    inside an allocation must not hand its SLURM_NTASKS to Lightning). Unlike
    ``submitit.helpers.clean_env`` this keeps SLURM_CONF, which sbatch and srun need to find a
    cluster configured outside /etc/slurm (the local test cluster)."""
    distributed = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK"}
    prefixes = ("SLURM_", "SLURMD_", "SRUN_", "SBATCH_", "SUBMITIT_")
    hidden = {
        k: os.environ.pop(k)
        for k in list(os.environ)
        if (k.startswith(prefixes) and k != "SLURM_CONF") or k in distributed
    }
    try:
        yield
    finally:
        os.environ.update(hidden)


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while a local job starts, so that its submitit
    controller (which inherits our stderr) writes there and not over the live table: on
    Ctrl-C it prints a KeyboardInterrupt traceback of its own."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(fd)
        os.close(saved)


# --- submission --------------------------------------------------------------------------------


@dataclass
class JobHandle:
    """One run of the sweep: a shape and a repeat, and its submitit job once submitted."""

    plan: ShapePlan
    repeat: int
    job: submitit.Job[Any] | None = None
    submitted_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> Shape:
        return self.plan.shape

    @property
    def label(self) -> str:
        """The shape, with the precision in a sweep over precisions (``1x2@bf16-mixed``)."""
        return self.plan.label

    @property
    def job_id(self) -> str | None:
        return None if self.job is None else str(self.job.job_id)

    def task_paths(self, task: int = 0) -> Any:
        assert self.job is not None
        return self.job.task(task).paths

    @property
    def stdout(self) -> Path | None:
        return None if self.job is None else Path(self.task_paths(0).stdout)

    @property
    def stderr(self) -> Path | None:
        return None if self.job is None else Path(self.task_paths(0).stderr)

    @property
    def folder(self) -> Path | None:
        return None if self.job is None else Path(self.task_paths(0).folder)


class Launcher:
    """Submits a plan's jobs, one submitit job per (shape, repeat), in the plan's order.

    The order is round by round (:meth:`SweepPlan.submission_order`), so jobs are not job
    arrays: an array holds one shape's repeats together, which is what the rounds avoid.
    Slurm: every job now, in order; ``max_parallel`` chains job k after job k - N
    (``--dependency=afterany``), so the cap holds without this process staying alive.
    Local: one run at a time when asked (:meth:`submit_one`); LocalExecutor has no queue
    and starts a job the moment it is submitted.
    """

    def __init__(self, plan: SweepPlan, *, max_parallel: int | None = None) -> None:
        self.plan = plan
        self.max_parallel = max_parallel
        self.folder = job_folder(plan)

    def handles(self) -> list[JobHandle]:
        return [JobHandle(sp, r) for r, sp in self.plan.submission_order()]

    def _run(self, handle: JobHandle) -> SweepRun:
        # The plan travels into the job: which repeat this is (the cluster is in the config).
        config = {**handle.plan.config_dict(handle.repeat), "repeat_index": handle.repeat}
        return SweepRun(config, handle.label, handle.repeat, os.getcwd())

    def submit_slurm(self, handle: JobHandle, after: str | None = None) -> None:
        """Slurm: submit one run; ``after`` is the job id it must wait for (max_parallel)."""
        import time

        executor = submitit.SlurmExecutor(str(self.folder), max_num_timeout=MAX_NUM_TIMEOUT)
        params = slurm_parameters(self.plan, handle.plan)
        if after is not None:
            params["dependency"] = f"afterany:{after}"
        executor.update_parameters(**params)
        run = self._run(handle)
        with clean_env():
            handle.job = executor.submit(run)
        handle.submitted_at = time.time()

    def submit_one(self, handle: JobHandle) -> None:
        """Local: start one run now."""
        import time

        executor = submitit.LocalExecutor(str(self.folder), max_num_timeout=MAX_NUM_TIMEOUT)
        executor.update_parameters(**local_parameters(handle.plan))
        run = self._run(handle)
        with clean_env(), stderr_to(self.plan.sweep_dir / "local-controller.log"):
            handle.job = executor.submit(run)
        handle.submitted_at = time.time()
