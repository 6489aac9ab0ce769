"""The projection (analysis.compute.projection.project) on synthetic breakdowns: the interval holds
its central value, each what-if moves the projection its way, the self-check holds out every
scale as large as the one it predicts, the bootstrap resamples the network's fit. The step
model it stands on: test_step_model.py.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from projection_helpers import parts, series

from analysis.compute.projection.interval import project_points
from analysis.compute.projection.step_time.step_model import (
    ScalePoint,
    fit_series,
)
from analysis.compute.projection.what_ifs import settings_of, what_ifs
from scalescope.allreduce_model import split_into_buckets


def test_the_interval_holds_its_centre_and_counts_scales_with_a_breakdown() -> None:
    """Within one node (no network band): the interval holds the central value (by
    construction, its min/max: asserted here only). A scale whose runs have no usable
    breakdown is no scaled point: the fit counts the scales it could use."""
    one_pts, base = series(n=3, comm=0.004)
    fit1 = fit_series(one_pts, base, "weak")
    rows1 = project_points(fit1, one_pts, base, "weak", [(1, 16)], draws=300)
    for r in rows1:  # by construction (the band's min/max): asserted here only
        assert r["efficiency_low"] <= r["efficiency"] <= r["efficiency_high"], r
    blind = replace(parts(comm=0.005, world=4), reason="record has no breakdown")
    four = ScalePoint(4, 1, 4, [blind] * 3)
    fit2 = fit_series([*one_pts, four], base, "weak")
    assert fit1.scaled_points == 1 and fit2.scaled_points == 1  # was 2: world sizes counted


def test_what_ifs_move_the_projection_the_right_way() -> None:
    pts, base = series(comm=0.008, busbw=0.5, buckets=(1 << 20,) + (25 << 20,) * 4)
    fit = fit_series(pts, base, "weak")
    rows = {r["what_if"]: r for r in project_points(fit, pts, base, "weak", [(16, 8)], draws=50)}
    plain = rows["as measured"]["efficiency"]
    assert rows["accumulation 4"]["efficiency"] > plain  # one all-reduce per 4 micro-batches
    assert rows["per-device batch x2"]["efficiency"] > plain
    assert rows["gradients in bf16"]["efficiency"] > plain  # half the bytes
    assert rows["accumulation 4"]["accumulate_grad_batches"] == 4


def test_each_what_if_changes_its_setting_by_its_amount() -> None:
    """Amounts, not directions, worked by hand on a 32-sample anchor with 1 MiB + 4 x 25 MiB
    of fp32 gradients: the batch what-if doubles the per-device batch (64 samples, in the
    settings and in the projected row), accumulation 4 runs 4 micro-batches of 32 (128
    samples a step), bf16 gradients halve every bucket (512 KiB + 4 x 12.5 MiB)."""
    buckets = (1 << 20,) + (25 << 20,) * 4
    pts, base = series(comm=0.008, busbw=0.5, buckets=buckets)
    fit = fit_series(pts, base, "weak")
    model = fit.model
    assert model is not None and model.per_device_batch == 32
    settings = {w.name: settings_of(model, w) for w in what_ifs(model, "32-true")}
    assert settings["as measured"] == {}
    assert settings["per-device batch x2"] == {"batch": 64.0}
    assert settings["accumulation 4"] == {"k": 4, "batch": 128.0}
    assert settings["gradients in bf16"] == {"buckets": ((1 << 19),) + (25 << 19,) * 4}
    assert "gradients in bf16" not in {w.name for w in what_ifs(model, "bf16-true")}
    rows = {r["what_if"]: r for r in project_points(fit, pts, base, "weak", [(16, 8)], draws=5)}
    assert rows["as measured"]["per_device_batch_size"] == 32
    assert rows["per-device batch x2"]["per_device_batch_size"] == 64
    assert rows["accumulation 4"]["per_device_batch_size"] == 128


# --- the reviewed defects, each against a truth computed here ---------------------------------


def test_large_ddp_buckets_lower_the_efficiency_of_a_large_gradient() -> None:
    """A ResNet-50-like gradient of 102 MB at 64x8: one 100 MB bucket is ready only near
    backward's end, so buckets of 100 MiB expose more than DDP's 25 MB ones, and the what-if
    must say efficiency falls (the old 'all but the last bucket hides' said it rose 5 points)."""
    grads = tuple(split_into_buckets(102_000_000))
    pts, base = series(compute=0.120, comm=0.010, busbw=10.0, alpha=5e-5, buckets=grads)
    fit = fit_series(pts, base, "weak")
    rows = {r["what_if"]: r for r in project_points(fit, pts, base, "weak", [(64, 8)], draws=30)}
    assert rows["DDP bucket_cap_mb=100"]["efficiency"] < rows["as measured"]["efficiency"]


def test_every_what_if_moves_the_projection_its_way() -> None:
    """Bandwidth-bound all-reduce at 16x8: a larger per-device batch, accumulation and bf16
    gradients each raise efficiency (more compute per byte, or fewer bytes)."""
    pts, base = series(comm=0.008, busbw=0.5, buckets=(1 << 20,) + (25 << 20,) * 4)
    fit = fit_series(pts, base, "weak")
    rows = {r["what_if"]: r for r in project_points(fit, pts, base, "weak", [(16, 8)], draws=30)}
    plain = rows["as measured"]["efficiency"]
    for name in ("per-device batch x2", "accumulation 4", "gradients in bf16"):
        assert rows[name]["efficiency"] > plain, name


def test_the_self_check_holds_out_every_scale_as_large_as_the_one_it_predicts() -> None:
    """A sweep with 1x4 and 2x2: predicting 2x2 from '1,2 alone' must not keep 1x4 (world
    size 4) in the fit, where it became the anchor."""
    from analysis.compute.projection.project import self_check

    base = ScalePoint(1, 1, 1, [parts(world=1)] * 3)
    two = ScalePoint(2, 1, 2, [parts()] * 3)
    one_by_four = ScalePoint(4, 1, 4, [parts(comm=0.050, world=4)] * 3)
    two_by_two = ScalePoint(4, 2, 2, [parts(comm=0.004, world=4)] * 3)
    seen: list[list[int]] = []
    import analysis.compute.projection.project as projection

    real = projection.fit_series

    def spy(points, *a, **kw):  # type: ignore[no-untyped-def]
        seen.append(sorted(pt.world for pt in points))
        return real(points, *a, **kw)

    class Group:
        def __init__(self, pt: ScalePoint) -> None:
            self.world_size, self.nodes = pt.world, pt.nodes
            self.stats = {"steady_samples_per_s_per_device": type("S", (), {"mean": 1.0})()}

    members = [Group(p) for p in (base, two, one_by_four, two_by_two)]
    projection.fit_series = spy  # type: ignore[assignment]
    try:
        check = self_check(
            members, [base, two, one_by_four, two_by_two], members[0], base, "weak", None, "", 20
        )
    finally:
        projection.fit_series = real  # type: ignore[assignment]
    assert check is not None and check["from_world_sizes"] == "1,2"
    assert seen and all(max(worlds) <= 2 for worlds in seen), seen


def test_the_bootstrap_resamples_the_networks_fit() -> None:
    """Within one node, runs alike but for their all-reduce fits: the interval must carry
    the fit's spread (before, latency and bandwidth stayed fixed at their mean)."""
    from analysis.compute.projection.model_error import ErrorModel

    exact = ErrorModel(noise=0.0)
    base = ScalePoint(1, 1, 1, [parts(world=1)] * 4)
    alike = ScalePoint(2, 1, 2, [parts(busbw=1.0)] * 4)
    spread = ScalePoint(2, 1, 2, [parts(busbw=b) for b in (0.25, 0.5, 2.0, 4.0)])

    def width(pt: ScalePoint) -> float:
        fit = fit_series([base, pt], base, "weak")
        (row, *_) = project_points(
            fit, [base, pt], base, "weak", [(1, 8)], draws=80, error_model=exact
        )
        return row["efficiency_high"] - row["efficiency_low"]

    assert width(alike) == pytest.approx(0.0, abs=1e-9)
    assert width(spread) > 0.01


def test_the_bucket_what_if_makes_the_buckets_ddp_makes() -> None:
    """VGG-16 (553,430,176 B of gradients), 200 ms of backward, 16 ranks at 10 GB/s and 20 us:
    with bucket_cap_mb=100 DDP makes five buckets of 100 MiB and one of 29,142,176 B
    (its first bucket takes the cap too). Each all-reduce takes 80 us + n x 1.875e-10 s; the
    fifth is ready at 189.469 ms and ends at 209.210, the last is ready when backward ends
    and runs 5.544 ms after that: 14.754 ms exposed. A 1 MiB first bucket and 100 MB ones
    (the what-if before) left a 52 MB bucket last: 9.9 ms."""
    from analysis.compute.projection.step_time.step_model import Level, Network, StepModel
    from analysis.compute.projection.what_ifs import settings_of, what_ifs

    model = StepModel(
        per_device_batch=1.0,
        accumulate=1,
        compute_fixed_s=0.3,  # backward: 2/3 of it, 200 ms
        compute_per_sample_s=0.0,
        input_per_sample_s=0.0,
        overlap_s=0.0,
        other_s=0.0,
        sigma_share=0.0,
        bucket_bytes=tuple(split_into_buckets(553_430_176)),
        network=Network(Level(20e-6, 10.0, 2, "intra"), None),
        anchor_world=16,
        anchor_nodes=1,
        exposed_offset_s=0.0,
        baseline_step_s=0.3,
        baseline_batch=1.0,
        baseline_world=1,
        scaling_mode="weak",
    )
    (what_if,) = [w for w in what_ifs(model) if w.bucket_cap_mb is not None]
    buckets = settings_of(model, what_if)["buckets"]
    exposed = model.modelled_exposed(16, 1, buckets, 1, 1.0, 1.0)
    assert exposed == pytest.approx(0.014754, rel=0.05)
    assert exposed == pytest.approx(0.014754, abs=2e-6)  # the hand figure, to its digits


def test_the_projected_throughput_carries_the_error_models_shift_as_the_efficiency_does() -> None:
    """The centre's efficiency is the model's times exp(mean of the error model); the
    throughput it reports must be the same projection: efficiency x world x the baseline's
    per-device throughput as the model has it (here 2 doublings beyond the anchor, a mean of
    -0.1 a doubling: exp(-0.2), about 18% below the model's own step)."""
    from analysis.compute.projection.model_error import ErrorModel

    pts, base = series(comm=0.004)
    fit = fit_series(pts, base, "weak")
    model = fit.model
    assert model is not None
    shifted = ErrorModel(mu_d=-0.1, noise=0.0)
    (row, *_) = project_points(fit, pts, base, "weak", [(1, 8)], draws=10, error_model=shifted)
    x_base = model.baseline_batch / model.baseline_step(model.baseline_batch)
    assert row["throughput_per_device"] == pytest.approx(row["efficiency"] * x_base)
    assert row["throughput"] == pytest.approx(row["efficiency"] * 8 * x_base)
    model_only = row["per_device_batch_size"] / row["step_s"]
    assert row["throughput_per_device"] == pytest.approx(model_only * math.exp(-0.2))


def test_a_sweep_draws_with_the_sweep_model_and_its_anchors_own_mean() -> None:
    """A sweep's projection draws with the shipped fit calibrated beside a run's noise (the
    file's ``sweep``), its own runs' noise in place (3% at least): the same rows as that model
    given by hand, not as the published model's with its noise swapped. And the mean that
    shifts the centre is the anchor's regime's: a 2-node anchor (its network measured) takes
    ``mu_m``, a 1-node anchor the one-node mean."""
    from analysis.compute.projection.error_file import load, load_sweep
    from analysis.compute.projection.model_error import MEASURED_NOISE, ErrorModel

    pts, base = series(comm=0.004)
    fit = fit_series(pts, base, "weak")

    def rows(em: ErrorModel | None) -> list[tuple[float, float, float]]:
        got = project_points(fit, pts, base, "weak", [(2, 2)], draws=40, error_model=em)
        return [(r["efficiency"], r["efficiency_low"], r["efficiency_high"]) for r in got]

    sweep = replace(load_sweep(), noise=MEASURED_NOISE)  # identical runs: the floor
    assert rows(None) == rows(sweep)
    # the draw is the model's: a wider spread between clusters widens it (the shipped
    # published model now chooses a run's noise itself, so its swap would be the same rows)
    assert rows(None) != rows(replace(sweep, sd_src=4 * sweep.sd_src))
    assert load().noise >= MEASURED_NOISE

    # the same series, its 2-device point taken as 2 nodes of 1 device: the anchor spans nodes
    across = [base, replace(pts[1], nodes=2, devices_per_node=1)]
    fit_across = fit_series(across, base, "weak")
    one_node_mean = ErrorModel(mu_d=-0.1, noise=0.0)
    spanning_mean = ErrorModel(mu_d=-0.1, mu_m=-0.05, noise=0.0)
    for f, points, em, shift in (
        (fit, pts, one_node_mean, -0.1),  # 1 node -> 2 nodes of 2: d = 1, the first crossing
        (fit_across, across, spanning_mean, -0.05),  # 2 nodes -> 2 nodes of 2: d = 1
    ):
        plain, shifted = (
            project_points(f, points, base, "weak", [(2, 2)], draws=5, error_model=m)[0]
            for m in (ErrorModel(noise=0.0), em)
        )
        assert shifted["efficiency"] == pytest.approx(plain["efficiency"] * math.exp(shift))


def test_a_lifting_mean_never_projects_a_larger_scale_past_the_anchors_own() -> None:
    """An error model whose mean lifts a projection e-fold a doubling (past the anchor's own
    at 4 and 8 devices from a 2-device anchor) and spreads it 30%: beyond the anchor (the
    same work per device, more communication) the centre stops at the anchor's efficiency,
    its throughput with it, and the interval reaches past it only by one run's noise (3%:
    e^(3.5 x 0.03) at most over 400 draws)."""
    from analysis.compute.projection.model_error import ErrorModel

    pts, base = series(comm=0.004)
    fit = fit_series(pts, base, "weak")
    model = fit.model
    assert model is not None
    top, _, _ = model.efficiency(model.anchor_world, model.anchor_nodes)
    lifting = ErrorModel(mu_d=1.0, sd_d=0.3, noise=0.03)
    for world in (4, 8):  # the lift alone would carry the model past its anchor
        assert model.efficiency(world, 1)[0] * math.exp(math.log2(world / 2)) > top
    rows = project_points(fit, pts, base, "weak", [(1, 4), (1, 8)], draws=400, error_model=lifting)
    x_base = model.baseline_batch / model.baseline_step(model.baseline_batch)
    for row in (r for r in rows if r["what_if"] == "as measured"):
        assert row["efficiency"] == pytest.approx(top, rel=1e-9), row
        assert row["throughput_per_device"] == pytest.approx(top * x_base, rel=1e-9)
        assert row["efficiency_high"] <= top * math.exp(3.5 * 0.03), row
        assert row["efficiency_low"] < top


def test_a_sweeps_spread_reaches_as_far_as_the_loss_its_centre_projects() -> None:
    """The same error model (a spread of 0.5 a doubling per unit of loss, no noise) on two
    series, one that barely communicates (97% at 4 devices) and one that loses over 40% of
    its step there: the interval's reach below its centre (log; above, the anchor's own
    efficiency stops it) is in the ratio of the losses the centres project, as
    ``loss_scale`` says; with one spread for every point it was the same."""
    from analysis.compute.projection.model_error import ErrorModel, loss_scale

    spread = ErrorModel(sd_d=0.5, noise=0.0)
    log_widths, centres = [], []
    for kw in (dict(comm=0.0002, busbw=200.0, wait=0.0, alpha=1e-6), dict(comm=0.004, busbw=5.0)):
        pts, base = series(**kw)
        fit = fit_series(pts, base, "weak")
        (row, *_) = project_points(fit, pts, base, "weak", [(1, 4)], draws=400, error_model=spread)
        log_widths.append(math.log(row["efficiency"] / row["efficiency_low"]))
        centres.append(row["efficiency"])
    assert centres[0] > 0.95 and centres[1] < 0.6
    ratio = float(loss_scale(centres[0]) / loss_scale(centres[1]))
    assert log_widths[0] / log_widths[1] == pytest.approx(ratio, rel=0.05), (log_widths, centres)
