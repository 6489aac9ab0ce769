"""The projection to scales not yet run, as tables: every requested node count with its
prediction interval and what-ifs, and the leave-one-out self-check
(:mod:`analysis.compute.projection.project`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.compute.projection.step_time.fsdp_comm import FsdpStepModel
from analysis.present.display import DisplayTable, pct, sig, with_ci


def projection_table(result: Any) -> DisplayTable | None:
    """The projection (analysis.compute.projection.project): per series every requested node
    count as measured, then each what-if at the largest. None without projected rows."""
    t = result.table
    if t.empty:
        return None
    largest = t.groupby("series", sort=False)["nodes"].transform("max")
    shown = t[(t["what_if"] == "as measured") | (t["nodes"] == largest)]
    columns = [
        "Configuration",
        "What if",
        "Nodes",
        "Devices",
        "Efficiency [95% PI]",
        "Speedup [95% PI]",
        "Samples/s/device",
    ]
    rows = []
    for _, r in shown.iterrows():
        rows.append(
            [
                r["series"],
                r["what_if"],
                str(r["nodes"]),
                str(r["world_size"]),
                with_ci(r["efficiency"], r["efficiency_low"], r["efficiency_high"], "%"),
                with_ci(r["speedup"], r["speedup_low"], r["speedup_high"]),
                sig(r["throughput_per_device"], 3),
            ]
        )
    caption = [
        "Projected from the measured scale points by the step-time model of "
        "analysis/compute/projection/project.py: compute and input as measured, DDP's buckets "
        "on the fitted latency-bandwidth all-reduce (tree latency, ring bandwidth) less "
        "what backward hides, the expected slowest of N ranks. PI: 2.5-97.5% of draws over "
        "the repeats (bootstrap), the network band and the model error. What-ifs at the "
        "largest N; "
        "projection.csv has every one at every N. Efficiency and speedup against the "
        "series' baseline, as in the speedup table.",
    ]
    fsdp = [sp.series for sp in result.series if isinstance(sp.fit.model, FsdpStepModel)]
    if fsdp:
        caption.append(
            f"FSDP series ({', '.join(fsdp)}): FSDP's model in place of DDP's buckets: per "
            "wrapped unit (its gathered bytes as recorded, sharding.unit_bytes) an all-gather "
            "before forward, another before backward unless reshard_after_forward is off "
            "(never for the root, which FSDP2 keeps gathered), and a reduce-scatter after "
            "backward in the reduce dtype (a whole all-reduce under gloo), the next unit's "
            "gather prefetched behind "
            "compute on GPUs, nothing hidden on CPUs "
            "(analysis/compute/projection/step_time/fsdp_comm.py)."
        )
    caption += sorted({f"Network: {n}." for n in t["network"] if n})
    return DisplayTable(
        "projection",
        "Projection to scales not yet run",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=caption,
        right={c for c in columns if c not in ("Configuration", "What if")},
    )


def projection_check_table(result: Any) -> DisplayTable | None:
    """The leave-one-out self-check: the largest measured scale projected from the smaller."""
    c = result.checks
    if c.empty:
        return None
    columns = [
        "Configuration",
        "Devices",
        "Nodes",
        "From devices",
        "Projected [95% PI]",
        "Measured",
        "Error (pts)",
        "Inside",
    ]
    rows = [
        [
            r["series"],
            str(r["world_size"]),
            str(r["nodes"]),
            r["from_world_sizes"],
            with_ci(r["predicted"], r["predicted_low"], r["predicted_high"], "%"),
            pct(r["measured"]),
            f"{r['error_pts']:+.1f}",
            "yes" if r["covered"] else "no",
        ]
        for _, r in c.iterrows()
    ]
    return DisplayTable(
        "projection_check",
        "Projection self-check (leave-one-out)",
        pd.DataFrame(rows, columns=columns, dtype="object"),
        caption=[
            "The largest measured scale projected from the smaller ones alone, against its "
            "measured efficiency: how far the model can be trusted on this cluster."
        ],
        right={"Devices", "Nodes", "Projected [95% PI]", "Measured", "Error (pts)"},
    )
