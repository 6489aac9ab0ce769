"""The scaling table (analysis.compute.metrics): speedup, efficiency and their baseline,
as properties (hypothesis) and a few worked examples."""

from __future__ import annotations

import pandas as pd
import pytest
from analysis_helpers import make_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from metrics_helpers import frame

from analysis.analyze import analyze
from analysis.compute.metrics import (
    NO_SPEEDUP,
    BaselineSpec,
    amdahl_fit,
    amdahl_table,
    group_stats,
    karp_flatt,
    karp_flatt_note,
    scaling_table,
)
from analysis.read.frame import runs_frame
from analysis.read.parse import ParseResult, Run

SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

worlds = st.sets(st.sampled_from([2, 4, 8, 16]), min_size=1).map(lambda s: sorted({1, *s}))
positive = st.floats(min_value=1e-2, max_value=1e5, allow_nan=False, allow_infinity=False)


@SLOW
@given(
    worlds=worlds, base=positive, reps=st.integers(1, 4), mode=st.sampled_from(["strong", "weak"])
)
def test_perfect_scaling_gives_efficiency_one_and_zero_serial_fraction(
    worlds: list[int], base: float, reps: int, mode: str
) -> None:
    s = scaling_table(frame({w: [base / w] * reps for w in worlds}, mode))
    assert s["speedup"].to_numpy() == pytest.approx([float(w) for w in worlds], rel=1e-9)
    assert s["parallel_efficiency"].to_numpy() == pytest.approx([1.0] * len(worlds), rel=1e-9)
    assert s["per_device_throughput_efficiency"].to_numpy() == pytest.approx(
        [1.0] * len(worlds), rel=1e-9
    )
    scaled = s[~s["is_baseline"]]
    if mode == "strong":
        assert scaled["karp_flatt"].to_numpy() == pytest.approx([0.0] * len(scaled), abs=1e-9)
        fit = amdahl_table(s)
        assert fit["serial_fraction"].iloc[0] == pytest.approx(0.0, abs=1e-9)
    else:
        assert scaled["karp_flatt"].isna().all()  # Karp-Flatt is a strong-scaling measure


times_by_world = st.fixed_dictionaries(
    {w: st.lists(positive, min_size=1, max_size=4) for w in (1, 2, 4)}
)
RATIO_COLUMNS = [
    "speedup",
    "speedup_ci_low",
    "speedup_ci_high",
    "parallel_efficiency",
    "parallel_efficiency_ci_low",
    "parallel_efficiency_ci_high",
    "karp_flatt",
    "throughput_speedup",
    "per_device_throughput_efficiency",
    "job_time_speedup",
]


@SLOW
@given(times=times_by_world, factor=st.floats(min_value=1e-3, max_value=1e3))
def test_scaling_every_time_by_a_constant_changes_no_ratio(
    times: dict[int, list[float]], factor: float
) -> None:
    a = scaling_table(frame(times))
    b = scaling_table(frame({w: [t * factor for t in ts] for w, ts in times.items()}))
    for col in RATIO_COLUMNS[:7]:
        pd.testing.assert_series_equal(a[col], b[col], rtol=1e-7, check_names=False)


@SLOW
@given(times=times_by_world, seed=st.randoms(use_true_random=False))
def test_row_order_does_not_matter(times: dict[int, list[float]], seed: object) -> None:
    runs = frame(times)
    shuffled = runs.sample(frac=1.0, random_state=seed.randint(0, 2**31)).reset_index(drop=True)  # type: ignore[attr-defined]
    pd.testing.assert_frame_equal(scaling_table(runs), scaling_table(shuffled))
    pd.testing.assert_frame_equal(group_stats(runs), group_stats(shuffled))


def test_worked_example_from_the_old_tutorial() -> None:
    """362.45 s on 1 GPU, 95.23 s on 4, 57.14 s on 8: the tutorial's own numbers."""
    s = scaling_table(frame({1: [362.45], 4: [95.23], 8: [57.14]}))
    assert s["speedup"].round(2).tolist() == [1.0, 3.81, 6.34]
    assert s["parallel_efficiency"].round(3).tolist() == [1.0, 0.952, 0.793]
    assert s["speedup_ci_low"].isna().all()  # one run each: no interval
    assert s["karp_flatt"].iloc[2] == pytest.approx((1 / 6.3432 - 1 / 8) / (1 - 1 / 8), rel=1e-3)


def test_baseline_falls_back_to_the_smallest_world_and_says_so() -> None:
    s = scaling_table(frame({2: [50.0, 52.0], 4: [26.0, 27.0]}))
    assert s["baseline_world_size"].tolist() == [2, 2]
    assert s["relative_scale"].tolist() == [1.0, 2.0]
    assert "no 1-device run" in s["baseline_note"].iloc[0]
    assert any("no 1-device run" in n for n in analyze(frame({2: [50.0], 4: [26.0]})).notes)


def test_explicit_baseline() -> None:
    runs = frame({1: [100.0], 2: [50.0], 4: [26.0]})
    s = scaling_table(runs, baseline=BaselineSpec.parse("1x2"))
    assert s["speedup"].tolist() == pytest.approx([0.5, 1.0, 50 / 26])
    assert BaselineSpec.parse("4") == BaselineSpec(world_size=4)
    with pytest.raises(ValueError, match="nodes x devices"):
        BaselineSpec.parse("two")


def test_high_variance_and_parity_flags() -> None:
    runs = frame({1: [100.0, 101.0, 99.0], 2: [40.0, 60.0, 50.0]})
    worse = make_result("bad", world=(1, 2), train_time_s=50.0, val_loss=0.2, val_acc=0.9)
    runs = pd.concat([runs, runs_frame(ParseResult(runs=[Run(worse, ("x",))]))], ignore_index=True)
    a = analyze(runs)
    g = a.groups.set_index("world_size")
    assert not g.loc[1, "high_variance"] and g.loc[2, "high_variance"]
    s = a.scaling.set_index("world_size")
    assert s.loc[2, "parity"] == "worse loss and accuracy"
    assert any("faster but worse" in n for n in a.notes)


def test_a_worse_run_that_is_slower_is_not_called_faster() -> None:
    """A 2-device run slower than its baseline (0.92x here) with a worse loss: the note says
    slower, never 'faster but worse'."""
    runs = frame({1: [100.0, 101.0, 99.0]})
    slow = [
        make_result(f"s{i}", world=(1, 2), train_time_s=t, val_loss=0.2, val_acc=0.9)
        for i, t in enumerate((108.0, 109.0, 109.5))
    ]
    runs = pd.concat(
        [runs, runs_frame(ParseResult(runs=[Run(r, ("x",)) for r in slow]))], ignore_index=True
    )
    a = analyze(runs)
    speedup = a.scaling.set_index("world_size").loc[2, "speedup"]
    assert speedup < 1
    (note,) = [n for n in a.notes if "worse loss" in n]
    assert "faster" not in note and f"slower too ({speedup:.2f}x)" in note


def test_superlinear_fit_is_not_extrapolated() -> None:
    scaling = scaling_table(frame({1: [100.0], 2: [20.0]}))
    table = amdahl_table(scaling)
    assert amdahl_fit([1.0, 2.0], [1.0, 5.0]).serial_fraction < 0  # as fitted...
    assert table["serial_fraction"].isna().all()  # ...but no serial fraction is shown
    assert table["predicted_speedup_2x"].isna().all()
    assert "superlinear" in table["fit_note"].iloc[0]
    assert scaling["karp_flatt"].isna().all()
    assert "superlinear" in scaling["karp_flatt_note"].iloc[1]


def test_a_slowdown_has_no_serial_fraction() -> None:
    """2 processes 3x slower than 1: Karp-Flatt would say 4.5, Amdahl f > 1; neither is one."""
    scaling = scaling_table(frame({1: [0.040, 0.041, 0.039], 2: [0.13, 0.12, 0.14]}))
    assert scaling["speedup"].iloc[1] < 1
    assert (1 / scaling["speedup"].iloc[1] - 0.5) / 0.5 > 4  # what used to be printed
    assert scaling["karp_flatt"].isna().all()
    assert scaling["karp_flatt_note"].iloc[1] == NO_SPEEDUP
    assert amdahl_fit([1.0, 2.0], [1.0, 0.3]).serial_fraction > 1
    table = amdahl_table(scaling)
    assert table["serial_fraction"].isna().all() and table["serial_fraction_se"].isna().all()
    assert table["predicted_speedup_2x"].isna().all()
    assert table["fit_note"].iloc[0] == NO_SPEEDUP
    assert karp_flatt(1.0, 4.0) != karp_flatt(1.0, 4.0)  # S = 1 gains nothing: NaN too
    assert karp_flatt_note(0.5, 4.0) == NO_SPEEDUP


# --- steady state, series identity (issue: numbers you can trust) -----------------------------


def _runs(*records: object) -> pd.DataFrame:
    return runs_frame(ParseResult(runs=[Run(r, ("x",)) for r in records]))  # type: ignore[arg-type]


def test_headline_is_the_steady_state_and_whole_training_is_labelled() -> None:
    # World 1 and 2 scale perfectly after the warm-up; world 2's first epoch carries 30 s of
    # warm-up (NCCL/gloo set-up, first bucket rebuild) that the headline must leave out.
    runs = _runs(
        *(make_result(f"a{i}", world=(1, 1), train_time_s=100.0) for i in range(3)),
        *(
            make_result(f"b{i}", world=(1, 2), train_time_s=50.0, warmup_extra_s=30.0)
            for i in range(3)
        ),
    )
    s = scaling_table(runs).set_index("world_size")
    assert (s["headline_basis"] == "steady state").all()
    assert s.loc[2, "speedup"] == pytest.approx(2.0)
    assert s.loc[2, "parallel_efficiency"] == pytest.approx(1.0)
    assert s.loc[2, "whole_train_speedup"] == pytest.approx(100 / 80)
    assert s.loc[2, "whole_train_efficiency"] == pytest.approx(100 / 80 / 2)
    assert s.loc[2, "samples_per_s_mean"] == pytest.approx(8000 * 3 / 37.5)
    assert s.loc[2, "warmup_share_mean"] == pytest.approx(42.5 / 80)
    notes = analyze(runs).notes
    assert any("warm-up is 53% of training time" in n for n in notes), notes


def test_without_steady_state_the_headline_falls_back_and_says_so() -> None:
    runs = _runs(
        make_result("a", world=(1, 1), train_time_s=100.0, steady=False),
        make_result("b", world=(1, 2), train_time_s=50.0, warmup_extra_s=30.0),
    )
    s = scaling_table(runs).set_index("world_size")
    assert s.loc[2, "headline_basis"].startswith("whole training")
    assert s.loc[2, "speedup"] == pytest.approx(100 / 80)  # never mixes steady and whole
    assert any("no steady state recorded" in n for n in analyze(runs).notes)


def test_device_model_and_cluster_split_series() -> None:
    a100, h100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
    runs = _runs(
        make_result("1", world=(1, 1), train_time_s=100.0, device_name=a100, cluster="site-a"),
        make_result("2", world=(1, 2), train_time_s=50.0, device_name=a100, cluster="site-a"),
        # the H100 2-GPU run must not be compared with the A100 1-GPU run
        make_result("3", world=(1, 2), train_time_s=20.0, device_name=h100, cluster="site-a"),
        # the same job id and device on another cluster: another run, another series
        make_result("1", world=(1, 1), train_time_s=90.0, device_name=a100, cluster="site-b"),
    )
    s = scaling_table(runs)
    assert s["series"].nunique() == 3
    h = s[s["device_name"] == h100].iloc[0]
    assert h["is_baseline"] and h["speedup"] == 1.0
    assert "NVIDIA H100 80GB HBM3" in h["series"]
    b = s[s["cluster"] == "site-b"].iloc[0]
    assert b["is_baseline"] and "on site-b" in b["series"]
    a2 = s[(s["cluster"] == "site-a") & (s["world_size"] == 2) & (s["device_name"] == a100)]
    assert a2["speedup"].iloc[0] == pytest.approx(2.0)


def test_a_series_mixing_versions_is_flagged() -> None:
    old = {"python": "3.11.2", "torch": "2.4.0", "lightning": "2.6.6"}
    new = {"python": "3.11.2", "torch": "2.5.1", "lightning": "2.6.6"}
    runs = _runs(
        make_result("1", world=(1, 1), versions=old),
        make_result("2", world=(1, 2), train_time_s=50.0, versions=new),
    )
    s = scaling_table(runs)
    assert (s["mixed_versions"] == "torch 2.4.0/2.5.1").all()
    assert any("different versions (torch 2.4.0/2.5.1)" in n for n in analyze(runs).notes)
    same = _runs(make_result("1", world=(1, 1)), make_result("2", world=(1, 2)))
    assert (scaling_table(same)["mixed_versions"] == "").all()
