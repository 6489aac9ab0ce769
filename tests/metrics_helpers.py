"""A runs frame from train times alone, for the tests of the scaling math (metrics, groups,
compare): ``frame({1: [100.0, 101.0], 2: [52.0]})``."""

from __future__ import annotations

import pandas as pd
from analysis_helpers import make_result

from analysis.read.frame import runs_frame
from analysis.read.parse import ParseResult, Run

WORLDS = {1: (1, 1), 2: (1, 2), 4: (1, 4), 8: (2, 4), 16: (4, 4)}


def frame(times: dict[int, list[float]], mode: str = "strong") -> pd.DataFrame:
    """A runs frame from {world size: [train_time_s per repeat]}, built through records."""
    runs = []
    for world, values in times.items():
        for i, t in enumerate(values):
            rec = make_result(
                f"{world}-{i}",
                world=WORLDS[world],
                train_time_s=t,
                scaling_mode=mode,
                global_batch_size=256,
            )
            runs.append(Run(rec, ("x",)))
    return runs_frame(ParseResult(runs=runs))
