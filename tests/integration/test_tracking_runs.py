"""Comet tracking with real processes: training runs offline, unreachable and hanging stand-in
servers on loopback, a rejected key, rank 0 alone tracking.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from core_helpers import CPU
from tracking_helpers import (
    FAKE_KEY,
    NAME,
    RECORD,
    LoopbackJson,
    archives,
    one_result,
    serve_loopback,
)

from scalescope.config import TrackingConfig
from scalescope.job.tracking import comet as tracking

REPO = Path(__file__).resolve().parents[2]

TAGS = ["world2", "nodes1", "bf16-mixed", "strong", "spiral", "sweep:s1"]

PARAMS: dict[str, Any] = {
    "world_size": 2,
    "nodes": 1,
    "devices_per_node": 2,
    "per_device_batch_size": 128,
    "global_batch_size": 256,
    "precision": "bf16-mixed",
    "scaling_mode": "strong",
    "max_epochs": 2,
    "max_steps": None,
    "workload.lr": 0.003,
    "workload.hidden_sizes": [64, 32, 16],
    "code_version": "0.1.0",
}

OTHERS = {"job_id": "4242", "node_list": "node[1-2]", "version.torch": "2.13.0"}

# Runs start_tracking like the trainer does (rank 0), logs a short run and prints what
# happened as one JSON line. Argument: the TrackingConfig fields as JSON.
DRIVER = r"""
import json, sys, time
t0 = time.monotonic()
from scalescope.config import TrackingConfig
from scalescope.job.tracking import comet as tracking
spec = json.loads(sys.argv[1])
cfg = TrackingConfig(**spec["cfg"])
out = {"comet_imported_before": "comet_ml" in sys.modules}
try:
    tracker, line = tracking.start_tracking(
        cfg, output_dir=spec["output_dir"], experiment_name=spec["name"], tags=spec["tags"],
        params=spec["params"], others=spec["others"])
except tracking.TrackingError as exc:
    print("STOPPED " + str(exc), flush=True)
    sys.exit(3)
t1 = time.monotonic()
print("LINE " + line, flush=True)
for step in (10, 20, 30):
    tracker.log_metrics({"train_loss": 1.0 / step}, step=step, epoch=0)
tracker.log_metrics({"val_loss": 0.6, "val_acc": 0.64, "epoch_time_s": 0.16,
                     "samples_per_s": 50000.0}, step=31, epoch=0)
for step in (40, 50, 60):
    tracker.log_metrics({"train_loss": 1.0 / step}, step=step, epoch=1)
tracker.log_metrics({"val_loss": 0.59, "val_acc": 0.65, "epoch_time_s": 0.14,
                     "samples_per_s": 54000.0}, step=62, epoch=1)
tracker.log_result(spec["record"])
t2 = time.monotonic()
tracker.end()
t3 = time.monotonic()
import sys as _s
sentry = None
if "sentry_sdk" in _s.modules:
    import sentry_sdk
    sentry = sentry_sdk.is_initialized()
out.update(mode=tracker.mode, info=tracker.info(), start_s=t1 - t0, end_s=t3 - t2,
           comet_imported="comet_ml" in _s.modules, sentry=sentry)
print("RESULT " + json.dumps(out), flush=True)
"""


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test's environment without any Comet setting or key (an empty HOME: no
    ~/.comet.config from `comet login`), plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COMET_", "SLURM_", "SCALESCOPE_", "MASTER_"))
    }
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    env["HOME"] = str(home)
    env.update(extra)
    return env


class Run:
    def __init__(self, proc: subprocess.CompletedProcess[str], wall_s: float) -> None:
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.wall_s = wall_s
        self.line = next(
            (ln[5:] for ln in proc.stdout.splitlines() if ln.startswith("LINE ")), None
        )
        result = next((ln[7:] for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        self.result: dict[str, Any] = json.loads(result) if result else {}

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def drive(tmp_path: Path, env: dict[str, str], timeout_s: float = 120, **cfg: Any) -> Run:
    spec = {
        "cfg": cfg,
        "output_dir": str(tmp_path / "out"),
        "name": NAME,
        "tags": TAGS,
        "params": PARAMS,
        "others": OTHERS,
        "record": RECORD,
    }
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=timeout_s,
    )
    return Run(proc, time.monotonic() - start)


def assert_no_key(run_output: str, directory: Path, key: str = FAKE_KEY) -> None:
    """The key is in no captured output and in no file under ``directory`` (zip members
    decompressed and searched too)."""
    assert key not in run_output
    assert key[8:] not in run_output  # not even partly
    needle = key.encode()
    for path in directory.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        assert needle not in data, f"key found in {path}"
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                for member in zf.namelist():
                    assert needle not in zf.read(member), f"key found in {path}:{member}"


def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def no_answer_port() -> Iterator[int]:
    """A loopback port whose connects are never answered: a listener that never accepts,
    with its accept queue filled. Linux then drops further SYNs, as a firewall would."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    fillers = []
    for _ in range(8):
        c = socket.socket()
        c.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            c.connect(("127.0.0.1", port))
        fillers.append(c)
    time.sleep(0.2)
    try:
        yield port
    finally:
        for c in fillers:
            c.close()
        server.close()


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """Connects succeed (the kernel accepts them) but no byte ever comes back."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    try:
        yield int(server.getsockname()[1])
    finally:
        server.close()


class _FakeComet(LoopbackJson):
    behaviour = "reject"
    seen: list[str] = []  # noqa: RUF012 - reset per server

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path}")
        if self.path.endswith("isAlive/ver"):
            self.reply(200, {"version": "3.50.0"})
        elif self.behaviour == "hang":
            time.sleep(60)
        else:
            self.reply(404, {"msg": "not here"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.seen.append(f"POST {self.path}")
        if self.behaviour == "hang":
            time.sleep(60)
            return
        if self.path.endswith("logger/add/run"):
            # What Comet answers for a key it does not know (sdk_error_code 90212).
            self.reply(403, {"sdk_error_code": 90212, "msg": "api key not registered"})
        else:
            self.reply(404, {"msg": "not here"})


@contextlib.contextmanager
def fake_comet(behaviour: str) -> Iterator[tuple[int, list[str]]]:
    handler = type("Handler", (_FakeComet,), {"behaviour": behaviour, "seen": []})
    with serve_loopback(handler) as port:
        yield port, handler.seen


def test_no_key_nothing_requested_is_off_in_one_line(tmp_path: Path) -> None:
    run = drive(tmp_path, _clean_env(tmp_path), mode="auto")
    assert run.returncode == 0, run.output
    assert run.result["mode"] == "off"
    assert run.line is not None and run.line.startswith("tracking: off")
    assert "COMET_API_KEY" in run.line
    assert run.stderr == ""  # nothing else said
    assert not run.result["comet_imported"]  # off costs no comet_ml import
    assert run.result["info"] == {"mode": "off", "reason": "COMET_API_KEY is not set"}
    assert not (tmp_path / "out").exists()


def test_other_ranks_never_start_an_experiment(tmp_path: Path) -> None:
    run = drive(tmp_path, _clean_env(tmp_path, SLURM_PROCID="1"), mode="offline")
    assert run.result["mode"] == "off"
    assert run.line == "tracking: off on rank 1 (rank 0 tracks the job)"
    assert not run.result["comet_imported"]
    assert archives(tmp_path) == []


def test_importing_the_module_does_not_import_comet(tmp_path: Path) -> None:
    code = "import sys, scalescope.job.tracking.comet; print('comet_ml' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_clean_env(tmp_path)
    )
    assert out.stdout.strip() == "False", out.stderr


def test_online_without_key_falls_back_to_offline_or_says_off(tmp_path: Path) -> None:
    run = drive(tmp_path / "a", _clean_env(tmp_path), mode="online")
    assert run.result["mode"] == "offline", run.output
    assert "COMET_API_KEY is not set" in run.line
    run = drive(tmp_path / "b", _clean_env(tmp_path), mode="online", fallback_offline=False)
    assert run.result["mode"] == "off"
    assert run.line.startswith("tracking: off") and "fallback_offline" in run.line


def test_offline_writes_exactly_one_archive_with_the_run_in_it(tmp_path: Path) -> None:
    run = drive(tmp_path, _clean_env(tmp_path), mode="offline", project="scalescope-test")
    assert run.returncode == 0, run.output
    out = tmp_path / "out"
    found = archives(out)
    assert len(found) == 1, found
    archive = found[0]
    assert archive.parent == out / "comet"

    # One line at start-up, with the upload command for this very archive; nothing else.
    assert run.line == (
        f"tracking: comet offline (tracking.mode=offline); experiment {NAME} in project "
        f"scalescope-test; after the run: comet upload {archive}"
    )
    assert run.stderr == "", run.stderr
    info = run.result["info"]
    assert info["mode"] == "offline"
    assert info["archive"] == str(archive)
    assert info["upload_command"] == f"comet upload {archive}"
    assert info["experiment_name"] == NAME
    assert info["ended_cleanly"] is True
    assert "error" not in info
    assert run.result["sentry"] in (None, False)  # comet's crash reporting stays off

    data = tracking.read_offline_archive(archive)
    assert data["problems"] == []
    assert data["project"] == "scalescope-test"
    assert data["name"] == NAME
    assert sorted(data["tags"]) == sorted(TAGS)
    assert data["parameters"] == PARAMS
    assert data["experiment"]["offline_id"] == info["experiment_key"]

    loss = data["metrics"]["train_loss"]
    assert [m["step"] for m in loss] == [10, 20, 30, 40, 50, 60]
    assert [m["epoch"] for m in loss] == [0, 0, 0, 1, 1, 1]
    assert loss[0]["value"] == pytest.approx(0.1)
    for name in ("val_loss", "val_acc", "epoch_time_s", "samples_per_s"):
        series = data["metrics"][name]
        assert [(m["step"], m["epoch"]) for m in series] == [(31, 0), (62, 1)], name

    # The result record: scalars as result/<field> at the last step, per-rank lists as
    # max/min, None and NaN left out; identity, nodes and versions as others.
    result_metrics = {k: v for k, v in data["metrics"].items() if k.startswith("result/")}
    assert set(result_metrics) == {
        "result/steps",
        "result/epochs",
        "result/setup_time_s",
        "result/train_time_s",
        "result/mean_epoch_time_s",
        "result/mean_epoch_time_excl_first_s",
        "result/samples_per_s",
        "result/samples_per_s_per_device",
        "result/peak_host_rss_gib_max",
        "result/peak_host_rss_gib_min",
    }
    assert result_metrics["result/samples_per_s"] == [{"step": 62, "epoch": 2, "value": 52000.0}]
    others = data["others"]
    assert others["job_id"] == "4242"
    assert others["node_list"] == "node[1-2]"
    assert others["node_names"] == "node1,node2"
    assert others["version.lightning"] == "2.6.6"
    assert others["tracking_mode"] == "offline"
    assert others["Name"] == NAME

    # comet's own system metrics stay on (CPU/RAM here; GPU ones on a GPU node).
    assert any(k.startswith("sys.") for k in data["metrics"])
    assert data["system_details"] is not None
    print(f"\noffline: start {run.result['start_s']:.2f} s, end {run.result['end_s']:.2f} s")


def test_offline_dir_setting_is_where_the_archive_goes(tmp_path: Path) -> None:
    target = tmp_path / "archives"
    run = drive(tmp_path, _clean_env(tmp_path), mode="offline", offline_dir=str(target))
    assert [p.parent for p in archives(tmp_path)] == [target]
    assert run.result["info"]["archive"].startswith(str(target))


def test_comet_start_online_false_turns_auto_into_offline(tmp_path: Path) -> None:
    run = drive(tmp_path, _clean_env(tmp_path, COMET_API_KEY=FAKE_KEY, COMET_START_ONLINE="false"))
    assert run.result["mode"] == "offline", run.output
    assert len(archives(tmp_path / "out")) == 1
    assert_no_key(run.output, tmp_path)


@pytest.mark.parametrize("kind", ["refused", "no-answer", "silent"])
def test_unreachable_server_falls_back_offline_within_the_bound(tmp_path: Path, kind: str) -> None:
    connect_timeout_s = 2.0
    with contextlib.ExitStack() as stack:
        if kind == "refused":
            port = closed_port()
        elif kind == "no-answer":
            port = stack.enter_context(no_answer_port())
        else:
            port = stack.enter_context(silent_port())
        env = _clean_env(
            tmp_path, COMET_API_KEY=FAKE_KEY, COMET_URL_OVERRIDE=f"http://127.0.0.1:{port}/"
        )
        run = drive(tmp_path, env, mode="auto", connect_timeout_s=connect_timeout_s)
    assert run.returncode == 0, run.output
    assert run.result["mode"] == "offline", run.output
    assert "unreachable" in run.line and "offline archive instead" in run.line
    assert "comet upload" in run.line
    assert len(archives(tmp_path / "out")) == 1
    assert run.result["info"]["ended_cleanly"] is True
    assert_no_key(run.output, tmp_path)
    # Start-up includes importing comet_ml (~1 s); the network part is bounded by
    # connect_timeout_s. Without the bounds comet waits 30 s (refused) to minutes.
    assert run.result["start_s"] < connect_timeout_s + 15
    print(
        f"\n{kind}: start_tracking {run.result['start_s']:.2f} s "
        f"(connect_timeout_s={connect_timeout_s}), end {run.result['end_s']:.2f} s; {run.line}"
    )


def test_unreachable_without_fallback_is_off(tmp_path: Path) -> None:
    env = _clean_env(
        tmp_path, COMET_API_KEY=FAKE_KEY, COMET_URL_OVERRIDE=f"http://127.0.0.1:{closed_port()}/"
    )
    run = drive(tmp_path, env, mode="online", fallback_offline=False, connect_timeout_s=1.0)
    assert run.result["mode"] == "off"
    assert run.line.startswith("tracking: off") and "unreachable" in run.line
    assert archives(tmp_path) == []
    assert_no_key(run.output, tmp_path)


def test_rejected_key_is_one_error_line_and_training_continues(tmp_path: Path) -> None:
    with fake_comet("reject") as (port, seen):
        env = _clean_env(
            tmp_path, COMET_API_KEY=FAKE_KEY, COMET_URL_OVERRIDE=f"http://127.0.0.1:{port}/"
        )
        run = drive(tmp_path, env, mode="auto", connect_timeout_s=2.0)
    assert any(s.endswith("logger/add/run") for s in seen), seen  # it really asked
    assert run.returncode == 0, run.output
    assert run.result["mode"] == "off"
    assert run.line.startswith("tracking: error:") and "rejected the API key" in run.line
    assert "on_rejected_key=stop" in run.line
    # comet's own message for this prints the key in clear: it is dropped, ours is the one
    assert run.stderr == "", run.stderr
    assert archives(tmp_path) == []
    assert_no_key(run.output, tmp_path)


def test_rejected_key_with_stop_stops_before_training(tmp_path: Path) -> None:
    with fake_comet("reject") as (port, _):
        env = _clean_env(
            tmp_path, COMET_API_KEY=FAKE_KEY, COMET_URL_OVERRIDE=f"http://127.0.0.1:{port}/"
        )
        run = drive(tmp_path, env, mode="auto", on_rejected_key="stop", connect_timeout_s=2.0)
    assert run.returncode == 3, run.output
    assert "STOPPED tracking: the Comet server" in run.stdout
    assert_no_key(run.output, tmp_path)


def test_server_that_hangs_after_answering_is_bounded(tmp_path: Path) -> None:
    """The pre-flight request is answered, then every request hangs: creating the
    experiment is abandoned after create_timeout_s and the run goes offline."""
    cfg = TrackingConfig(connect_timeout_s=1.0)
    with fake_comet("hang") as (port, _):
        env = _clean_env(
            tmp_path, COMET_API_KEY=FAKE_KEY, COMET_URL_OVERRIDE=f"http://127.0.0.1:{port}/"
        )
        run = drive(tmp_path, env, mode="auto", connect_timeout_s=1.0, end_timeout_s=5.0)
    assert run.returncode == 0, run.output
    assert run.result["mode"] == "offline", run.output
    assert "did not create the experiment" in run.line
    assert len(archives(tmp_path / "out")) == 1
    assert run.result["start_s"] < tracking.create_timeout_s(cfg) + 10
    assert_no_key(run.output, tmp_path)
    print(
        f"\nhang after pre-flight: start_tracking {run.result['start_s']:.2f} s, "
        f"process {run.wall_s:.2f} s"
    )


def _train(tmp_path: Path, env: dict[str, str], *overrides: str, timeout_s: float = 300) -> Run:
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalescope.train",
            "--config",
            str(REPO / "configs" / "spiral.yaml"),
            CPU,
            "trainer.max_epochs=2",
            f"output_dir={tmp_path / 'out'}",
            *overrides,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=timeout_s,
    )
    return Run(proc, time.monotonic() - start)


@pytest.fixture(scope="module")
def offline_two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    """One 2-process run with tracking offline, and its folder."""
    folder = tmp_path_factory.mktemp("offline-two")
    return _train(folder, _clean_env(folder), "trainer.devices=2", "tracking.mode=offline"), folder


def test_two_process_run_offline_writes_one_archive(offline_two: tuple[Run, Path]) -> None:
    run, folder = offline_two
    assert run.returncode == 0, run.output[-3000:]
    out = folder / "out"
    result = one_result(out)
    found = archives(out)
    assert len(found) == 1, found  # rank 0 only
    assert result.tracking["mode"] == "offline"
    assert result.tracking["archive"] == str(found[0])
    assert sum("scalescope: tracking: comet offline" in ln for ln in run.stdout.splitlines()) == 1

    data = tracking.read_offline_archive(found[0])
    assert data["problems"] == []
    assert data["name"] == result.tracking["experiment_name"]
    assert data["name"].startswith("spiral-1n2d-")
    assert data["project"] == "scalescope-spiral"
    assert {"world2", "nodes1", "32", "strong"} <= set(data["tags"])
    assert data["parameters"]["world_size"] == 2
    assert data["parameters"]["global_batch_size"] == result.identity.global_batch_size
    steps = [m["step"] for m in data["metrics"]["train_loss"]]
    assert steps == sorted(steps) and len(steps) >= 2 and steps[-1] <= result.steps
    assert [m["epoch"] for m in data["metrics"]["val_loss"]] == [0, 1]
    assert len(data["metrics"]["samples_per_s"]) == 2
    assert data["metrics"]["result/train_time_s"][0]["value"] == pytest.approx(result.train_time_s)
    assert data["others"]["job_id"] == result.identity.job_id
    assert data["others"]["version.torch"] == result.versions["torch"]


def test_fake_key_and_unanswered_server_training_completes(
    tmp_path: Path, offline_two: tuple[Run, Path]
) -> None:
    """Online asked for (a key is set) but the server never answers: the start line says
    so after connect_timeout_s, training runs, the record is complete, the key is nowhere,
    and the offline archive has the same parameter keys as any other run."""
    with no_answer_port() as port:
        env = _clean_env(
            tmp_path, COMET_API_KEY=FAKE_KEY, COMET_URL_OVERRIDE=f"http://127.0.0.1:{port}/"
        )
        run = _train(tmp_path, env, "trainer.devices=1", "tracking.connect_timeout_s=3")
    assert run.returncode == 0, run.output[-3000:]
    out = tmp_path / "out"
    result = one_result(out)
    assert result.epochs == 2 and result.train_time_s > 0 and result.samples_per_s > 0
    assert result.tracking["mode"] == "offline"
    assert "unreachable: no answer after 3.0 s" in result.tracking["reason"]
    found = archives(out)
    assert len(found) == 1
    assert_no_key(run.output, tmp_path)
    data = tracking.read_offline_archive(found[0])
    params_1 = sorted(data["parameters"])
    assert data["parameters"]["world_size"] == 1
    assert {"world_size", "nodes", "devices_per_node", "global_batch_size"} <= set(params_1)

    # Same parameter keys as a 2-process run: runs compare column by column.
    other, folder = offline_two
    assert other.returncode == 0, other.output[-3000:]
    (found_2,) = archives(folder / "out")
    assert sorted(tracking.read_offline_archive(found_2)["parameters"]) == params_1
    print(
        f"\nunanswered server, 1 process: job {run.wall_s:.1f} s wall, "
        f"setup {result.setup_time_s:.1f} s; {result.tracking['reason']}"
    )
