"""A network profile given to the projection (analysis.read.network_profile): a YAML of the
inter-node bandwidth measured or its stated line rate, or nccl-tests' output fitted at its rank
count; a bad one names its key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from projection_helpers import (
    FIXTURE,
    REPO,
    first_projection,
    parts,
    run,
    write_runs_across_nodes,
)

from analysis import summarize
from analysis.compute.projection.step_time.step_model import ScalePoint

QUICKSTART = REPO / "tests" / "fixtures" / "quickstart"
"""A sweep of one node (1 and 2 processes): nothing measured across nodes."""


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


def test_an_all_reduce_run_on_one_host_is_refused_as_the_link_within_a_node(
    tmp_path: Path,
) -> None:
    """A table whose ranks all ran on one host measured NVLink (or shared memory), not the
    network between nodes: read as that network, it projected every multi-node scale as if it
    were one node. nccl-tests names each rank's host; benchmarks/allreduce.py prints
    ``# hosts``; a table that names none is taken as it was."""
    from analysis.read.network_profile import read_profile

    text = (FIXTURE / "nccl_tests_16_ranks.txt").read_text()
    one_host = tmp_path / "one_node.txt"
    one_host.write_text(text.replace(" node1 device", " node0 device"))
    bench = tmp_path / "bench.txt"
    rows = "".join(f"{2**k:>14} {100.0 + 2**k / 1e4:12.1f} 1.0 1.0\n" for k in range(12, 24))
    header = "# backend nccl, 16 ranks, float32, gradient 65536 B, budget 10 s\n"
    bench.write_text(header + "# hosts gpu07\n" + rows)
    for path in (one_host, bench):
        rc, _, err = run(summarize.main, str(QUICKSTART), "--project", "4", "--network", str(path))
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert "ran on one host" in err and "across 2 or more nodes" in err, err
    bench.write_text(header + "# hosts gpu07, gpu08\n" + rows)
    assert read_profile(str(bench))["at_world_size"] == 16
    bench.write_text(header + rows)  # no host named: as before
    assert read_profile(str(bench))["at_world_size"] == 16


def test_earlier_runs_across_nodes_give_the_network_they_measured(tmp_path: Path) -> None:
    """A folder (or a log) of earlier scalescope runs across nodes, of any workload: the
    network their all-reduce sweeps measured, as a measured bus bandwidth (±15%), so that a
    one-node sweep is projected on it rather than on the assumed band; runs of one node
    only are refused in one line."""
    from analysis.compute.projection.network_runs import read_network

    earlier = write_runs_across_nodes(tmp_path / "earlier", busbw_gbps=1.6)
    for path in (earlier, earlier / "slurm-900.out"):
        profile = read_network(str(path))
        assert profile["inter_busbw_gbps"] == pytest.approx(1.6)
        assert profile["inter_alpha_s"] == pytest.approx(5e-5) and profile["at_world_size"] == 4
        assert f"the 2x2 runs in {path}" in profile["source"], profile
    rows = {}
    for name, given in (("assumed", []), ("runs", ["--network", str(earlier)])):
        rc, out, err = run(
            summarize.main, str(QUICKSTART), "--project", "4", *given,
            "--no-write", "--format", "json",
        )  # fmt: skip
        assert rc == 0, err
        rows[name] = json.loads(out)["projection"][0]
    assert "the 2x2 runs in" in rows["runs"]["network"] and "assumed" in rows["assumed"]["network"]
    width = {k: r["efficiency_high"] - r["efficiency_low"] for k, r in rows.items()}
    assert width["runs"] < width["assumed"] - 0.1, width
    rc, _, err = run(
        summarize.main, str(QUICKSTART), "--project", "4", "--network", str(QUICKSTART)
    )
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "no scalescope run across nodes" in err and "the most nodes 1" in err, err


def test_runs_on_another_cluster_are_said_to_be_another_clusters(tmp_path: Path) -> None:
    """Earlier runs that name a cluster the sweep did not run on still give the network,
    and the notes say whose it is; runs on the sweep's own cluster (the quick start's
    ``local``), or naming none, add no such note."""
    notes = {}
    for cluster in ("hpc-a", "local", None):
        earlier = write_runs_across_nodes(tmp_path / str(cluster), cluster=cluster)
        rc, out, err = run(
            summarize.main, str(QUICKSTART), "--project", "4", "--network", str(earlier),
            "--no-write", "--format", "json",
        )  # fmt: skip
        assert rc == 0, err
        doc = json.loads(out)
        assert "the 2x2 runs in" in doc["projection"][0]["network"], doc["projection"][0]
        notes[cluster] = [n for n in doc["notes"] if "network is taken from runs on" in n]
    assert notes["local"] == notes[None] == [], notes
    (note,) = notes["hpc-a"]
    assert "runs on hpc-a, but this series ran on local" in note, note


def test_a_bad_network_profile_names_the_key(tmp_path: Path) -> None:
    profile = tmp_path / "net.yaml"
    profile.write_text("inter_busbw_gbps: -3\n")
    rc, _, err = run(summarize.main, str(FIXTURE), "--project", "4", "--network", str(profile))
    assert rc == 2 and "inter_busbw_gbps must be a positive number" in err, err
    profile.write_text("busbw: 3\n")
    rc, _, err = run(summarize.main, str(FIXTURE), "--project", "4", "--network", str(profile))
    assert rc == 2 and "unknown key(s) busbw" in err, err


def test_a_stated_line_rate_is_read_and_refused_with_a_measured_one_or_without_either(
    tmp_path: Path,
) -> None:
    from analysis.read.network_profile import read_profile

    profile = tmp_path / "net.yaml"
    profile.write_text("inter_line_rate_gbit_s: 800\nsource: site docs, 4x NDR200\n")
    assert read_profile(str(profile))["inter_line_rate_gbit_s"] == 800
    # written as people write it, as a config is read: 1e9 without a dot is a number (YAML 1.2)
    profile.write_text("inter_busbw_gbps: 2.5e1\ninter_alpha_s: 5e-5\n")
    assert read_profile(str(profile))["inter_alpha_s"] == 5e-5
    for text, says in (
        ("inter_line_rate_gbit_s: 800\ninter_busbw_gbps: 90\n", "are both given"),
        ("source: site docs\n", "inter_line_rate_gbit_s (the stated line rate, Gb/s a node)"),
        ("inter_line_rate_gbit_s: 0\n", "inter_line_rate_gbit_s must be a positive number"),
        ("inter_line_rate_gbit_s: .nan\n", "inter_line_rate_gbit_s must be a positive number"),
        ("inter_busbw_gbps: .inf\n", "inter_busbw_gbps must be a positive number"),
    ):
        profile.write_text(text)
        rc, _, err = run(
            summarize.main, str(QUICKSTART), "--project", "4", "--network", str(profile)
        )
        assert rc == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_a_profiles_bus_bandwidth_is_the_centre_it_is_drawn_around() -> None:
    """100 GB/s measured: the centre is 100 GB/s, the draws span 85-115 (the band's geometric
    middle, 98.9, was the centre before)."""
    from analysis.compute.projection.step_time.network import network_from_profile

    net = network_from_profile({"inter_busbw_gbps": 100}, None, None)
    assert net.inter is not None and net.inter.busbw_gbps == 100.0
    assert net.factor(4) == pytest.approx(1.0, rel=1e-12)
    assert (net.factor(4, 0.0), net.factor(4, 1.0)) == pytest.approx((0.85, 1.15))


def test_a_stated_line_rate_is_an_upper_bound_spanned_over_the_learned_share() -> None:
    """800 Gb/s a node stated: the bus bandwidth is drawn over the shares of a stated line rate
    the shipped model learned published clusters reached, its centre at the typical one."""
    from analysis.compute.projection.error_file import load_sweep
    from analysis.compute.projection.step_time.network import (
        LINE_RATE_PRIOR,
        network_from_profile,
    )

    band = load_sweep().share_band
    assert band is not None
    low, typical, high = band
    net = network_from_profile({"inter_line_rate_gbit_s": 800}, None, band)
    assert net.inter is not None and net.inter.busbw_gbps == 100.0  # 800 Gb/s = 100 GB/s
    assert net.factor(1) == 1.0  # within a node: the intra-node level, untouched
    assert net.factor(4) == pytest.approx(typical)
    assert (net.factor(4, 0.0), net.factor(4, 1.0)) == pytest.approx((low, high))
    assert "an upper bound" in net.note and f"typical {100 * typical:.0f}%" in net.note
    # an error model that learned no band: the prior's span, never the whole line rate
    bare = network_from_profile({"inter_line_rate_gbit_s": 800}, None, None)
    assert bare.inter_band == LINE_RATE_PRIOR and bare.factor(4) < 1.0


def test_a_line_rate_projects_lower_and_wider_than_the_same_rate_measured(tmp_path: Path) -> None:
    """A sweep of one node (the quickstart's), projected to 8 nodes on 10 Gb/s: stated, its
    centre sits at the typical share and its interval spans the band; measured (1.25 GB/s,
    the same rate achieved whole), the centre is higher and the interval narrower."""
    stated, measured = tmp_path / "stated.yaml", tmp_path / "measured.yaml"
    stated.write_text("inter_line_rate_gbit_s: 10\n")
    measured.write_text("inter_busbw_gbps: 1.25\n")
    rows = {}
    for name, path in (("stated", stated), ("measured", measured)):
        rc, out, err = run(
            summarize.main, str(QUICKSTART), "--project", "8", "--network", str(path),
            "--no-write", "--format", "json",
        )  # fmt: skip
        assert rc == 0, err
        rows[name] = json.loads(out)["projection"][0]
    s, m = rows["stated"], rows["measured"]
    assert s["nodes"] == m["nodes"] == 8
    assert s["efficiency"] < m["efficiency"] - 0.05, (s["efficiency"], m["efficiency"])
    width = {k: r["efficiency_high"] - r["efficiency_low"] for k, r in rows.items()}
    assert width["stated"] > width["measured"] + 0.05, width
    assert "upper bound" in s["network"] and "upper bound" not in m["network"]


def test_a_line_rate_does_not_replace_what_a_sweep_measured_across_nodes() -> None:
    from analysis.compute.projection.series_network import series_network

    base = ScalePoint(1, 1, 1, [parts(world=1)] * 3)
    across = ScalePoint(4, 2, 2, [parts(busbw=3.0, world=4)] * 3)
    measured = series_network([base, across], None)
    got = series_network([base, across], {"inter_line_rate_gbit_s": 400})
    assert got.inter == measured.inter and got.measured_nodes == 2
    assert "is not used" in got.note
    # one node measured: the line rate gives the level, a share of it spanned
    alone = series_network(
        [base, ScalePoint(2, 1, 2, [parts()] * 3)], {"inter_line_rate_gbit_s": 400}
    )
    assert alone.inter is not None and alone.inter.busbw_gbps == 50.0 and alone.inter_band[0] < 1
