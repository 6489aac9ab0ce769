"""``python -m scalescope.train`` end to end: real processes, real Lightning, tiny runs.

The training runs are marked ``slow`` (a few seconds each on two CPU cores, more when the
cores are busy). Error paths and ``--help`` answer before torch is imported and are fast.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from core_helpers import (
    TINY,
    TrainRun,
    clean_env,
    run_train,
    slow_exit_env,
    two_rank_run,
)

from scalescope.job.clocks.timing import READY_LINE
from scalescope.job.diagnosis.hardware import peak_flops
from scalescope.record import ResultRecord, read_result_json


def _finished(run: object) -> ResultRecord:
    assert isinstance(run, TrainRun)
    assert run.returncode == 0, run.describe()
    results = run.results()
    assert len(results) == 1, f"expected one result line, got {len(results)}\n{run.describe()}"
    return results[0]


# --- one process ----------------------------------------------------------------------------------


def test_one_process_prints_one_start_and_one_result(spiral_runs: dict[str, object]) -> None:
    run = spiral_runs["one"]
    result = _finished(run)
    assert isinstance(run, TrainRun)
    starts = run.starts()
    assert len(starts) == 1
    assert starts[0].identity == result.identity
    assert "Traceback" not in run.combined


def test_result_json_equals_the_printed_record(spiral_runs: dict[str, object]) -> None:
    result = _finished(spiral_runs["one"])
    run_dir = Path(result.identity.run_dir)
    assert run_dir.parent == Path(str(spiral_runs["out"])) / "runs" / "spiral"
    assert read_result_json(run_dir / "result.json") == result
    assert sorted(p.name for p in run_dir.iterdir()) == ["result.json"]


def test_one_process_record_is_consistent(spiral_runs: dict[str, object]) -> None:
    r = _finished(spiral_runs["one"])
    ident = r.identity
    assert (ident.launcher, ident.accelerator, ident.precision) == ("local", "cpu", "32")
    assert (ident.nodes, ident.devices_per_node, ident.world_size) == (1, 1, 1)
    assert (ident.per_device_batch_size, ident.global_batch_size) == (64, 64)
    assert ident.job_id == spiral_runs["job_id"] and ident.run_id == f"{spiral_runs['job_id']}.r0"
    assert ident.scaling_mode == "strong" and ident.config_name == "spiral"

    assert (r.train_samples, r.val_samples) == (1600, 400)
    assert r.threads_per_process == 1  # a CPU device is one core
    assert r.epochs == 2
    assert r.steps_per_epoch == 1600 // 64
    assert r.steps == r.epochs * r.steps_per_epoch
    assert len(r.epoch_times_s) == r.epochs
    assert all(t > 0 for t in r.epoch_times_s)
    assert math.isclose(sum(r.epoch_times_s), r.train_time_s, rel_tol=1e-9)
    assert math.isclose(r.samples_per_s * r.train_time_s, r.steps * 64, rel_tol=1e-9)
    assert math.isclose(r.samples_per_s_per_device, r.samples_per_s, rel_tol=1e-12)
    assert math.isclose(r.mean_epoch_time_s, sum(r.epoch_times_s) / 2, rel_tol=1e-9)
    assert r.mean_epoch_time_excl_first_s == r.epoch_times_s[1]
    # Steady state: warm-up auto = the first epoch (25 steps < the cap).
    assert ident.cluster == "local" and ident.repeat_index is None and ident.run_uuid
    assert r.warmup_steps == r.steps_per_epoch == 25
    assert r.steady_steps == r.steps - 25
    assert r.steady_time_s is not None and 0 < r.steady_time_s < r.train_time_s
    # The steady time is epoch 2 plus what epoch 1 ran after its last (warm-up) step, its
    # end-of-epoch work (validation excluded from both): at least epoch 2, less than the two
    # epochs. How much more than epoch 2 is the machine's business: beside a busy process
    # that tail was 5 ms of a 50 ms epoch.
    assert r.epoch_times_s[1] <= r.steady_time_s + 1e-9
    assert r.steady_time_s < sum(r.epoch_times_s)
    assert r.steady_samples_per_s == pytest.approx(r.steady_steps * 64 / r.steady_time_s)
    assert r.steady_samples_per_s_per_device == r.steady_samples_per_s
    assert r.steady_mfu is None
    if r.step_time_s is not None:
        assert r.predicted_epoch_time_s == pytest.approx(r.step_time_s * r.steps_per_epoch)

    assert r.setup_time_s > 0
    assert r.job_time_s >= r.train_time_s
    assert r.job_time_s >= r.setup_time_s
    assert r.val_time_s >= 0
    _check_timed_interval(r)

    assert r.val_loss_final is not None and math.isfinite(r.val_loss_final)
    assert r.val_acc_final is not None and 0 <= r.val_acc_final <= 1
    assert r.val_loss_best is not None and r.val_loss_best <= r.val_loss_final
    assert r.val_acc_best is not None and r.val_acc_best >= r.val_acc_final

    assert r.peak_mem_gib is None and r.mfu is None  # CPU: no device memory, no MFU
    assert r.peak_flops_per_s is None and r.peak_flops_entry is None
    assert len(r.peak_host_rss_gib) == 1 and r.peak_host_rss_gib[0] > 0
    assert len(r.node_names) == 1
    assert r.model_flops_per_sample == 6 * (2 * 64 + 64 * 32 + 32 * 16 + 16 * 2)

    assert r.config["trainer"]["batch_size"] == 64
    assert r.config["trainer"]["max_epochs"] == 2
    assert r.config["workload"]["num_samples"] == 2000
    assert r.config["workload"]["hidden_sizes"] == [64, 32, 16]  # resolved defaults included
    assert r.versions["torch"] and r.versions["lightning"] and r.versions["python"]
    assert r.tracking.get("mode") == "off"


@pytest.mark.parametrize(
    ("warmup", "steady_steps"), [("7", 50 - 8), ("0", 50), ("60", None)], ids=str
)
def test_warmup_steps_setting(tmp_path: Path, warmup: str, steady_steps: int | None) -> None:
    # steps_per_call 8: the warm-up ends at the first call boundary at or after its target
    run = run_train(tmp_path, *TINY, f"trainer.warmup_steps={warmup}", output_dir=tmp_path)
    r = _finished(run)
    assert r.steps == 50
    assert r.steady_steps == steady_steps
    if steady_steps is None:  # the warm-up covered all training: no steady figures
        assert r.warmup_steps == 50 and r.steady_time_s is None
        assert r.steady_samples_per_s is None
        assert "no steady state" in run.combined
    else:
        assert r.warmup_steps == 50 - steady_steps
        assert r.steady_time_s is not None and r.steady_time_s > 0
        if warmup == "0":
            assert r.steady_time_s == pytest.approx(r.train_time_s, rel=1e-6)


def test_negative_warmup_is_one_line(tmp_path: Path) -> None:
    run = run_train(tmp_path, *TINY, "trainer.warmup_steps=-1", output_dir=tmp_path)
    assert run.returncode == 2
    assert "trainer.warmup_steps" in run.stderr and "must be >= 0" in run.stderr


def test_training_writes_nothing_outside_the_output_dir(spiral_runs: dict[str, object]) -> None:
    _finished(spiral_runs["one"])
    _finished(spiral_runs["two"])
    assert list(Path(str(spiral_runs["cwd"])).iterdir()) == []


# --- two processes --------------------------------------------------------------------------------


def test_two_processes_report_world_two_once(spiral_runs: dict[str, object]) -> None:
    run = spiral_runs["two"]
    r = _finished(run)
    assert isinstance(run, TrainRun)
    assert len(run.starts()) == 1  # rank 1 prints no events
    assert (r.identity.world_size, r.identity.devices_per_node, r.identity.nodes) == (2, 2, 1)
    assert (r.identity.per_device_batch_size, r.identity.global_batch_size) == (32, 64)
    assert len(r.node_names) == 2 and len(r.peak_host_rss_gib) == 2
    assert r.steps_per_epoch == 1600 // 64
    assert r.steps == r.epochs * r.steps_per_epoch == 50
    assert math.isclose(r.samples_per_s_per_device * 2, r.samples_per_s, rel_tol=1e-12)
    assert math.isclose(r.samples_per_s * r.train_time_s, r.steps * 64, rel_tol=1e-9)
    assert r.job_time_s >= r.train_time_s
    assert r.val_samples == 400
    _check_timed_interval(r, one_rank=False)
    (machine,) = r.host_load or [None]  # both ranks on this one machine
    assert machine is not None and machine["nodes"] == sorted(set(r.node_names))
    assert machine["cores"] >= 1 and machine["own_cpu_s"] > 0
    assert machine["wall_s"] == pytest.approx(r.train_end_unix - r.train_start_unix, abs=0.5)
    assert machine["other_cpu_s"] == pytest.approx(
        max(0.0, machine["busy_cpu_s"] - machine["own_cpu_s"])
    )


def _check_timed_interval(r: ResultRecord, one_rank: bool = True) -> None:
    """The wall-clock bounds of the timed interval (what the summary finds overlaps in): from
    train start to the end of training, the very clocks setup and job time come from. One
    rank's training and validation lie inside them; over ranks, each time is its slowest
    rank's, which may have left the start barrier a moment earlier than the last."""
    assert r.train_start_unix is not None and r.train_end_unix is not None
    timed = r.train_end_unix - r.train_start_unix
    assert timed == pytest.approx(r.job_time_s - r.setup_time_s, abs=1e-6)
    if one_rank:
        assert timed >= r.train_time_s + r.val_time_s - 1e-6
    started = datetime.fromisoformat(r.identity.started_at).timestamp()
    assert started <= r.train_start_unix <= started + r.setup_time_s + 1


BUSY_LOOP = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass"


def test_a_run_beside_busy_loops_records_the_cores_they_took(tmp_path: Path) -> None:
    """A busy-looping process on each core a one-process run may use: the record says other
    programs took a share of those cores while it trained (each loop gets about half its
    core against the run's threads; other load on the machine only adds), that the run
    counted its own CPU as its own, and that its threads waited for a core."""
    cores = sorted(os.sched_getaffinity(0))

    def pin() -> None:
        os.sched_setaffinity(0, cores)

    loops = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], preexec_fn=pin) for _ in cores]
    try:
        long = ("workload.num_samples=60000", "trainer.max_epochs=5")  # 2-3 s of training
        run = run_train(tmp_path, *TINY, *long, output_dir=tmp_path)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    r = _finished(run)
    (machine,) = r.host_load or [None]
    assert machine is not None and machine["cores"] == len(cores)
    assert machine["wall_s"] >= 1.0, machine  # long enough for 10 ms counters
    share = machine["other_cpu_s"] / (machine["cores"] * machine["wall_s"])
    assert share >= 0.3, machine
    assert machine["own_cpu_s"] >= 0.1 * machine["wall_s"], machine  # not filed as other
    assert machine["own_wait_s"] is None or machine["own_wait_s"] > 0.0, machine


def test_two_processes_follow_the_one_process_trajectory(spiral_runs: dict[str, object]) -> None:
    """Strong-scaling invariance end to end: same global batches, same validation loss."""
    one = _finished(spiral_runs["one"])
    two = _finished(spiral_runs["two"])
    assert one.val_loss_final is not None and two.val_loss_final is not None
    assert two.val_loss_final == pytest.approx(one.val_loss_final, abs=1e-4)
    assert two.val_acc_final == pytest.approx(one.val_acc_final, abs=2 / 400)
    assert two.steps == one.steps


def test_same_job_id_never_reuses_a_run_dir(spiral_runs: dict[str, object]) -> None:
    one = _finished(spiral_runs["one"])
    two = _finished(spiral_runs["two"])
    assert one.identity.run_id == two.identity.run_id == f"{spiral_runs['job_id']}.r0"
    dir_one, dir_two = Path(one.identity.run_dir), Path(two.identity.run_dir)
    assert dir_one != dir_two
    assert dir_two.name == f"{spiral_runs['job_id']}.r0-2"
    assert read_result_json(dir_one / "result.json") == one
    assert read_result_json(dir_two / "result.json") == two
    assert (dir_one / "result.json").read_bytes() == spiral_runs["one_result_json"]


# --- errors answer before anything starts ---------------------------------------------------------


def _assert_one_error_line(run: TrainRun, *parts: str) -> None:
    assert run.returncode == 2, run.describe()
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.describe()
    assert lines[0].startswith("scalescope train: error: "), run.describe()
    for part in parts:
        assert part in lines[0], run.describe()
    assert run.events() == []


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (("trainer.batch_size=-1",), ("trainer.batch_size", "> 0")),
        (("trainer.max_epoch=3",), ("unknown key trainer.max_epoch", "max_epochs")),
        (("trainer.precision=16",), ("trainer.precision",)),
        (("trainer.max_epochs",), ("key=value",)),
        (("--config", "no/such.yaml"), ("not found", "no/such.yaml")),
        (("trainer.num_nodes=2",), ("trainer.num_nodes=2", "Slurm")),
    ],
)
def test_bad_input_is_one_line_and_creates_nothing(
    tmp_path: Path, args: tuple[str, ...], parts: tuple[str, ...]
) -> None:
    out = tmp_path / "out"
    run = run_train(tmp_path, *args, output_dir=out)
    _assert_one_error_line(run, *parts)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_batch_that_does_not_split_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = run_train(tmp_path, "trainer.batch_size=3", "trainer.devices=2", output_dir=out)
    _assert_one_error_line(run, "trainer.batch_size", "3", "2")
    assert not out.exists()


def test_gpu_requested_without_cuda_is_one_line(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU; the no-GPU error cannot happen here")
    out = tmp_path / "out"
    run = run_train(tmp_path, *TINY, "trainer.accelerator=gpu", output_dir=out)
    _assert_one_error_line(run, "trainer.accelerator=gpu", "CUDA")
    assert not out.exists()


def test_help_works_without_importing_torch(tmp_path: Path) -> None:
    probe = (
        "import json, runpy, sys\n"
        "sys.argv = ['scalescope.train', '--help']\n"
        "try:\n"
        "    runpy.run_module('scalescope.train', run_name='__main__')\n"
        "    code = None\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "heavy = ('torch', 'lightning', 'comet_ml', 'pandas')\n"
        "heavy = sorted(m for m in heavy if m in sys.modules)\n"
        "print(json.dumps({'code': code, 'heavy': heavy}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    *help_lines, last = proc.stdout.splitlines()
    assert json.loads(last) == {"code": 0, "heavy": []}
    help_text = "\n".join(help_lines)
    assert "--config" in help_text and "key=value" in help_text


def test_help_through_python_dash_m(tmp_path: Path) -> None:
    run = run_train(tmp_path, module_args=("--help",))
    assert run.returncode == 0, run.describe()
    assert "usage:" in run.stdout and "--config" in run.stdout
    assert run.stderr == ""


# --- GPU ------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_bf16_on_cuda_reports_memory_and_mfu(tmp_path: Path) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    run = run_train(
        tmp_path,
        *TINY,
        "trainer.accelerator=gpu",
        "trainer.precision=bf16-mixed",
        "trainer.devices=1",
        output_dir=tmp_path / "out",
    )
    r = _finished(run)
    assert (r.identity.accelerator, r.identity.precision) == ("gpu", "bf16-mixed")
    assert r.peak_mem_gib is not None and len(r.peak_mem_gib) == 1
    assert r.peak_mem_gib[0] > 0
    assert r.versions["cuda"]
    peak = peak_flops(r.device_name, "bf16-mixed")
    assert r.peak_flops_per_s == peak
    if peak is None:
        assert r.mfu is None, f"{r.device_name} has no listed peak, so no MFU"
        assert r.peak_flops_entry is None
    else:
        assert r.peak_flops_entry and "Datasheet" in r.peak_flops_entry
        assert r.mfu is not None and r.mfu > 0
        assert r.model_flops_per_sample is not None
        expected = r.model_flops_per_sample * r.samples_per_s_per_device / peak
        assert r.mfu == pytest.approx(expected, rel=1e-9)


def test_grouped_steps_train_exactly_like_single_steps(
    spiral_runs: dict[str, object], tmp_path: Path
) -> None:
    """trainer.steps_per_call changes Lightning's call pattern, never the training."""
    grouped = _finished(spiral_runs["one"])
    assert grouped.config["trainer"]["steps_per_call"] > 1
    single = _finished(run_train(tmp_path, *TINY, "trainer.steps_per_call=1", output_dir=tmp_path))
    assert single.steps == grouped.steps
    assert single.val_loss_final == pytest.approx(grouped.val_loss_final, abs=1e-6)


def test_max_steps_is_exact_inside_a_group(tmp_path: Path) -> None:
    r = _finished(
        run_train(
            tmp_path, *TINY, "trainer.max_steps=7", "trainer.steps_per_call=5", output_dir=tmp_path
        )
    )
    assert r.steps == 7


def test_ctrl_c_stops_every_rank_and_writes_no_result(tmp_path: Path) -> None:
    """Ctrl-C in a terminal signals the whole foreground group: both ranks must go,
    the CLI says so in one line with exit 130, and no result.json is left behind.

    Rank 0's exit is made slower than Lightning's child observer polls (tests/slow_exit):
    before rank 0 took the children over, the observer SIGKILLed it there (exit -9), which
    a busy CI machine hit once in a few runs and this makes certain.
    """
    # settle: into fit, the second rank up and training
    with two_rank_run(
        tmp_path, "trainer.max_epochs=100000", settle_s=3, ready=READY_LINE, env=slow_exit_env(7)
    ) as (proc, log):
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=60)
    text = log.read_text()
    assert rc == 130, text
    assert text.rstrip().endswith("scalescope train: interrupted"), text
    assert not list(tmp_path.rglob("result.json"))
    deadline = time.monotonic() + 10
    while _live_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _live_members(proc.pid) == []


def _live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that still run (zombies left for a non-reaping init
    are dead: they hold no resources and run no code)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            live.append(int(stat.parent.name))
    return live


def test_a_hung_rank_fails_the_other_within_the_collective_timeout(tmp_path: Path) -> None:
    """Rank 1 stopped (SIGSTOP) mid-training: rank 0's next all-reduce gives up after
    trainer.collective_timeout_s, and the error says so with the configured value."""
    import psutil

    args = ("trainer.max_epochs=100000", "faults.step_sleep_s=0.2")
    timeout = ("trainer.collective_timeout_s=7", "tracking.mode='off'")
    # Training under way on both ranks (past the rendezvous, whose own timeout reads
    # differently) before rank 1 stops.
    with two_rank_run(tmp_path, *args, *timeout, settle_s=3, ready=READY_LINE) as (proc, log):
        (child,) = psutil.Process(proc.pid).children()
        child.suspend()
        rc = proc.wait(timeout=120)  # far below the 30 min default
    text = log.read_text()
    assert rc != 0, text[-3000:]
    assert "Timed out waiting 7000ms" in text, text[-3000:]
    assert not list(tmp_path.rglob("result.json"))
