"""A case's ``family`` (analysis.read.cases): optional, one of a fixed vocabulary, and every case
of the shipped file names one."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.read.cases import FAMILIES, CaseError, read_cases

REPO = Path(__file__).resolve().parents[3]

CASE = """  - name: {name}
{family}    hardware: {{devices_per_node: 4}}
    model: {{grad_bytes: 100000000, method: ddp}}
    per_device_batch: 64
    measured: [{{nodes: 1, devices_per_node: 4, throughput_per_device: 100}}]
    published: [{{nodes: 2, devices_per_node: 4, throughput_per_device: 90,
                  efficiency_vs_1node: 0.9}}]
"""


def write(tmp_path: Path, *cases: tuple[str, str | None]) -> str:
    path = tmp_path / "cases.yaml"
    body = "".join(
        CASE.format(name=n, family="" if f is None else f"    family: {f}\n") for n, f in cases
    )
    path.write_text("cases:\n" + body)
    return str(path)


def test_the_family_is_read_and_may_be_left_out(tmp_path: Path) -> None:
    named, unnamed = read_cases(write(tmp_path, ("a", "university-lab"), ("b", None)))
    assert (named.family, unnamed.family) == ("university-lab", "")


@pytest.mark.parametrize("family", ["cloud", "FSDP", "1", "[fsdp]"])
def test_an_unknown_family_is_one_line_naming_the_case_and_the_allowed_values(
    tmp_path: Path, family: str
) -> None:
    with pytest.raises(CaseError) as err:
        read_cases(write(tmp_path, ("odd", family)))
    message = str(err.value)
    assert "\n" not in message and "'odd'" in message
    assert all(f in message for f in FAMILIES)


def test_every_shipped_case_names_its_family() -> None:
    cases = read_cases(str(REPO / "benchmarks" / "projection_cases.yaml"))
    assert all(c.family in FAMILIES for c in cases), [c.name for c in cases if not c.family]


def test_the_file_holds_every_family_and_the_added_kinds_are_doubtful() -> None:
    """Every family the reader knows has a case; the kinds of cluster added with the sealed
    test (a national-lab cluster, cloud Ethernet, older GPUs with their own all-reduce, FSDP
    across nodes: at least 4 sources and 30 points) each say they are doubtful."""
    import yaml

    path = REPO / "benchmarks" / "projection_cases.yaml"
    cases = read_cases(str(path))
    assert {c.family for c in cases} == set(FAMILIES)
    added = {
        "ebug-distributed-tf-benchmarks",
        "paddlefleetx-resnet50-benchmark",
        "eth-lsai-fsdp-logs",
        "horovod-issue-396-aws-p3",
    }
    new = [c for c in cases if c.group in added]
    assert {c.group for c in new} == added and sum(len(c.published) for c in new) >= 30
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))["cases"]
    doubtful = [c for c in raw if (c.get("source_group") or c["name"]) in added]
    assert all("DOUBTFUL" in str(c.get("notes", "")) for c in doubtful), [
        c["name"] for c in doubtful if "DOUBTFUL" not in str(c.get("notes", ""))
    ]
