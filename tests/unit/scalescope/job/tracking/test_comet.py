"""Comet tracking (scalescope.job.tracking.comet) against the real comet_ml, without network.

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
import zipfile
from pathlib import Path

import pytest
from tracking_helpers import FAKE_KEY

from scalescope.config import load_train_config
from scalescope.errors import ConfigError
from scalescope.job.tracking import comet as tracking

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


# --- no key: off, one line, comet_ml never imported ------------------------------------------


# --- offline archives, read back -------------------------------------------------------------


# --- unreachable servers: bounded, offline fallback, key never shown -------------------------


# --- a server that rejects the key, or hangs after answering once ---------------------------


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
