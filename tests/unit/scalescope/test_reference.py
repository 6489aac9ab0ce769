"""The config reference (scalescope.reference): every key listed, and docs/config.md's copy
the one generated from the schema."""

from __future__ import annotations

from pathlib import Path

from scalescope import reference

REPO = Path(__file__).resolve().parents[3]
CONFIG_DOC = REPO / "docs" / "config.md"
START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def test_docs_config_reference_is_generated_from_the_schema() -> None:
    text = CONFIG_DOC.read_text(encoding="utf-8")
    assert START in text and END in text, f"docs/config.md lacks the {START} / {END} markers"
    assert text.index(START) < text.index(END)
    between = text.split(START, 1)[1].split(END, 1)[0]
    assert between.strip() == reference.markdown().strip(), (
        "docs/config.md's config reference is stale: regenerate it with "
        "`scalescope config-reference --write docs/config.md`"
    )


def test_reference_lists_every_train_and_workload_key() -> None:
    md = reference.markdown()
    for key in ("trainer.batch_size", "trainer.precision", "tracking.mode", "workload.lr"):
        assert f"| `{key}` |" in md
    assert "| `max_nodes` |" in md
