"""Shared by the projection's tests: synthetic step breakdowns for the step model and the
projection (:func:`parts`, :func:`series`), and ``python -m analysis.summarize --project`` run
in this process on the records of tests/fixtures/projection (:func:`run`,
:func:`first_projection`)."""

from __future__ import annotations

import io
import json
import math
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from analysis_helpers import REPO

from analysis import summarize
from analysis.compute.projection.step_time.fsdp_comm import FsdpStepModel, block_bytes
from analysis.compute.projection.step_time.step_model import Level, Network, ScalePoint
from analysis.compute.run_parts import RunParts

# --- synthetic breakdowns ---------------------------------------------------------------------


def parts(
    *,
    batch: int = 32,
    compute: float = 0.010,
    comm: float = 0.002,
    wait: float = 0.0005,
    other: float = 0.0,
    alpha: float = 1e-4,
    busbw: float = 1.0,
    buckets: tuple[int, ...] = (1 << 20, 25 << 20),
    world: int = 2,
) -> RunParts:
    step = compute + comm + wait + other if world > 1 else compute + other
    return RunParts(
        t_s=step / batch,
        per_device_batch_size=batch,
        input_step_s=0.0,
        compute_step_s=compute,
        overlap_step_s=0.0,
        skew_step_s=0.0,
        jitter_step_s=wait if world > 1 else 0.0,
        comm_step_s=comm if world > 1 else 0.0,
        alpha_s=alpha if world > 1 else math.nan,
        fit_busbw_gbps=busbw if world > 1 else math.nan,
        bucket_bytes=buckets if world > 1 else (),
    )


def series(n: int = 3, mode: str = "weak", **kw: float) -> tuple[list[ScalePoint], ScalePoint]:
    """A 1-device baseline and a 2-device point, ``n`` identical runs each; under strong
    scaling the baseline holds both devices' samples (and their compute)."""
    batch, compute = int(kw.get("batch", 32)), kw.get("compute", 0.010)
    factor = 2 if mode == "strong" else 1
    base = ScalePoint(1, 1, 1, [parts(world=1, batch=batch * factor, compute=compute * factor)] * n)
    two = ScalePoint(2, 1, 2, [parts(**kw)] * n)  # type: ignore[arg-type]
    return [base, two], base


# --- the summary, in this process ---------------------------------------------------------------


FIXTURE = REPO / "tests" / "fixtures" / "projection"
"""Real records of an emulated network whose all-reduce cost grows as log2 of the world size."""


def run(main, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def first_projection(*argv: str) -> dict[str, Any]:
    """The first projected row of the fixture at 4 nodes, summarised with ``argv`` (nothing
    written)."""
    rc, out, err = run(
        summarize.main, str(FIXTURE), "--project", "4", *argv, "--no-write", "--format", "json"
    )
    assert rc == 0, err
    row: dict[str, Any] = json.loads(out)["projection"][0]
    return row


# --- FSDP's step model, by hand ----------------------------------------------------------------

BUS = Level(alpha_s=0.0, busbw_gbps=1.0, at_world=2, source="by hand")
"""A 1 GB/s bus with no latency, the node's link of :func:`fsdp_model`."""
GB = 1e9
COMPUTE = 1.8  # forward 0.6 (0.3 a block), backward 1.2 (0.6 a block)


def fsdp_model(**kw: object) -> FsdpStepModel:
    """Two blocks of 1 GB at 2 ranks of one node on :data:`BUS` (0.25 GB/s across nodes),
    :data:`COMPUTE` a micro-batch; ``kw`` replaces any field."""
    slow = Level(alpha_s=0.0, busbw_gbps=0.25, at_world=2, source="inter, by hand")
    fields = dict(
        per_device_batch=1.0,
        accumulate=1,
        compute_fixed_s=0.0,
        compute_per_sample_s=COMPUTE,
        input_per_sample_s=0.0,
        overlap_s=0.0,
        other_s=0.0,
        sigma_share=0.0,
        bucket_bytes=block_bytes(2 * GB, 2),
        network=Network(BUS, slow),
        anchor_world=2,
        anchor_nodes=1,
        exposed_offset_s=0.0,
        baseline_step_s=COMPUTE,
        baseline_batch=1.0,
        baseline_world=1,
        scaling_mode="weak",
    )
    return FsdpStepModel(**{**fields, **kw})  # type: ignore[arg-type]


# --- earlier runs across nodes ------------------------------------------------------------------


def write_runs_across_nodes(
    folder: Path, *, busbw_gbps: float = 1.6, cluster: str | None = None
) -> Path:
    """Three records of a 2x2 spiral run (4 ranks on 2 nodes) in ``folder``, each laid out as
    the job writes it with an all-reduce sweep across the nodes whose fit reads
    ``busbw_gbps`` GB/s and 50 us: what an earlier sweep on the cluster (``cluster``, where
    the records name one) left behind."""
    from dataclasses import replace

    from analysis_helpers import start_of, write_log
    from waterfall_helpers import JITTER, diag_record

    for i, jitter in enumerate(JITTER):
        record = diag_record(
            f"90{i}", 4, nodes=2, input_s=0.001, compute_s=0.05, exposed_s=0.002, jitter=jitter
        )
        assert record.diagnosis is not None
        record = replace(record, identity=replace(record.identity, cluster=cluster))
        record.diagnosis["allreduce"]["fit"] = {"alpha_s": 5e-05, "busbw_gbps": busbw_gbps}
        write_log(folder / f"slurm-90{i}.out", start_of(record), record)
    return folder
