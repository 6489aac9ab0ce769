"""The whole analysis of a runs frame (analysis.analyze): the series it tells apart."""

from __future__ import annotations

import dataclasses

from analysis_helpers import make_result

from analysis.analyze import analyze
from analysis.read.frame import runs_frame
from analysis.read.parse import ParseResult, Run


def test_accumulation_is_one_more_series_axis_in_the_summary() -> None:
    runs = []
    for acc in (1, 4):
        for world in ((1, 1), (1, 2)):
            r = make_result(f"{acc}{world[1]}", world=world, train_time_s=10.0 / world[1])
            ident = dataclasses.replace(r.identity, accumulate_grad_batches=acc)
            runs.append(Run(dataclasses.replace(r, identity=ident), ("x",)))
    analysis = analyze(runs_frame(ParseResult(runs=runs)))
    labels = sorted(set(analysis.scaling["series"]))
    assert len(labels) == 2, labels
    assert labels[0].endswith(" · fp32") and labels[1].endswith(" · fp32 · 4 micro-batches/step")
    # each series has its own speedup at 2 devices
    assert len(analysis.scaling[analysis.scaling["world_size"] == 2]) == 2
