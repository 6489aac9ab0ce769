"""``python -m analysis.project backtest`` and ``fit-error`` (:mod:`analysis.commands.backtest`),
in-process, on the shipped published cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.commands import backtest
from analysis.read.cases import Case

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "benchmarks" / "projection_cases.yaml"


def open_by_method() -> tuple[list[Case], list[Case]]:
    """The shipped file's open cases (its sealed sources left out): the all-reduce ones and
    FSDP's, apart, each in the file's order."""
    from analysis.compute.projection.published.backtest import split
    from analysis.compute.projection.published.scoring import read_cases
    from analysis.compute.projection.published.sealed import split_sealed
    from analysis.read.cases import read_sealed

    sealed = read_sealed(str(CASES))
    assert sealed is not None
    return split(split_sealed(read_cases(str(CASES)), sealed.sources)[0])


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """rc, stdout and stderr of the command with ``argv``."""
    rc = backtest.main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_backtest_scores_every_published_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bt.json"
    rc, text, err = run(capsys, "backtest", str(CASES), "--json", str(out), "--draws", "60")
    assert rc == 0, err
    doc = json.loads(out.read_text())
    import yaml

    cases = yaml.safe_load(CASES.read_text())["cases"]
    # FSDP's cases are scored apart, under "fsdp"
    points = doc["points"] + doc.get("fsdp", {}).get("points", [])
    assert len(points) == sum(len(c["published"]) for c in cases)
    for p in points:
        assert set(p) >= {
            "case",
            "nodes",
            "devices_per_node",
            "published",
            "predicted",
            "low",
            "high",
            "covered",
        }
    # every published point of the case file is scored once, at its own shape
    shapes = sorted(
        (c["name"], pt["nodes"], pt["devices_per_node"]) for c in cases for pt in c["published"]
    )
    assert sorted((p["case"], p["nodes"], p["devices_per_node"]) for p in points) == shapes
    assert set(doc["totals"]) == {
        "cases",
        "points",
        "coverage",
        "median_abs_error_pts",
        "median_width_pts",
    }
    assert "median absolute error" in text


@pytest.mark.timeout(360)  # the command's cross-validation, then every fold's choice again
def test_cross_validated_backtest_covers_and_chooses_inside_its_folds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nested leave one source out, and leave one family out, on the shipped cases' open
    sources: each fold's points scored by the error model whose noise and fit come from the
    other folds alone. The bar held here is the one the projection's intervals meet on
    clusters they have not seen: coverage of their 95% intervals >= 80%, both ways. (From one
    node, the issue's bars on the median error, <= 5 points, and width, <= 20 points where the
    network between nodes is stated and <= 30 where assumed, are not met since clusters of
    every kind entered the file: their figures are printed and quoted in docs/analysis.md.
    From every smaller scale, the network measured, the three bars are held here by the
    intervals a sweep draws, and the coverage and error bars by the published model's.) A fold's
    recorded noise is the one its training sources choose, computed here again for the first
    fold and for one fold of each level chosen; the folds do
    not all choose alike, and none chooses the grid's widest level; no sealed source is in
    any fold."""
    from analysis.compute.projection.model_error import NOISE_GRID
    from analysis.compute.projection.published.noise_selection import choose_noise
    from analysis.compute.projection.published.scoring import prepare, prepare_walked
    from analysis.read.cases import read_sealed

    out = tmp_path / "cv.json"
    rc, text, err = run(
        capsys,
        "backtest",
        str(CASES),
        "--cross-validate",
        "--json",
        str(out),
    )
    assert rc == 0, err
    doc = json.loads(out.read_text())
    totals, family = doc["totals"], doc["family_totals"]
    print(totals, family)
    assert totals["coverage"] >= 0.8, totals
    assert family["coverage"] >= 0.8, family
    by = doc["totals_by_network"]
    assert sum(by[k]["points"] for k in ("measured", "stated", "assumed")) == totals["points"]
    # every measured scale used: each published point with smaller published ones below it
    # is projected from them too, by its fold's model (never chosen on: the folds' noise
    # below is the one the file's own points choose; the other sources' such points fit the
    # fold's mean from an anchor across nodes alone), and there the network is measured
    walked = doc["walked"]
    below = [
        (c.name, p.nodes)
        for c in open_by_method()[0]
        for p in c.published
        if any(q.nodes < p.nodes for q in c.published)
    ]
    assert [(w["case"], w["nodes"]) for w in walked["points"]] == [
        (f"{name} @{nodes}", nodes) for name, nodes in below
    ]
    assert walked["totals_by_network"]["measured"]["points"] == len(below)
    assert all(len(w["measured_nodes"]) >= 2 for w in walked["points"])
    assert walked["totals"]["coverage"] >= 0.8, walked["totals"]
    assert walked["totals"]["median_abs_error_pts"] <= 5.0, walked["totals"]
    assert "Every measured scale used" in text
    sealed = read_sealed(str(CASES))
    assert sealed is not None
    ddp, fsdp_cases = open_by_method()
    prepared = prepare(ddp)  # the command's draws
    spanning = prepare_walked(ddp)[1]
    groups = list(dict.fromkeys(p.group for p in prepared))
    assert not set(groups) & set(sealed.sources)
    assert f"(nested leave one source out: each of {len(groups)} folds chose its noise" in text
    assert "median absolute error" in text
    assert [f["held_out"] for f in doc["folds"]] == groups
    for fold in doc["folds"]:
        train = [p for p in prepared if p.group != fold["held_out"]]
        assert fold["points"] == len(prepared) - len(train)
        assert fold["noise"] in NOISE_GRID
        assert [r["noise"] for r in fold["inner"]] == list(NOISE_GRID)
    # a fold's choice made again from its training sources alone: the first fold's, and the
    # first fold's to choose each level any fold chose (each choice is the cross-validation's
    # whole cost again; a fold that looked at its held-out source differs at any of them)
    again = {doc["folds"][0]["held_out"]: doc["folds"][0]}
    for fold in doc["folds"]:
        if fold["noise"] not in {f["noise"] for f in again.values()}:
            again[fold["held_out"]] = fold
    for fold in again.values():
        train = [p for p in prepared if p.group != fold["held_out"]]
        mine = [p for p in spanning if p.group != fold["held_out"]]
        assert fold["noise"] == choose_noise(train, spanning=mine)[0], fold["held_out"]
    chosen = [f["noise"] for f in doc["folds"] + doc["family_folds"]]
    assert len(set(chosen)) > 1
    assert max(chosen) < NOISE_GRID[-1], chosen  # the grid reaches beyond every choice
    # as a sweep's projection draws: the same points, each by its fold's fit calibrated
    # beside one run's noise (what a sweep's intervals are); from every smaller scale these
    # meet the three bars, and its coverage and error bars with a kind held out
    sweep = doc["sweep"]
    assert [p["case"] for p in sweep["points"]] == [p["case"] for p in doc["points"]]
    assert sweep["totals"]["coverage"] >= 0.8, sweep["totals"]
    assert sweep["family_totals"]["coverage"] >= 0.8, sweep["family_totals"]
    swept = sweep["walked"]["totals"]
    assert swept["points"] == len(below)
    assert swept["coverage"] >= 0.8 and swept["median_abs_error_pts"] <= 5.0, swept
    assert swept["median_width_pts"] <= 20.0, swept
    kind = sweep["walked"]["family_totals"]
    assert kind["coverage"] >= 0.8 and kind["median_abs_error_pts"] <= 5.0, kind
    assert "As a sweep's projection draws them" in text
    # FSDP's own error model, for comparison: nested over the open FSDP sources alone (each
    # fold's noise chosen by the other FSDP sources), never a sealed or all-reduce source
    own = doc["fsdp"]["own"]
    fsdp_groups = list(dict.fromkeys(c.group for c in fsdp_cases))
    assert own["sources"] == sorted(fsdp_groups)
    fsdp_prepared = prepare(fsdp_cases)
    fsdp_spanning = prepare_walked(fsdp_cases)[1]
    for fold in own["published"]["folds"]:
        train = [p for p in fsdp_prepared if p.group != fold["held_out"]]
        mine = [p for p in fsdp_spanning if p.group != fold["held_out"]]
        assert fold["noise"] == choose_noise(train, spanning=mine)[0], fold["held_out"]
    assert [f["held_out"] for f in own["sweep"]["folds"]] == fsdp_groups
    assert own["published"]["totals"]["points"] == doc["fsdp"]["totals"]["points"]
    assert "FSDP's own error model, for comparison" in text


def test_a_sweeps_model_covers_its_own_points_with_a_runs_noise() -> None:
    """A sweep's projection draws with its own runs' noise (3% at least), not the published
    table's the shipped model chose. The model it draws with (the shipped file's ``sweep``)
    has its spreads calibrated beside that noise: its intervals cover 95% of the open points
    it was fitted on that any spread can reach (not those above their anchor's efficiency
    by more than a run's noise). A published model whose table noise is wider (13%, a level
    the folds choose) with its noise swapped for a run's covers fewer: its spreads were
    calibrated beside the table's noise, which carried nearly all the width."""
    from dataclasses import replace

    from analysis.compute.projection.error_file import load, load_sweep
    from analysis.compute.projection.model_error import (
        MEASURED_NOISE,
        fit,
        score,
        within_reach,
    )
    from analysis.compute.projection.published.scoring import prepare, prepare_walked
    from analysis.compute.projection.published.totals import totals

    open_cases = open_by_method()[0]
    prepared = prepare(open_cases)
    sweep, published = load_sweep(), load()
    assert sweep.noise == MEASURED_NOISE <= published.noise
    assert (sweep.mu_d, sweep.mu_s, sweep.share_band) == (
        published.mu_d,
        published.mu_s,
        published.share_band,
    )
    # the points above their anchor's efficiency by more than a run's noise no spread
    # reaches: the calibration counts the others (and they are few)
    reach = within_reach(prepared, MEASURED_NOISE)
    assert reach.sum() >= 0.95 * len(prepared)
    in_reach = [p for p, ok in zip(prepared, reach, strict=True) if ok]
    drawn = totals(score(in_reach, sweep))["coverage"]
    wide = fit(prepared, noise=0.13, spanning=prepare_walked(open_cases)[1])
    swapped = totals(score(in_reach, replace(wide, noise=MEASURED_NOISE)))["coverage"]
    assert drawn >= 0.95 > swapped, (drawn, swapped)


def test_a_sweeps_intervals_from_anchors_across_nodes_cover_their_points_and_fsdps() -> None:
    """Projected from an anchor across nodes (a case's measured multi-node points, and each
    published point from the case's smaller published scales), a sweep's intervals cover
    95% of the open all-reduce points they were calibrated on, less one point's worth of
    the quantile's interpolation (74 of 78), and FSDP's 10 such points, none of them in the
    fit, at 80% or more. The one-node spread per doubling they drew with before covered 72 of
    78 and 6 of 10: it was fitted on one-node points, and zero in half the folds."""
    from analysis.compute.projection.error_file import load_sweep
    from analysis.compute.projection.model_error import (
        MEASURED_NOISE,
        score,
        within_reach,
    )
    from analysis.compute.projection.published.scoring import prepare, prepare_walked
    from analysis.compute.projection.published.totals import totals

    ddp, fsdp = open_by_method()
    across = [p for p in [*prepare(ddp), *prepare_walked(ddp)[1]] if not p.within]
    reach = within_reach(across, MEASURED_NOISE)
    in_reach = [p for p, ok in zip(across, reach, strict=True) if ok]
    assert len(in_reach) >= 70
    sweep = load_sweep()
    assert totals(score(in_reach, sweep))["coverage"] >= 0.94
    fsdp_across = prepare_walked(fsdp)[1]
    assert len(fsdp_across) >= 10
    assert totals(score(fsdp_across, sweep))["coverage"] >= 0.8


def test_a_case_file_with_a_missing_field_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "cases.yaml"
    bad.write_text(
        "cases:\n  - name: x\n    hardware: {devices_per_node: 8}\n    model: {}\n"
        "    per_device_batch: 32\n    measured: [{nodes: 1, devices_per_node: 8, "
        "throughput_per_device: 100}]\n    published: [{nodes: 2, devices_per_node: 8, "
        "throughput_per_device: 99, efficiency_vs_1node: 0.99}]\n"
    )
    rc, _, err = run(capsys, "backtest", str(bad))
    assert rc == 2 and "case 'x': model.grad_bytes must be a positive number" in err, err


@pytest.mark.parametrize("command", ["backtest", "fit-error"])
def test_no_draws_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """--draws 0 is refused before anything is read or written (it was a traceback)."""
    out = tmp_path / "model.json"
    extra = ["--out", str(out)] if command == "fit-error" else []
    with pytest.raises(SystemExit) as exc:
        backtest.main([command, str(CASES), "--draws", "0", *extra])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--draws: 0: expected an integer >= 1" in err, err
    assert not out.exists()


def test_cross_validating_the_cases_of_one_source_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fold holds one source out and fits on the others: with one source there are none,
    and the nested figures would be a default model's, printed as if cross-validated."""
    import yaml

    cases = yaml.safe_load(CASES.read_text())["cases"]
    one = [c for c in cases if c["source_group"] == "pytorch-ddp-paper"]
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump({"cases": one}))
    out = tmp_path / "cv.json"
    rc, text, err = run(capsys, "backtest", str(path), "--cross-validate", "--json", str(out))
    assert rc == 2 and not text and not out.exists()
    assert err.count("\n") == 1 and "all of one, 'pytorch-ddp-paper'" in err, err
    # the plain backtest of the same file scores it with the shipped model
    assert run(capsys, "backtest", str(path), "--draws", "40")[0] == 0


def test_the_shipped_error_model_chose_its_noise_by_the_stated_rule() -> None:
    """The shipped model's noise is the one its recorded leave-one-source-out selection
    gives under the stated rule (analysis.compute.projection.published.noise_selection.pick_noise:
    the least mean interval score, then the lower level), applied here by hand to the recorded
    rows, over the whole grid; the grid reaches beyond the choice on both sides."""
    from analysis.compute.projection.error_file import SHIPPED_PATH
    from analysis.compute.projection.model_error import NOISE_GRID

    shipped = json.loads(SHIPPED_PATH.read_text())
    rows = shipped["noise_selection"]
    assert shipped["noise_grid"] == list(NOISE_GRID)
    assert [r["noise"] for r in rows] == list(NOISE_GRID)
    # over the fit's points and those projected from their cases' smaller published scales
    (n,) = {r["points"] for r in rows}
    assert n > int(shipped["fitted_on"].split(" cases, ")[1].split(" points")[0])
    least = min(r["interval_score_pts"] for r in rows)
    assert shipped["noise"] == min(r["noise"] for r in rows if r["interval_score_pts"] == least)
    assert NOISE_GRID[0] <= shipped["noise"] < NOISE_GRID[-1]
    for r in rows:  # coverage is a count of the scored points
        assert round(r["coverage"] * n, 6) == round(r["coverage"] * n)


def test_the_shipped_error_model_is_the_fit_on_the_shipped_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """analysis/compute/projection/model_error.json is what 'fit-error' makes of
    benchmarks/projection_cases.yaml (never set by hand): refit, every parameter equal to within
    floating-point noise (other numpy and scipy builds differ in the last digits). A case
    added without refitting fails here. This catches a stale file only: the test above
    checks the choice of the noise against its stated rule."""
    from analysis.compute.projection.error_file import SHIPPED_PATH

    out = tmp_path / "model_error.json"
    rc, _, err = run(capsys, "fit-error", str(CASES), "--out", str(out))
    assert rc == 0, err
    refit, shipped = json.loads(out.read_text()), json.loads(SHIPPED_PATH.read_text())
    hint = "refit with: python -m analysis.project fit-error benchmarks/projection_cases.yaml"
    assert refit.keys() == shipped.keys() and refit["fitted_on"] == shipped["fitted_on"], hint
    assert refit["noise_grid"] == shipped["noise_grid"], hint
    assert len(refit["noise_selection"]) == len(shipped["noise_selection"]), hint
    for new, old in zip(refit["noise_selection"], shipped["noise_selection"], strict=True):
        assert new == pytest.approx(old, rel=1e-6, abs=1e-12), hint
    assert refit["sweep"].keys() == shipped["sweep"].keys(), hint
    assert refit["sweep"]["fitted_on"] == shipped["fitted_on"], hint
    pairs = [(key, refit[key], shipped[key]) for key in refit]
    pairs += [(f"sweep.{k}", v, shipped["sweep"][k]) for k, v in refit["sweep"].items()]
    for key, new, old in pairs:
        if key.split(".")[-1] not in {"fitted_on", "noise_grid", "noise_selection", "sweep"}:
            assert new == pytest.approx(old, rel=1e-6, abs=1e-12), (key, hint)
