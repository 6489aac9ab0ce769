"""Records with a recorded step breakdown, for the tests of the waterfall, the run parts,
the findings and the charts.

Each ``diagnosis`` is laid out as the job side writes it, with an injected cause (slow
input, one slow rank, a communication-heavy model...: :data:`PATTERNS`), and the analysis
must put the lost points where the cause is.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from analysis_helpers import make_result, write_log

from analysis.read.frame import load_all
from scalescope.record import ResultRecord

GLOBAL_BATCH = 256


BASE = {"input": 0.002, "compute": 0.100, "exposed": 0.0}
"""One device, batch 256: per-step seconds."""


def make_diagnosis(
    world: int,
    *,
    batch: int,
    input_s: float,
    compute_s: float,
    exposed_s: float,
    slow_rank: int | None = None,
    slow_extra_s: float = 0.0,
    calibration: str = "measured",
    predicted_s: float | None = 0.004,
    busbw_gbps: float | None = 1.5,
    nodes: int = 1,
    rotating_s: float = 0.0,
    step_waits: bool = True,
    overlap_s: float | None = None,
) -> dict[str, Any]:
    """A recorded breakdown: every rank needs input + compute, ``slow_rank`` needs
    ``slow_extra_s`` more (inside compute); every rank then waits in the all-reduce for
    the slowest, for ``rotating_s`` of per-step stragglers (a different rank each step, so
    every rank's mean own time is the same) and for the exposed communication, so all step
    times are equal. ``step_waits=False``: a record from before per-step waits existed."""
    own = [input_s + compute_s + (slow_extra_s if r == slow_rank else 0.0) for r in range(world)]
    step = max(own) + exposed_s + (rotating_s if world > 1 else 0.0)
    per_node = max(1, world // nodes)
    ranks = [
        {
            "rank": r,
            "local_rank": r % per_node,
            "node": f"node{r // per_node + 1}",
            "step_time_s": step,
            "input_wait_s": input_s,
            "comm_wait_s": step - own[r],
            "compute_s": own[r] - input_s,
            "own_s": own[r],
            "peak_mem_gib": None,
            "peak_host_rss_gib": 0.5,
        }
        for r in range(world)
    ]
    if step_waits:
        for row in ranks:
            wait = 0.0 if world == 1 else row["comm_wait_s"] - exposed_s
            row.update(wait_s=wait, exposed_comm_s=row["comm_wait_s"] - wait, waits_steps=100)
    order = sorted(range(world), key=lambda r: (own[r], r))
    typical, slowest = order[(world - 1) // 2], order[-1]
    return {
        "status": "recorded",
        "reason": None,
        "clock": "wall",
        "steady_steps": 100,
        "per_device_batch_size": batch,
        "ranks": ranks,
        "slowest_rank": slowest,
        "slowest_node": ranks[slowest]["node"],
        "typical_rank": typical,
        "rank_skew": (own[slowest] - own[typical]) / own[typical],
        **_measurements(
            world, calibration, compute_s, exposed_s, overlap_s, busbw_gbps, predicted_s
        ),
        "overhead_s": {"calibration": 0.5, "allreduce_baseline": 0.3},
    }


def _measurements(
    world: int,
    calibration: str,
    compute_s: float,
    exposed_s: float,
    overlap_s: float | None,
    busbw_gbps: float | None,
    predicted_s: float | None,
) -> dict[str, Any]:
    """The section's calibration windows, all-reduce baseline and NVML parts."""
    multi = world > 1
    measured = multi and calibration == "measured"
    return {
        "calibration": {
            "status": calibration if multi else "skipped",
            "reason": None if measured else "1 device: nothing to all-reduce" if not multi else "x",
            "steps": 4,
            "windows": 3,
            "fwd_bwd_s": compute_s if measured else None,
            "fwd_bwd_sync_s": compute_s + exposed_s if measured else None,
            "exposed_comm_s": exposed_s if measured else None,
            "overlap_slowdown_s": overlap_s if measured else None,
            "seconds": 0.5 if measured else None,
        },
        "allreduce": {
            "status": "measured" if multi else "skipped",
            "reason": None if multi else "1 device: nothing to all-reduce",
            "backend": "gloo" if multi else None,
            "world_size": world,
            "gradient_bytes": 4_000_000 if multi else None,
            "sizes": [],
            "busbw_gbps": busbw_gbps if multi else None,
            "predicted_step_s": predicted_s if multi else None,
            "fit": {"alpha_s": 5e-05, "busbw_gbps": 1.6} if multi else None,
            "seconds": 0.3 if multi else None,
        },
        "nvml": {
            "status": "unavailable",
            "reason": "no NVIDIA driver",
            "interval_s": 1.0,
            "gpus": [],
        },
    }


def diag_record(
    job_id: str,
    world: int,
    *,
    input_s: float,
    compute_s: float,
    exposed_s: float = 0.0,
    jitter: float = 1.0,
    with_diagnosis: bool = True,
    num_workers: int = 2,
    scaling_mode: str = "strong",
    nodes: int = 1,
    **extra: Any,
) -> ResultRecord:
    """A strong-scaling run on ``world`` devices over ``nodes`` nodes (global batch 256) whose
    headline throughput follows from the step its breakdown describes (``jitter`` scales the
    compute time: a repeat's noise)."""
    batch = GLOBAL_BATCH // world if scaling_mode == "strong" else GLOBAL_BATCH // 2
    d = make_diagnosis(
        world,
        batch=batch,
        input_s=input_s,
        compute_s=compute_s * jitter,
        exposed_s=exposed_s,
        nodes=nodes,
        **extra,
    )
    step = d["ranks"][0]["step_time_s"]
    per_device = batch / step
    held = GLOBAL_BATCH if scaling_mode == "strong" else batch
    record = make_result(
        job_id, world=(nodes, world // nodes), global_batch_size=held, scaling_mode=scaling_mode
    )
    config = {"name": "spiral", "workload": {"name": "spiral", "num_workers": num_workers}}
    return replace(
        record,
        config=config,
        steady_samples_per_s=per_device * world,
        steady_samples_per_s_per_device=per_device,
        diagnosis=d if with_diagnosis else None,
    )


JITTER = (1.0, 1.03, 0.97)


PATTERNS: dict[str, dict[str, Any]] = {
    # the dataset sleeps: input wait does not shrink with the per-device batch
    "input": {"input_s": 0.040, "compute_s": 0.050, "exposed_s": 0.001},
    # rank 1 sleeps 40 ms each step: rank 0 waits for it in every all-reduce
    "skew": {
        "input_s": 0.001,
        "compute_s": 0.050,
        "exposed_s": 0.001,
        "slow_rank": 1,
        "slow_extra_s": 0.040,
    },
    # many parameters, little compute: the all-reduce is not hidden behind backward
    "comm": {"input_s": 0.001, "compute_s": 0.050, "exposed_s": 0.040, "predicted_s": 0.050},
    # the all-reduce beside backward slows it by 30 ms (inside each rank's compute)
    "overlap": {"input_s": 0.001, "compute_s": 0.080, "exposed_s": 0.001, "overlap_s": 0.030},
    # a different rank sleeps 40 ms each step: the others wait for it, none is slow on average
    "jitter": {"input_s": 0.001, "compute_s": 0.050, "exposed_s": 0.001, "rotating_s": 0.040},
}


def pattern_records(pattern: str, *, base_diag: bool = True, **over: Any) -> list[ResultRecord]:
    records = []
    for i, j in enumerate(JITTER):
        records.append(
            diag_record(
                f"1{i}",
                1,
                input_s=BASE["input"],
                compute_s=BASE["compute"],
                jitter=j,
                with_diagnosis=base_diag,
            )
        )
        records.append(diag_record(f"2{i}", 2, jitter=j, **{**PATTERNS[pattern], **over}))
    return records


def runs_of(tmp_path: Path, records: list[ResultRecord]) -> pd.DataFrame:
    for r in records:
        write_log(tmp_path / f"slurm-{r.identity.job_id}.out", r)
    loaded = load_all(tmp_path)
    assert not [p for p in loaded.problems if p.severity == "warning"], loaded.problems
    return loaded.runs


def with_overlap_pairs(paired_ms: list[float], overlap_ms: list[float]) -> dict[str, Any]:
    """A 2-rank breakdown whose calibration has these pairs of windows: each pair's
    exposed all-reduce (synced - no_sync, the overlap already taken out) and overlap."""
    d = make_diagnosis(2, batch=128, input_s=0.002, compute_s=0.05, exposed_s=0.001)
    paired, overlap = [v / 1e3 for v in paired_ms], [v / 1e3 for v in overlap_ms]
    d["calibration"].update(
        paired_diffs_s=paired,
        exposed_comm_s=statistics.median(paired),
        overlap_diffs_s=overlap,
        overlap_slowdown_s=statistics.median(overlap),
    )
    return d


def strategy_logs(root: Path, exposed_s: dict[str, float]) -> Path:
    """Logs of DDP and FSDP at 1 and 2 devices, three repeats each (:data:`JITTER`), with per-
    step diagnosis: each strategy's exposed communication at 2 devices as ``exposed_s`` says
    (``{"ddp": 0.001, "fsdp": 0.030}``), none at 1."""
    from analysis_helpers import start_of

    for strategy, exposed in exposed_s.items():
        for world in (1, 2):
            for i, jitter in enumerate(JITTER):
                job = f"{strategy}{world}{i}"
                r = diag_record(
                    job,
                    world,
                    input_s=0.001,
                    compute_s=0.050,
                    exposed_s=exposed if world > 1 else 0.0,
                    jitter=jitter,
                )
                r = replace(r, identity=replace(r.identity, strategy=strategy))
                write_log(root / f"slurm-{job}.out", start_of(r), r)
    return root
