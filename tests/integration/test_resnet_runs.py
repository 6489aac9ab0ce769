"""The resnet workload with real processes: image shards built by concurrent processes, training at
1 and 2 processes and with loader workers, scalescope bench-data, one-line errors from the
command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from core_helpers import REPO, TrainRun, clean_env, run_train
from resnet_helpers import (
    RESNET,
    _assert_one_line,
    _params,
)

from scalescope.workloads.resnet import image_spec, make_loader
from scalescope.workloads.shards import ImageSetSpec, open_shards


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (("workload.num_workers=-1",), ("workload.num_workers", ">= 0")),
        (("workload.prefetch_factor=4",), ("workload.prefetch_factor", "num_workers > 0")),
        (("workload.persistent_workers=true",), ("workload.persistent_workers", "num_workers")),
        (("workload.depths=[1]",), ("workload.depths",)),
    ],
)
def test_bad_loader_settings_are_one_line(
    tmp_path: Path, args: tuple[str, ...], parts: tuple[str, ...]
) -> None:
    out, cache = tmp_path / "out", tmp_path / "cache"
    run = run_train(tmp_path, *RESNET, f"workload.cache_dir={cache}", *args, output_dir=out)
    _assert_one_line(run, *parts)
    assert not out.exists() and not cache.exists()


def test_cache_dir_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    out = tmp_path / "out"
    run = run_train(tmp_path, *RESNET, f"workload.cache_dir={blocker}/cache", output_dir=out)
    _assert_one_line(run, "workload.cache_dir", "not a folder")
    assert not out.exists()


_RACER = """
import hashlib, json, sys
from scalescope.workloads.shards import ImageSetSpec, open_shards
spec = ImageSetSpec(**json.loads(sys.argv[2]))
s = open_shards(spec, sys.argv[1])
h = hashlib.sha256()
for split in ("train", "val"):
    for a in s.arrays[split]:
        h.update(a.tobytes())
print(json.dumps({"built": s.built, "digest": h.hexdigest()}))
"""


def test_concurrent_processes_build_the_set_exactly_once(tmp_path: Path) -> None:
    spec = ImageSetSpec(
        image_size=24, num_classes=5, train_samples=6000, val_samples=1000, noise=0.5, data_seed=9
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(tmp_path), json.dumps(spec.__dict__)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env({"PYTHONPATH": f"{REPO / 'src'}"}),
        )
        for _ in range(4)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["built"] for r in results) == 1
    assert len({r["digest"] for r in results}) == 1
    assert len(list(tmp_path.glob("images-*/"))) == 1
    # no temporary folder left behind (the hidden swap lock file stays, by design)
    assert not [p for p in tmp_path.glob(".images-*") if p.is_dir()]


def _all_batches(loader: object) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(x.clone(), y.clone()) for x, y in loader]  # type: ignore[attr-defined]


def test_augmentation_is_the_same_with_0_and_2_workers(tmp_path: Path) -> None:
    params = _params(tmp_path)
    folder = open_shards(image_spec(params), params.resolved_cache_dir).folder
    common = {"batch_size": 128, "seed": 5}
    zero = make_loader(params, folder, "train", num_workers=0, **common)
    two = make_loader(params, folder, "train", num_workers=2, persistent_workers=True, **common)
    epoch0, epoch1 = _all_batches(zero), _all_batches(zero)
    w0, w1 = _all_batches(two), _all_batches(two)
    assert len(epoch0) == params.train_samples // 128
    for (xa, ya), (xb, yb) in zip(epoch0 + epoch1, w0 + w1, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(epoch0[0][0], epoch1[0][0])  # a new epoch, a new draw


def _finished(run: TrainRun):  # type: ignore[no-untyped-def]
    assert run.returncode == 0, run.describe()
    (result,) = run.results()
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrainRun]:
    root = tmp_path_factory.mktemp("resnet")
    cache = f"workload.cache_dir={root / 'cache'}"
    out = root / "out"
    return {
        "w0": run_train(root, *RESNET, cache, output_dir=out),
        "w2": run_train(
            root,
            *RESNET,
            cache,
            "workload.num_workers=2",
            "workload.prefetch_factor=4",
            output_dir=out,
        ),
        "p2": run_train(root, *RESNET, cache, "trainer.devices=2", output_dir=out),
    }


def test_one_process_run_records_the_loader_settings(runs: dict[str, TrainRun]) -> None:
    r = _finished(runs["w2"])
    assert r.identity.workload == "resnet"
    w = r.config["workload"]
    assert (w["num_workers"], w["prefetch_factor"], w["persistent_workers"]) == (2, 4, "auto")
    assert w["pin_memory"] == "auto" and w["widths"] == [8, 16]
    assert r.steps_per_epoch == 2048 // 64 and r.steps == 2 * 32
    assert r.model_flops_per_sample and r.model_flops_per_sample > 0
    assert r.val_samples == 512 and r.val_acc_final is not None
    assert r.val_acc_final > 0.4  # four classes: well above chance after two epochs


def test_0_and_2_workers_train_identically(runs: dict[str, TrainRun]) -> None:
    """The augmentation is decided by the sampler, not by the worker: same bytes, same run."""
    a, b = _finished(runs["w0"]), _finished(runs["w2"])
    assert a.val_loss_final == b.val_loss_final
    assert a.val_acc_final == b.val_acc_final


def test_two_processes_follow_the_one_process_trajectory(runs: dict[str, TrainRun]) -> None:
    """Same global batches, same augmentation, GroupNorm: the same trajectory up to rounding
    (the all-reduced mean of two half-batch gradients is not bit-equal to the full batch's;
    Adam carries that through 64 steps to about 1e-4 relative)."""
    one, two = _finished(runs["w0"]), _finished(runs["p2"])
    assert two.identity.world_size == 2 and two.identity.per_device_batch_size == 32
    assert two.steps == one.steps
    assert two.val_loss_final == pytest.approx(one.val_loss_final, rel=2e-3)
    assert two.val_acc_final == pytest.approx(one.val_acc_final, abs=4 / 512)


def _cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scalescope.cli", *args],
        cwd=cwd,
        env=clean_env(env or {}),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_bench_data_prints_its_table_and_writes_csv_and_json(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    proc = _cli(
        tmp_path,
        "bench-data",
        "--config",
        str(REPO / "configs" / "resnet.yaml"),
        "--workers",
        "0,2",
        "--prefetch",
        "2",
        "--batch-size",
        "32,64",
        "--batches",
        "12",
        "--out",
        str(out),
        f"workload.cache_dir={tmp_path / 'cache'}",
        env={"COLUMNS": "120"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "loader samples/s" in proc.stdout and "keeps up" in proc.stdout
    # the table fits 120 columns: its header and every setting's row on one line each
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120, proc.stdout
    assert any("loader samples/s" in line and "keeps up" in line for line in lines)
    assert sum(1 for line in lines if line.rstrip().endswith(("yes", "no"))) == 4, proc.stdout
    data = json.loads((out / "bench-data.json").read_text())
    rows = data["rows"]
    assert [(r["workers"], r["prefetch_factor"], r["batch_size"]) for r in rows] == [
        (0, None, 32),
        (2, 2, 32),
        (0, None, 64),
        (2, 2, 64),
    ]
    for r in rows:
        assert r["samples_per_s"] > 0 and r["step_samples_per_s"] > 0
        assert r["batch_p50_s"] <= r["batch_p95_s"]
        assert r["keeps_up"] == (r["samples_per_s"] >= r["step_samples_per_s"])
        assert r["loader_cpu_cores"] >= 0
    csv_lines = (out / "bench-data.csv").read_text().splitlines()
    assert csv_lines[0].startswith("workers,prefetch_factor,batch_size,")
    assert len(csv_lines) == 1 + len(rows)


def test_bench_data_refuses_a_workload_without_a_loader(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "bench-data", "--config", str(REPO / "configs" / "spiral.yaml"))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "workload.name" in lines[0] and "spiral" in lines[0]
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_read_only_cache_dir_is_one_line(tmp_path: Path) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; the not-a-folder case covers root")
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    run = run_train(tmp_path, *RESNET, f"workload.cache_dir={ro}/cache", output_dir=tmp_path / "o")
    _assert_one_line(run, "workload.cache_dir", "not writable")
