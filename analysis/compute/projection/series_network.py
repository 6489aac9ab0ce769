"""The network a series' projection runs on: what its all-reduce sweeps measured, or what a
``--network`` profile gives (:func:`series_network`), with the share of a stated line rate
the shipped error model learned (:mod:`.model_error`) for a profile that states one."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from analysis.compute.projection.error_file import load_sweep
from analysis.compute.projection.step_time.network import (
    Network,
    network_from_points,
    network_from_profile,
)
from analysis.compute.projection.step_time.step_model import ScalePoint
from analysis.read.network_profile import LINE_RATE_KEY


def series_network(points: Sequence[ScalePoint], profile: Mapping[str, Any] | None) -> Network:
    """The series' network: as its all-reduce sweeps measured it, or as ``profile`` gives
    it. A profile's stated line rate spans the share the shipped model learned that
    clusters achieve; where the series measured across nodes, what it measured is used and
    the line rate, an upper bound, is not."""
    multi = [pt for pt in points if pt.world > 1 and any(p.recorded for p in pt.parts)]
    measured = network_from_points(multi)
    if profile is None:
        return measured
    if profile.get(LINE_RATE_KEY) is not None:
        if measured.inter is not None and measured.measured_nodes > 1:
            return replace(
                measured,
                note=f"{measured.note}; the stated line rate of the --network profile, an "
                "upper bound, is not used where the bus bandwidth was measured across nodes",
            )
        return network_from_profile(profile, measured.intra, _shipped_share_band())
    return network_from_profile(profile, measured.intra)


@functools.cache
def _shipped_share_band() -> tuple[float, float, float] | None:
    """The band of shares of a stated line rate the shipped sweep model learned."""
    return load_sweep().share_band
