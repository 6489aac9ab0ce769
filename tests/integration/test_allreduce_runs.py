"""The all-reduce baseline on real gloo process groups of 2 and 3 ranks, a dying peer, the budget,
and the benchmark script.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from scalescope.allreduce_model import fit_model, fit_time_s
from scalescope.job.diagnosis.allreduce import sweep_sizes

ROOT = Path(__file__).resolve().parents[2]

WORKER = ROOT / "tests" / "allreduce_worker.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_group(
    tmp_path: Path, world: int, *args: str, timeout_s: float = 90
) -> tuple[list[subprocess.CompletedProcess[str]], list[dict[str, Any] | None]]:
    """Start ``world`` worker processes as one gloo group; wait; their outputs and results."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
            "OMP_NUM_THREADS": "1",
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), str(tmp_path / f"rank{rank}.json"), *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    done = []
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"a rank did not finish within {timeout_s} s (hung)")
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    results = []
    for rank in range(world):
        f = tmp_path / f"rank{rank}.json"
        results.append(json.loads(f.read_text()) if f.exists() else None)
    return done, results


def _same_but_seconds(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {k: v for k, v in a.items() if k != "seconds"} == {
        k: v for k, v in b.items() if k != "seconds"
    }


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("three")
    done, results = run_group(
        tmp,
        3,
        "--gradient-bytes",
        "300000",
        "--budget-s",
        "30",
        "--bucket-bytes",
        "5000,100000,20000000",
    )
    for p in done:
        assert p.returncode == 0, p.stderr[-3000:]
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


def test_three_ranks_sweep_every_size_with_nccl_tests_formulas(
    three_ranks: list[dict[str, Any]],
) -> None:
    s = three_ranks[0]["section"]
    assert s["status"] == "measured" and s["reason"] is None
    assert (s["backend"], s["world_size"], s["gradient_bytes"]) == ("gloo", 3, 300000)
    assert [r["bytes"] for r in s["sizes"]] == sweep_sizes(300000)
    for r in s["sizes"]:
        assert r["time_s"] > 0
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (3 - 1) / 3)
    # busbw at the largest size swept (8 MiB, beyond the 300 kB gradient) and at the gradient
    assert s["sizes"][-1]["bytes"] == 8 * 2**20
    assert s["busbw_gbps"] == s["sizes"][-1]["busbw_gbps"]
    at_gradient = next(r for r in s["sizes"] if r["bytes"] == 300000)
    assert s["busbw_at_gradient_gbps"] == at_gradient["busbw_gbps"]
    assert s["seconds"] > 0


def test_every_rank_returns_the_same_section(three_ranks: list[dict[str, Any]]) -> None:
    first = three_ranks[0]["section"]
    for r in three_ranks[1:]:
        assert _same_but_seconds(r["section"], first)


def test_prediction_is_the_fitted_model_at_each_bucket(three_ranks: list[dict[str, Any]]) -> None:
    s = three_ranks[0]["section"]
    rows = s["sizes"]
    fit = s["fit"]
    assert fit == fit_model([(r["bytes"], r["time_s"]) for r in rows], 3)
    assert fit["points"] == len(rows) and fit["alpha_s"] >= 0 and fit["rel_rms"] >= 0
    assert s["bucket_bytes"] == [5000, 100000, 20000000]
    assert (s["bucket_source"], s["bucket_reason"]) == ("estimated", "given by the caller")
    assert s["predicted_step_s"] > 0
    # 20 MB lies beyond the largest size (8 MiB): from the fitted model as well
    expected = sum(fit_time_s(fit, b, 3) for b in (5000, 100000, 20000000))
    assert s["predicted_step_s"] == pytest.approx(expected)


def test_the_baseline_leaves_rng_and_tensors_alone(three_ranks: list[dict[str, Any]]) -> None:
    assert all(r["rng_unchanged"] and r["weight_unchanged"] for r in three_ranks)


def test_a_tiny_budget_stops_early_on_every_rank_with_a_reason(tmp_path: Path) -> None:
    done, results = run_group(tmp_path, 2, "--gradient-bytes", str(2**20), "--budget-s", "0")
    assert all(p.returncode == 0 for p in done), [p.stderr[-2000:] for p in done]
    a, b = (r["section"] for r in results)  # type: ignore[index]
    assert _same_but_seconds(a, b)
    assert a["status"] == "measured"
    assert [r["bytes"] for r in a["sizes"]] == [4096]  # the first size is always measured
    assert a["reason"].startswith("budget 0 s: stopped before 8192 B")
    # One size cannot separate latency from bandwidth: no model, so no prediction.
    assert a["fit"]["points"] == 1 and a["fit"]["alpha_s"] is None
    assert a["predicted_step_s"] is None


def test_world_size_one_is_skipped_with_the_reason(tmp_path: Path) -> None:
    done, results = run_group(tmp_path, 1, "--gradient-bytes", "100000")
    assert done[0].returncode == 0, done[0].stderr[-2000:]
    s = results[0]["section"]  # type: ignore[index]
    assert s["status"] == "skipped" and s["reason"] == "1 device: nothing to all-reduce"
    assert s["sizes"] == [] and s["predicted_step_s"] is None
    assert s["fit"] is None and s["bucket_bytes"] is None and s["busbw_at_gradient_gbps"] is None


def test_a_peer_dying_mid_sweep_fails_the_other_rank_instead_of_hanging(tmp_path: Path) -> None:
    # Rank 1 is patched to exit hard at its 6th all-reduce (inside the sweep); rank 0 must end
    # with an error, within the process group's 10 s timeout (run_group fails a hang at 60 s).
    port_args = ("--gradient-bytes", str(2**20), "--budget-s", "30", "--timeout-s", "10")
    port = free_port()
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
        "OMP_NUM_THREADS": "1",
    }
    survivor = subprocess.Popen(
        [sys.executable, str(WORKER), str(tmp_path / "r0.json"), *port_args],
        env={**env, "RANK": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    dying = subprocess.run(
        [
            sys.executable,
            str(WORKER),
            str(tmp_path / "r1.json"),
            *port_args,
            "--die-after-ops",
            "6",
        ],
        env={**env, "RANK": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dying.returncode == 3, dying.stderr[-2000:]
    try:
        _out, err = survivor.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        survivor.kill()
        pytest.fail("rank 0 hung after its peer died")
    assert survivor.returncode != 0
    assert not (tmp_path / "r0.json").exists()
    assert "Traceback" in err and "allreduce_baseline" in err, err[-2000:]


def test_the_benchmark_prints_the_table_from_spawned_ranks() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "allreduce.py"),
            "--nproc",
            "2",
            "--gradient-bytes",
            "64K",
            "--budget-s",
            "5",
        ],
        env={
            **os.environ,
            "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
            "OMP_NUM_THREADS": "1",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "# backend gloo, 2 ranks, float32, gradient 65536 B" in out.stdout
    # where its ranks ran, so that --network refuses a table of the link within a node
    assert f"# hosts {socket.gethostname()}\n" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if not line.startswith("#")]
    assert [int(r[0]) for r in rows] == [4096 * 2**k for k in range(12)]  # up to 8 MiB
    for size, time_us, algbw, busbw in rows:
        assert float(algbw) == pytest.approx(
            int(size) / (float(time_us) * 1e-6) / 1e9, rel=0.05, abs=1e-3
        )
        assert busbw == algbw  # 2 ranks: 2(n-1)/n = 1
    assert "# busbw at the largest size (8388608 B): " in out.stdout
    assert "# fit t(n) = alpha + n * 2(n-1)/n / busbw" in out.stdout
    # 64 KiB of gradients at DDP's caps: one bucket, its time from the fit
    assert "# buckets (estimated): no parameters known" in out.stdout
    assert "#            65536 B " in out.stdout
    assert "# predicted all-reduce time of one step (DDP buckets):" in out.stdout
