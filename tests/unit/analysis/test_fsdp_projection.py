"""A sweep's own FSDP series projected (analysis.compute.projection.project with FsdpTerm): its
records' units (``sharding.unit_bytes``, read by analysis.read.strategy.fsdp_sharding) on FSDP's
step model, worked by hand on two units of 1 GB on a 1 GB/s bus with no latency: at N ranks each
all-gather and reduce-scatter takes 1 GB x (N - 1) / N / 1 GB/s (0.5 s at 2, 0.75 s at 4)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from projection_helpers import FIXTURE, series

from analysis.compute.projection.interval import project_points
from analysis.compute.projection.project import FSDP_NO_UNIT_BYTES, project
from analysis.compute.projection.step_time.fsdp_comm import (
    FSDP_HIDDEN_BAND,
    FsdpStepModel,
    FsdpTerm,
)
from analysis.compute.projection.step_time.step_model import StepModel, fit_series
from analysis.compute.projection.what_ifs import settings_of, under, what_ifs
from analysis.read.frame import load
from analysis.read.strategy import fsdp_sharding

GB = 10**9
UNITS = (float(GB), float(GB))


def _fsdp_series(comm: float, compute: float = 1.8) -> tuple[Any, Any]:
    """A 1-device baseline and a 2-device point (3 runs each) whose anchor measured ``comm``
    seconds of exposed communication per step beside ``compute``, on the 1 GB/s bus."""
    return series(comm=comm, compute=compute, busbw=1.0, alpha=0.0, buckets=(1 << 20,))


def test_on_cpus_every_gather_and_reduce_scatter_of_every_unit_is_exposed() -> None:
    """CPUs: per unit a gather before forward, another before backward and a reduce-scatter:
    6 collectives, 3.0 s at 2 ranks, 4.5 s at 4. The anchor measured 3.2 s, so 0.2 s is
    carried as the offset: 4.7 s at 4 ranks (DDP's all-reduce of the same 2 GB would say
    2 x 2 GB x 3/4 / 1 GB/s, less what backward hides; dropping the back-gather 3.2 s)."""
    pts, base = _fsdp_series(comm=3.2)
    fit = fit_series(pts, base, "weak", term=FsdpTerm(messages=UNITS, overlap=False))
    model = fit.model
    assert isinstance(model, FsdpStepModel) and model.bucket_bytes == UNITS
    assert model.modelled_at_anchor == pytest.approx(3.0)
    assert model.parts(4, 1)["exposed_comm"] == pytest.approx(4.7)
    kept = replace(model, reshard_after_forward=False)  # 2 gathers, 2 reduce-scatters
    assert kept.parts(4, 1)["exposed_comm"] == pytest.approx(4 * 0.75 + 0.2)


def test_on_gpus_the_next_units_gather_hides_behind_this_units_compute() -> None:
    """GPUs, 1.8 s of compute at the anchor (2 ranks): the timeline of test_fsdp_comm.py,
    0.7 s exposed in forward and 1.0 s in backward, 1.7 s; the anchor measured 1.9 s."""
    pts, base = _fsdp_series(comm=1.9)
    model = fit_series(pts, base, "weak", term=FsdpTerm(messages=UNITS)).model
    assert isinstance(model, FsdpStepModel) and model.overlap
    assert model.modelled_at_anchor == pytest.approx(1.7)
    assert model.exposed_at_anchor == pytest.approx(1.9)


def test_the_interval_draws_how_much_prefetching_hides_on_gpus_only() -> None:
    rng = np.random.default_rng(0)
    cpu = FsdpTerm(messages=UNITS, overlap=False)
    assert cpu.drawn(rng) is cpu
    shares = {FsdpTerm(messages=UNITS).drawn(rng).hidden_share for _ in range(50)}  # type: ignore[attr-defined]
    assert len(shares) == 50 and all(
        FSDP_HIDDEN_BAND[0] <= s <= FSDP_HIDDEN_BAND[1] for s in shares
    )


def test_fsdps_what_ifs_replace_ddps() -> None:
    """reshard_after_forward off drops the back-gathers (CPU, 4 ranks: 4.5 -> 3.0 s modelled);
    bf16 gathers halve the gathered bytes and keep the fp32 reduce-scatters (4 x 0.375 +
    2 x 0.75 = 3.0 s). DDP's bucket and bf16-gradient lines do not apply; neither does bf16
    gathers where the units already gather bf16."""
    pts, base = _fsdp_series(comm=3.2)
    model = fit_series(pts, base, "weak", term=FsdpTerm(messages=UNITS, overlap=False)).model
    assert isinstance(model, FsdpStepModel)
    ifs = {w.name: w for w in what_ifs(model, "32-true")}
    assert "DDP bucket_cap_mb=100" not in ifs and "gradients in bf16" not in ifs
    for name in ("reshard_after_forward off", "gathers in bf16"):
        changed, kw = under(model, ifs[name]), settings_of(model, ifs[name])
        k = model.accumulate
        exposed = changed.modelled_exposed(4, 1, kw.get("buckets", UNITS), k, 1.0, 32)
        assert exposed == pytest.approx(3.0), name
    bf16 = replace(model, param_dtype="bfloat16", scatter_factor=2.0)
    assert "gathers in bf16" not in {w.name for w in what_ifs(bf16, "bf16-mixed")}
    rows = {
        r["what_if"]: r
        for r in project_points(
            fit_series(pts, base, "weak", term=FsdpTerm(messages=UNITS, overlap=False)),
            pts,
            base,
            "weak",
            [(1, 4)],
            draws=20,
            term=FsdpTerm(messages=UNITS, overlap=False),
        )
    }
    plain = rows["as measured"]["efficiency"]
    assert rows["reshard_after_forward off"]["efficiency"] > plain
    assert rows["gathers in bf16"]["efficiency"] > plain


# --- from records -----------------------------------------------------------------------------


def _as_fsdp(runs: pd.DataFrame, sharding: dict[str, Any] | None) -> pd.DataFrame:
    """The fixture's runs (1, 2 and 3 CPU processes) as an FSDP series with ``sharding``."""
    return runs.assign(strategy="fsdp", sharding=[sharding] * len(runs))


SHARDING = {
    "wrapped": ["", "blocks.0", "blocks.1"],
    "reshard_after_forward": True,
    "param_dtype": None,
    "reduce_dtype": None,
    "unit_bytes": [12_544, 49_664, 49_664],
}


def test_the_reader_takes_the_units_and_how_they_are_reduced() -> None:
    rows = pd.DataFrame({"sharding": [None, {**SHARDING, "unit_bytes": [0, 8, 8]}]})
    got = fsdp_sharding(rows)
    assert got is not None and got.unit_bytes == (8, 8)  # a unit without parameters gathers nothing
    assert got.reshard_after_forward and got.scatter_factor == 1.0
    mixed = {**SHARDING, "param_dtype": "bfloat16", "reduce_dtype": "float32"}
    got = fsdp_sharding(pd.DataFrame({"sharding": [mixed]}))
    assert got is not None and got.scatter_factor == 2.0  # bf16 gathers, fp32 reduce-scatters
    older = {k: v for k, v in SHARDING.items() if k != "unit_bytes"}
    got = fsdp_sharding(pd.DataFrame({"sharding": [older]}))
    assert got is not None and got.unit_bytes is None
    assert fsdp_sharding(pd.DataFrame({"x": [1]})) is None


def test_an_fsdp_series_is_projected_with_fsdps_model_and_checked() -> None:
    """The same records as an FSDP series: FSDP's model on the recorded units, nothing hidden
    on the CPU, FSDP's what-ifs, a self-check of the largest scale, and words that say so."""
    from analysis.present.report.projection_text import findings

    runs = load(FIXTURE)
    ddp = project(runs, [4], draws=40)
    fsdp = project(_as_fsdp(runs, SHARDING), [4], draws=40)
    (sp,) = fsdp.series
    model = sp.fit.model
    assert isinstance(model, FsdpStepModel) and not isinstance(
        ddp.series[0].fit.model, FsdpStepModel
    )
    assert model.bucket_bytes == (12_544.0, 49_664.0, 49_664.0) and not model.overlap
    names = set(fsdp.table["what_if"])
    assert {"reshard_after_forward off", "gathers in bf16"} <= names
    assert "DDP bucket_cap_mb=100" not in names
    assert (fsdp.table["efficiency_low"] <= fsdp.table["efficiency"]).all()
    (check,) = fsdp.checks.to_dict("records")
    assert check["world_size"] == 3 and check["from_world_sizes"] == "1,2"
    (text,) = findings(fsdp)
    assert "FSDP's model, per wrapped unit (3 units" in text["text"]
    assert "exposed FSDP's gathers and reduce-scatters" in text["text"]
    assert "Self-check: 3 devices" in text["text"]
    assert not any("FSDP" in n for n in fsdp.notes)


def test_an_fsdp_series_without_unit_bytes_is_not_projected_and_says_why() -> None:
    """Records made before the units' bytes (or a frame without a sharding): a note naming
    the missing field, never DDP's projection of FSDP's runs."""
    runs = load(FIXTURE)
    older = {k: v for k, v in SHARDING.items() if k != "unit_bytes"}
    for frame in (_as_fsdp(runs, older), runs.drop(columns="sharding").assign(strategy="fsdp")):
        got = project(frame, [4], draws=20)
        assert got.table.empty and not got.series
        assert any(n.endswith(f"no projection: {FSDP_NO_UNIT_BYTES}.") for n in got.notes)
        assert "sharding.unit_bytes" in FSDP_NO_UNIT_BYTES


def test_ddps_series_keeps_ddps_model() -> None:
    runs = load(FIXTURE)
    (sp,) = project(runs, [4], draws=20).series
    assert type(sp.fit.model) is StepModel


def test_bytes_reduce_scattered_per_byte_gathered_follow_the_reduce_dtype() -> None:
    """torch reduce-scatters in ``reduce_dtype``; FSDP2's None there means the gathered
    dtype, and a gathered dtype of None the parameters' own (fp32 but under a ``-true``
    precision of 16 bits): fp32 parameters reduced in bf16 move half their bytes."""
    from analysis.read.strategy import FsdpSharding

    def factor(param: str | None, reduce: str | None, precision: str = "32-true") -> float:
        rows = pd.DataFrame(
            {
                "sharding": [{**SHARDING, "param_dtype": param, "reduce_dtype": reduce}],
                "precision": [precision],
            }
        )
        got = fsdp_sharding(rows)
        assert got is not None
        return got.scatter_factor

    assert factor(None, "bfloat16") == 0.5
    assert factor("bfloat16", "float32") == 2.0
    assert factor("bfloat16", None) == 1.0  # reduced as gathered
    assert factor(None, None) == 1.0
    assert factor(None, "float32", "bf16-true") == 2.0  # the parameters are bf16 already
    assert FsdpSharding((8,), True, None, "bfloat16").scatter_factor == 0.5
