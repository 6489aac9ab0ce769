"""The GPU check's reading of a 1-GPU run's record (``bash benchmarks/gpu_check.sh``, step 4):
one line of figures, and whether the record holds what a GPU run records.

    python benchmarks/gpu_record_check.py RUN_FOLDER     # finds the one result.json below it

A GPU run's diagnosis is timed with CUDA events (``clock: cuda_events``) and splits compute
into GPU work and host overhead from NVML (``compute_split``, its ``gpu_idle_share``: the
share of compute in which the GPU ran no kernel). Exit 0 when both are there, 1 otherwise;
the figures are printed, never judged. Kept apart from the shell script so that a test reads
records made by the job's own section builders with the same code.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def record_line(record: Mapping[str, Any]) -> tuple[str, bool]:
    """(one line of the run's figures, whether it holds a GPU run's diagnosis)."""
    d = record.get("diagnosis") or {}
    ranks = d.get("ranks") or []
    if d.get("status") != "recorded" or not ranks:
        return f"diagnosis {d.get('status', 'missing')}: {d.get('reason') or '-'}", False
    rank = ranks[0]
    split = d.get("compute_split") or {}
    idle = split.get("gpu_idle_share")
    shown = (
        f"GPU idle {100 * idle:.0f}% of compute"
        if idle is not None
        else f"compute split {split.get('status', 'missing')}: {split.get('reason') or '-'}"
    )
    line = (
        f"clock {d.get('clock')}, step {1e3 * rank['step_time_s']:.2f} ms = input "
        f"{1e3 * rank['input_wait_s']:.2f} + compute {1e3 * rank['compute_s']:.2f} ms; {shown}"
    )
    return line, d.get("clock") == "cuda_events" and idle is not None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python benchmarks/gpu_record_check.py RUN_FOLDER", file=sys.stderr)
        return 2
    found = sorted(Path(args[0]).rglob("result.json"))
    if len(found) != 1:
        print(f"{len(found)} result.json files under {args[0]}, expected one", file=sys.stderr)
        return 1
    line, ok = record_line(json.loads(found[0].read_text(encoding="utf-8")))
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
