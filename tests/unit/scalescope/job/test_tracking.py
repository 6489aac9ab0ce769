"""Comet tracking (scalescope.job.tracking) against the real comet_ml, without network.

Every "server" here is on the loopback interface: a closed port (refused), a listener whose
accept queue is full (connect never answered), a listener that accepts and never replies,
and a tiny HTTP stand-in for Comet that rejects the key or hangs after the first request.
start_tracking runs in a subprocess so that its stdout/stderr (comet's log lines included)
can be captured whole and searched for the key, and so that the COMET_* settings it exports
do not leak into other tests.

Measured start-up times are printed (``pytest -s``); assertions on them are generous
bounds (a hung start-up would take minutes), never performance checks.
"""

from __future__ import annotations

import json
import logging
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from tracking_helpers import (
    FAKE_KEY,
    NAME,
    RECORD,
)

from scalescope.config import TrackingConfig, load_train_config
from scalescope.errors import ConfigError
from scalescope.job import tracking

# --- loopback stand-ins for an unreachable or unhappy Comet server ---------------------------


# --- the mode decision, without network ------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "key_set", "env_offline", "expected"),
    [
        ("off", True, True, "off"),
        ("off", False, False, "off"),
        ("auto", False, False, "off"),
        ("auto", False, True, "offline"),
        ("auto", True, False, "online"),
        ("auto", True, True, "offline"),
        ("online", True, False, "online"),
        ("online", False, False, "no-key"),
        ("online", True, True, "offline"),
        ("offline", False, False, "offline"),
        ("offline", True, False, "offline"),
    ],
)
def test_plan_mode_table(mode: str, key_set: bool, env_offline: bool, expected: str) -> None:
    planned, why = tracking.plan_mode(mode, key_set=key_set, env_offline=env_offline)
    assert planned == expected
    assert why


@pytest.mark.parametrize(
    ("env", "offline"),
    [
        ({}, False),
        ({"COMET_START_ONLINE": "false"}, True),
        ({"COMET_START_ONLINE": "0"}, True),
        ({"COMET_START_ONLINE": "true"}, False),
        ({"COMET_START_ONLINE": ""}, False),
        ({"COMET_OFFLINE": "true"}, True),
        ({"COMET_OFFLINE": "false"}, False),
    ],
)
def test_comet_environment_switches_for_offline(env: dict[str, str], offline: bool) -> None:
    assert tracking.env_requests_offline(env) is offline


def test_bounds_follow_the_config() -> None:
    bounds = tracking.comet_bounds(TrackingConfig(connect_timeout_s=2.5, end_timeout_s=30))
    assert bounds["COMET_TIMEOUT_HTTP"] == "3"
    assert bounds["COMET_TIMEOUT_CLEANING"] == bounds["COMET_TIMEOUT_UPLOAD"] == "30"
    assert bounds["COMET_ERROR_TRACKING_ENABLE"] == "false"
    assert int(bounds["COMET_GET_OR_ADD_EXPERIMENT_RETRY_TOTAL"]) <= 2


# --- no key: off, one line, comet_ml never imported ------------------------------------------


# --- offline archives, read back -------------------------------------------------------------


# --- unreachable servers: bounded, offline fallback, key never shown -------------------------


# --- a server that rejects the key, or hangs after answering once ---------------------------


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


def _tracker(experiment: Any, **kwargs: Any) -> tracking.CometTracker:
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
    return tracking.CometTracker(experiment, **defaults)


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
    assert FAKE_KEY not in message and tracking.REDACTED in message
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
    metrics, others = tracking.result_to_comet(RECORD)
    assert metrics["result/setup_time_s"] == 7.5
    assert metrics["result/peak_host_rss_gib_max"] == 0.43
    assert "result/mfu" not in metrics and "result/step_time_s" not in metrics
    assert not any("epoch_times" in k or "config" in k or "tracking" in k for k in metrics)
    assert others["node_names"] == "node1,node2"
    assert others["version.torch"] == "2.13.0"
    assert "config.tracking" not in others
    nan_record = {"samples_per_s": float("nan"), "peak_mem_gib": [float("nan")]}
    assert tracking.result_to_comet(nan_record) == ({}, {})


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
    metrics, others = tracking.result_to_comet({"steps": 10, "diagnosis": diagnosis})
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
    assert tracking.result_to_comet({"diagnosis": off}) == ({}, {})


def test_read_offline_archive_reports_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "x.zip"
    lines = [
        json.dumps({"type": "log_other", "payload": {"key": "Name", "value": "n"}}),
        "{not json",
        json.dumps(
            {
                "type": "parameter_msg",
                "payload": {"params": {"paramName": "h", "paramValue": [1, 2], "source": "manual"}},
            }
        ),
        json.dumps(
            {
                "type": "parameter_msg",
                "payload": {
                    "param": {"paramName": "curr_step", "paramValue": 3, "source": "auto-logged"}
                },
            }
        ),
    ]
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("experiment.json", json.dumps({"project_name": "p", "tags": ["a"]}))
        zf.writestr("messages.json", "\n".join(lines) + "\n")
    data = tracking.read_offline_archive(path)
    assert data["name"] == "n"
    assert data["parameters"] == {"h": [1, 2]}
    assert len(data["problems"]) == 1 and "line 2" in data["problems"][0]
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as zf:
        zf.writestr("other.txt", "")
    with pytest.raises(ValueError, match="not a comet offline archive"):
        tracking.read_offline_archive(tmp_path / "bad.zip")


# --- the key cannot come in through the config -----------------------------------------------


def test_off_is_a_mode_not_a_boolean(tmp_path: Path) -> None:
    assert load_train_config(None, ["tracking.mode=off"]).tracking.mode == "off"
    path = tmp_path / "c.yaml"
    path.write_text("tracking:\n  mode: off\n")
    assert load_train_config(path).tracking.mode == "off"


def test_a_key_in_the_config_is_rejected_without_echoing_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_train_config(None, [f"tracking.api_key={FAKE_KEY}"])
    assert FAKE_KEY not in str(excinfo.value)
    path = tmp_path / "c.yaml"
    path.write_text(f"tracking:\n  api_key: {FAKE_KEY}\n")
    with pytest.raises(ConfigError) as excinfo:
        load_train_config(path)
    assert FAKE_KEY not in str(excinfo.value)


# --- end to end: the real trainer ------------------------------------------------------------
