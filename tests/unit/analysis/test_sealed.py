"""The sealed test (analysis.compute.projection.published.sealed): a third of the published cases'
sources drawn with fixed seeds (the first draw, then one over each pool of three sources added
later), recorded in the case file and named in its notes, left out of every fit and fold, and
scored once by the model fitted on the others."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.commands import backtest as command
from analysis.compute.projection.published.backtest import (
    SEALED_SEED_OFFSET,
    backtest,
    cross_validated,
)
from analysis.compute.projection.published.sealed import (
    SEAL_SEED,
    draw,
    due,
    next_seed,
    split_sealed,
)
from analysis.read.cases import CaseError, read_cases, read_sealed

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "benchmarks" / "projection_cases.yaml"


@given(st.sets(st.text(alphabet="abcdefghij-", min_size=1, max_size=8), max_size=30))
def test_the_draw_is_a_third_of_the_sources_and_depends_on_the_set_alone(
    sources: set[str],
) -> None:
    got = draw(sources)
    assert len(got) == round(len(sources) / 3)
    assert set(got) <= sources and got == sorted(set(got))
    assert draw(sorted(sources, reverse=True)) == got  # the order given does not matter
    assert draw(list(sources) * 2) == got  # nor repeats


def test_the_file_records_the_draws_their_seeds_make_and_its_notes_name_them() -> None:
    sealed = read_sealed(str(CASES))
    assert sealed is not None and sealed.draws[0].seed == SEAL_SEED
    held = {c.group for c in read_cases(str(CASES))}
    assert set(sealed.drawn_from) <= held
    notes = (REPO / "benchmarks" / "projection_cases.md").read_text(encoding="utf-8")
    section = notes.split("## Sealed test", 1)[1].split("\n## ", 1)[0]
    for i, made in enumerate(sealed.draws):
        assert made.seed == next_seed(i)
        assert list(made.sources) == draw(made.drawn_from, made.seed)
        assert f"seed {made.seed}" in section
    assert all(f"`{name}`" in section for name in sealed.sources), section


def test_no_draw_is_due_sources_added_later_are_pooled_until_a_third_seals_one() -> None:
    sealed = read_sealed(str(CASES))
    assert sealed is not None
    held = {c.group for c in read_cases(str(CASES))}
    assert due(held, sealed.drawn_from) == []
    # the pool grown to three sources makes a draw due over the whole pool
    pool = sorted(held - set(sealed.drawn_from))
    grown = [*pool, *(f"zz-new-{i}" for i in range(3 - len(pool)))]
    assert due([*held, *grown[:-1]], sealed.drawn_from) == []
    assert due([*held, *grown], sealed.drawn_from) == sorted(grown)
    assert due(["a", "b"], []) == [] and due(["a", "b", "c"], ["a"]) == []
    assert due(["a", "b", "c"], []) == ["a", "b", "c"]


@given(st.integers(min_value=0, max_value=40))
def test_sources_added_singly_seal_at_most_one_fewer_than_added_together(n: int) -> None:
    """One at a time, each draw made as soon as it is due."""
    names, drawn_from, sealed, made = [f"s{i:02d}" for i in range(n)], [], 0, 0
    for i in range(n):
        pool = due(names[: i + 1], drawn_from)
        if pool:
            sealed += len(draw(pool, next_seed(made)))
            drawn_from, made = drawn_from + pool, made + 1
    assert sealed in (len(draw(names)), len(draw(names)) - 1)


def _with_later(later: str) -> str:
    """The shipped case file with its ``sealed.later`` record replaced by ``later``."""
    head, rest = CASES.read_text(encoding="utf-8").split("\ncases:", 1)
    return head.split("\n  later:", 1)[0] + "\n" + later + "cases:" + rest


def test_a_source_drawn_from_twice_is_one_line(tmp_path: Path) -> None:
    first = read_sealed(str(CASES))
    assert first is not None
    again = (
        f"  later:\n    - seed: 9\n      drawn_from: [{first.drawn_from[0]}]\n      sources: []\n"
    )
    bad = tmp_path / "cases.yaml"
    bad.write_text(_with_later(again))
    with pytest.raises(CaseError) as err:
        read_sealed(str(bad))
    assert "\n" not in str(err.value) and "draws again" in str(err.value)
    assert first.drawn_from[0] in str(err.value)


def test_a_sealed_source_the_file_does_not_hold_is_one_line(tmp_path: Path) -> None:
    text = CASES.read_text(encoding="utf-8")
    bad = tmp_path / "cases.yaml"
    bad.write_text(text.replace("    - dle-pyt-bart\n", "    - no-such-source\n", 1))
    with pytest.raises(CaseError) as err:
        read_sealed(str(bad))
    assert "\n" not in str(err.value) and "no-such-source" in str(err.value)
    assert "sealed.drawn_from" in str(err.value) and "does not hold" in str(err.value)
    # a sealed source the draw was not made from is named as that, with the draw
    head, rest = text.split("  sources:\n    - dle-paddle-bert\n", 1)  # the first draw's list
    bad.write_text(head + "  sources:\n    - cases-elsewhere\n" + rest)
    with pytest.raises(CaseError) as err:
        read_sealed(str(bad))
    assert "\n" not in str(err.value) and "sealed.sources" in str(err.value)
    assert "not in its drawn_from: cases-elsewhere" in str(err.value)


@pytest.mark.parametrize(
    ("later", "said"),
    [
        ("  later: 3\n", "sealed.later must be a list of draws"),
        ("  later:\n    - seed: true\n", "sealed.later[0] must be a mapping with an integer seed"),
        (
            "  later:\n    - {seed: 2027, drawn_from: [a, a], sources: []}\n",
            "sealed.later[0].drawn_from names a source twice: a",
        ),
    ],
)
def test_a_malformed_later_draw_is_one_line_naming_it(
    tmp_path: Path, later: str, said: str
) -> None:
    bad = tmp_path / "cases.yaml"
    bad.write_text(_with_later(later))
    with pytest.raises(CaseError) as err:
        read_sealed(str(bad))
    assert "\n" not in str(err.value) and said in str(err.value)
    bad.write_text(_with_later("  later:\n"))  # an empty record: the first draw alone
    got = read_sealed(str(bad))
    assert got is not None and len(got.draws) == 1


def test_no_fold_sees_a_sealed_source_and_the_sealed_ones_are_scored_by_the_shipped_model() -> None:
    cases = read_cases(str(CASES))
    sealed = read_sealed(str(CASES))
    assert sealed is not None
    open_cases, shut = split_sealed(cases, sealed.sources)
    assert shut and {c.group for c in shut} == set(sealed.sources)
    got = cross_validated(cases, draws=40, sealed=sealed.sources)
    folds = [f["held_out"] for f in got["folds"]]
    assert not set(folds) & set(sealed.sources)
    scored = {p["case"] for p in got["points"]} | {p["case"] for p in got["fsdp"]["points"]}
    assert scored == {c.name for c in open_cases}
    assert got["sealed"]["sources"] == list(sealed.sources)
    alone = backtest(shut, draws=40, seed=SEALED_SEED_OFFSET)
    assert got["sealed"]["points"] == alone["points"]
    assert got["sealed"]["fsdp"]["points"] == alone["fsdp"]["points"]


def test_no_sealed_point_draws_the_random_numbers_of_an_open_one() -> None:
    """The sealed cases are prepared from a seed of their own: none of their points' normal
    draws is an open point's, from one node or walked forward."""
    from analysis.compute.projection.published.scoring import prepare, prepare_walked

    cases = read_cases(str(CASES))
    sealed = read_sealed(str(CASES))
    assert sealed is not None
    open_cases, shut = split_sealed(cases, sealed.sources)

    def numbers(of: list, seed: int) -> list[bytes]:
        points = prepare(of, draws=8, seed=seed) + prepare_walked(of, draws=8, seed=seed)[1]
        return [z.tobytes() for p in points for z in (p.z, p.z_noise)]

    seen = set(numbers(open_cases, 0))
    shut_numbers = numbers(shut, SEALED_SEED_OFFSET)
    assert shut_numbers and not seen & set(shut_numbers)
    assert seen & set(numbers(shut, 0))  # the open cases' own seed would share them


def test_fit_error_never_reads_a_sealed_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped model is fitted on the open sources alone: a sealed case's published
    figures changed out of all recognition leave the fit as it was."""
    sealed = read_sealed(str(CASES))
    assert sealed is not None
    text = CASES.read_text(encoding="utf-8")
    victim = next(c for c in read_cases(str(CASES)) if c.group == sealed.sources[0])
    changed = text
    for p in victim.published:  # every published efficiency of one sealed case halved
        for field in ("efficiency_vs_1node", "efficiency_vs_1gpu"):
            value = getattr(p, field)
            if value is not None:
                changed = changed.replace(f"{field}: {value:g}", f"{field}: {value / 2:g}", 1)
    assert changed != text
    moved = tmp_path / "moved.yaml"
    moved.write_text(changed)
    fits = []
    for path in (CASES, moved):
        out = tmp_path / f"{path.stem}.json"
        assert command.main(["fit-error", str(path), "--out", str(out), "--draws", "40"]) == 0
        fits.append(json.loads(out.read_text()))
    capsys.readouterr()
    assert "sealed source(s) left out" in fits[0]["fitted_on"]
    for fit in fits:  # the model a sweep draws with is fitted on the same open points
        assert fit["sweep"].pop("fitted_on") == fit["fitted_on"]
    assert {k: v for k, v in fits[0].items() if k != "fitted_on"} == {
        k: v for k, v in fits[1].items() if k != "fitted_on"
    }
    # and the change is one a fit would see: the halved case read back halved
    again = next(c for c in read_cases(str(moved)) if c.name == victim.name)
    assert again != replace(victim)
