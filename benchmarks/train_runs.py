"""One ``scalescope train`` run as a benchmark sees it: a real process, its result record.

Shared by the benchmarks that compare settings run by run (``python benchmarks/<name>.py``
puts this folder on the import path).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scalescope.record import ResultRecord, decode_line, find_marker


def train_record(argv: list[str], out: Path) -> ResultRecord:
    """Run ``python -m scalescope.train <argv> output_dir=<out>`` and return its record;
    exit with the end of its stderr if it wrote none."""
    proc = subprocess.run(
        [sys.executable, "-m", "scalescope.train", *argv, f"output_dir={out}"],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in (proc.stdout + proc.stderr).splitlines():
        if find_marker(line) >= 0:
            event = decode_line(line)
            if isinstance(event, ResultRecord):
                return event
    raise SystemExit(f"training failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
