"""What rank 0 logs to Comet (scalescope.job.tracking.comet_log), without network: a failing comet
call
is one warning and turns tracking off, ending is bounded, and a result record becomes Comet
metrics and others."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from tracking_helpers import (
    FAKE_KEY,
    NAME,
    RECORD,
)

from scalescope.job.tracking import comet_guards, comet_log

# --- guards: a failing comet call never reaches training ------------------------------------


class _BrokenExperiment:
    def __init__(self, end_sleep_s: float = 0.0) -> None:
        self.end_sleep_s = end_sleep_s
        self.ended = False

    def get_key(self) -> str:
        return "k" * 32

    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"disk full while writing for {FAKE_KEY}")

    def end(self) -> None:
        time.sleep(self.end_sleep_s)
        self.ended = True


def _tracker(experiment: Any, **kwargs: Any) -> comet_log.CometTracker:
    defaults: dict[str, Any] = dict(
        mode="offline",
        reason="test",
        project="p",
        workspace=None,
        experiment_name=NAME,
        offline_dir="/nonexistent",
        end_timeout_s=5.0,
        secrets=[FAKE_KEY],
    )
    defaults.update(kwargs)
    return comet_log.CometTracker(experiment, **defaults)


def test_a_failing_comet_call_is_one_warning_and_turns_tracking_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    experiment = _BrokenExperiment()
    tracker = _tracker(experiment)
    with caplog.at_level(logging.WARNING, logger="scalescope.job.tracking"):
        tracker.log_metrics({"train_loss": 1.0}, step=1)
        tracker.log_metrics({"train_loss": 0.5}, step=2)  # tracking is off: no second line
        tracker.log_result(RECORD)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "log_metrics failed" in message and "tracking is off" in message
    assert FAKE_KEY not in message and comet_guards.REDACTED in message
    assert experiment.ended  # what was logged before is kept
    assert "disk full" in tracker.info()["error"]
    tracker.end()  # still fine


def test_end_is_bounded_even_if_comet_hangs(caplog: pytest.LogCaptureFixture) -> None:
    tracker = _tracker(_BrokenExperiment(end_sleep_s=30), end_timeout_s=0.5)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="scalescope.job.tracking"):
        tracker.end()
    assert time.monotonic() - start < 5
    info = tracker.info()
    assert info["ended_cleanly"] is False
    assert "did not finish within 0.5 s" in info["error"]


def test_result_record_split_into_metrics_and_others() -> None:
    metrics, others = comet_log.result_to_comet(
        {**RECORD, "train_start_unix": 1_700_000_000.5, "train_end_unix": 1_700_000_100.5}
    )
    assert others["train_start_unix"] == 1_700_000_000.5  # times of day: not metrics
    assert not any(k.endswith("_unix") for k in metrics)
    assert metrics["result/setup_time_s"] == 7.5
    assert metrics["result/peak_host_rss_gib_max"] == 0.43
    assert "result/mfu" not in metrics and "result/step_time_s" not in metrics
    assert not any("epoch_times" in k or "config" in k or "tracking" in k for k in metrics)
    assert others["node_names"] == "node1,node2"
    assert others["version.torch"] == "2.13.0"
    assert "config.tracking" not in others
    nan_record = {"samples_per_s": float("nan"), "peak_mem_gib": [float("nan")]}
    assert comet_log.result_to_comet(nan_record) == ({}, {})


def test_other_programs_load_is_one_metric_the_busiest_machines_share() -> None:
    """``host_load`` (per machine: cores, seconds) reaches Comet as the one share the summary
    reads, ``result/other_cpu_share``, never as a string of dicts among the others."""
    machines = [
        {"nodes": ["a"], "cores": 4, "wall_s": 10.0, "other_cpu_s": 4.0},
        {"nodes": ["b"], "cores": 2, "wall_s": 10.0, "other_cpu_s": 5.0},
    ]
    metrics, others = comet_log.result_to_comet({**RECORD, "host_load": machines})
    assert metrics["result/other_cpu_share"] == 0.25
    assert not any("host_load" in k for k in [*metrics, *others])
    assert "result/other_cpu_share" not in comet_log.result_to_comet(RECORD)[0]


def test_the_diagnosis_goes_to_comet_as_its_headline_numbers() -> None:
    diagnosis = {
        "status": "recorded",
        "typical_rank": 1,
        "ranks": [
            {"step_time_s": 0.02, "input_wait_s": 0.001, "compute_s": 0.01, "comm_wait_s": 0.009},
            {
                "step_time_s": 0.02,
                "input_wait_s": 0.002,
                "compute_s": 0.008,
                "comm_wait_s": 0.01,
                "wait_s": 0.007,
                "exposed_comm_s": 0.003,
            },
        ],
        "rank_skew": 0.25,
        "slowest_rank": 0,
        "slowest_node": "gpu07",
        "calibration": {"status": "measured", "exposed_comm_s": 0.004, "overlap_slowdown_s": None},
        "allreduce": {"status": "skipped", "predicted_step_s": None, "busbw_gbps": None},
        "nvml": {"status": "unavailable", "gpus": None},
    }
    metrics, others = comet_log.result_to_comet({"steps": 10, "diagnosis": diagnosis})
    assert metrics == {
        "result/steps": 10,
        "diagnosis/step_time_s": 0.02,
        "diagnosis/input_wait_s": 0.002,  # the typical rank's
        "diagnosis/compute_s": 0.008,
        "diagnosis/comm_wait_s": 0.01,
        "diagnosis/wait_s": 0.007,
        "diagnosis/exposed_comm_s": 0.003,  # from the steps, not the calibration
        "diagnosis/rank_skew": 0.25,
        "diagnosis/calibration_exposed_comm_s": 0.004,
    }  # what was not measured (the overlap slowdown here) is absent, not 0
    assert others == {"diagnosis.slowest_rank": 0, "diagnosis.slowest_node": "gpu07"}
    off = {"status": "off", "reason": "diagnosis.enabled=false", "ranks": None}
    assert comet_log.result_to_comet({"diagnosis": off}) == ({}, {})
