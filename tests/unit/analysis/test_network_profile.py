"""A network profile given to the projection (analysis.read.network_profile): a YAML of the
inter-node bandwidth, or nccl-tests' output fitted at its rank count; a bad one names its key."""

from __future__ import annotations

from pathlib import Path

from projection_helpers import FIXTURE, first_projection, run

from analysis import summarize


def test_an_nccl_tests_output_is_a_network_profile(tmp_path: Path) -> None:
    """nccl-tests' table, as printed or behind srun's ``0:`` prefixes: the latency-bandwidth
    fit at its rank count (its busbw column at 512 MiB reads 322.78 GB/s)."""
    from analysis.read.network_profile import read_profile

    text = (FIXTURE / "nccl_tests_16_ranks.txt").read_text()
    prefixed = tmp_path / "srun.out"
    prefixed.write_text("".join(f"0: {line}\n" for line in text.splitlines()))
    for path in (FIXTURE / "nccl_tests_16_ranks.txt", prefixed):
        profile = read_profile(str(path))
        assert profile["at_world_size"] == 16
        assert 250 < profile["inter_busbw_gbps"] < 340, profile
        assert 0 < profile["inter_alpha_s"] < 1e-3
    row = first_projection("--network", str(prefixed))
    assert "srun.out (16 ranks, 7 sizes fitted)" in row["network"]


def test_a_bad_network_profile_names_the_key(tmp_path: Path) -> None:
    profile = tmp_path / "net.yaml"
    profile.write_text("inter_busbw_gbps: -3\n")
    rc, _, err = run(summarize.main, str(FIXTURE), "--project", "4", "--network", str(profile))
    assert rc == 2 and "inter_busbw_gbps must be a positive number" in err, err
    profile.write_text("busbw: 3\n")
    rc, _, err = run(summarize.main, str(FIXTURE), "--project", "4", "--network", str(profile))
    assert rc == 2 and "unknown key(s) busbw" in err, err
