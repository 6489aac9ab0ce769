"""The result record: the one contract between jobs and the analysis side.

Events must survive a job's log (prefixes, interleaving), refuse to be half-read, and results
must land on disk whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import tempfile
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from core_helpers import make_identity, make_result, make_start
from hypothesis import given
from hypothesis import strategies as st

from scalescope import record
from scalescope.record import (
    MARKER,
    SCHEMA_VERSION,
    Identity,
    RecordError,
    ResultRecord,
    StartEvent,
    decode_line,
    encode,
    from_dict,
    read_result_json,
    write_json_atomic,
)


def _payload(line: str) -> dict[str, Any]:
    """The JSON of an event line, parsed strictly (NaN/Infinity tokens are not JSON)."""

    def refuse(token: str) -> Any:
        raise AssertionError(f"non-JSON constant {token} in an event line")

    return json.loads(line.split(MARKER, 1)[1], parse_constant=refuse)


def _line(data: dict[str, Any]) -> str:
    return f"{MARKER} {json.dumps(data)}"


# --- round trips ---------------------------------------------------------------------------


def test_start_event_round_trips() -> None:
    start = make_start()
    line = encode(start)
    assert line.startswith(MARKER + " ")
    assert "\n" not in line
    assert decode_line(line) == start


def test_result_record_round_trips() -> None:
    result = make_result()
    decoded = decode_line(encode(result))
    assert isinstance(decoded, ResultRecord)
    assert decoded == result
    assert decoded.identity.run_id == "81230_3.r1"
    assert decoded.config["workload"]["hidden_sizes"] == [2048] * 4


def test_local_cpu_result_with_nulls_round_trips() -> None:
    """What a one-epoch CPU run reports: no GPU memory, no MFU, no step time."""
    ident = make_identity(
        run_id="local-20250301T120000-77.r0",
        job_id="local-20250301T120000-77",
        array_job_id=None,
        array_task_id=None,
        restart_count=0,
        launcher="local",
        accelerator="cpu",
        precision="32",
        nodes=1,
        devices_per_node=1,
        world_size=1,
        sweep_id=None,
    )
    result = make_result(
        ident,
        epochs=1,
        epoch_times_s=[1.5],
        mean_epoch_time_excl_first_s=None,
        step_time_s=None,
        predicted_epoch_time_s=None,
        peak_mem_gib=None,
        mfu=None,
        tracking={},
    )
    assert decode_line(encode(result)) == result


def test_to_dict_is_flat_with_version_and_event() -> None:
    data = make_result().to_dict()
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["event"] == "result"
    assert data["world_size"] == 8  # identity fields at the top level, not nested
    assert "identity" not in data
    assert make_start().to_dict()["event"] == "start"


# --- finding the marker in a real log ------------------------------------------------------


def test_marker_found_after_srun_prefix() -> None:
    result = make_result()
    line = "0: " + encode(result)
    assert decode_line(line) == result


def test_marker_found_after_another_ranks_output_and_trailing_newline() -> None:
    start = make_start()
    line = "3: [W socket.cpp:464] warning 0: " + encode(start) + "\r\n"
    assert decode_line(line) == start


def test_line_without_marker_is_not_an_event() -> None:
    assert decode_line("Epoch 3: 100%|#####| 781/781 [00:38<00:00, loss=0.0123]") is None
    assert decode_line("") is None


def test_extra_unknown_keys_are_ignored() -> None:
    data = make_start().to_dict()
    data["added_in_a_later_minor_version"] = [1, 2, 3]
    assert decode_line(_line(data)) == make_start()


# --- broken lines ----------------------------------------------------------------------------


def test_truncated_json_is_a_record_error() -> None:
    line = encode(make_result())
    with pytest.raises(RecordError, match="not valid JSON"):
        decode_line(line[: len(line) // 2])


def test_marker_without_payload_is_a_record_error() -> None:
    with pytest.raises(RecordError):
        decode_line(f"0: {MARKER}")


def test_non_object_payload_is_a_record_error() -> None:
    with pytest.raises(RecordError, match="object"):
        decode_line(f"{MARKER} [1, 2, 3]")


def test_newer_schema_version_names_both_versions() -> None:
    newer = SCHEMA_VERSION + 1
    data = {**make_result().to_dict(), "schema_version": newer}
    with pytest.raises(RecordError) as info:
        decode_line(_line(data))
    message = str(info.value)
    assert f"schema_version {newer}" in message
    assert f"({SCHEMA_VERSION})" in message
    assert "upgrade" in message


@pytest.mark.parametrize("version", [0, -1, "1", None])
def test_invalid_schema_version_is_a_record_error(version: Any) -> None:
    data = {**make_start().to_dict(), "schema_version": version}
    with pytest.raises(RecordError, match="schema_version"):
        from_dict(data)


def test_missing_schema_version_is_a_record_error() -> None:
    data = make_start().to_dict()
    del data["schema_version"]
    with pytest.raises(RecordError, match="schema_version"):
        from_dict(data)


@pytest.mark.parametrize("missing", ["train_time_s", "world_size", "epoch_times_s", "run_id"])
def test_missing_result_field_is_named(missing: str) -> None:
    data = make_result().to_dict()
    del data[missing]
    with pytest.raises(RecordError, match=rf"result event lacks field\(s\): {missing}$"):
        decode_line(_line(data))


def test_all_missing_fields_are_named() -> None:
    data = make_start().to_dict()
    del data["job_id"], data["world_size"]
    with pytest.raises(RecordError) as info:
        from_dict(data)
    assert "job_id" in str(info.value)
    assert "world_size" in str(info.value)


def test_tracking_is_optional_in_a_result() -> None:
    data = make_result().to_dict()
    del data["tracking"]
    decoded = from_dict(data)
    assert isinstance(decoded, ResultRecord)
    assert decoded.tracking == {}


def test_records_older_than_the_peak_and_stop_fields_still_decode() -> None:
    data = make_result().to_dict()
    for key in ("peak_flops_per_s", "peak_flops_entry", "stop_reason"):
        del data[key]
    decoded = from_dict(data)
    assert isinstance(decoded, ResultRecord)
    assert decoded.peak_flops_per_s is None and decoded.peak_flops_entry is None
    assert decoded.stop_reason is None


def test_peak_and_stop_fields_round_trip() -> None:
    result = replace(
        make_result(),
        peak_flops_per_s=989.5e12,
        peak_flops_entry="H100 SXM (NVIDIA H100 Tensor Core GPU Datasheet, 2023)",
        stop_reason="sigterm",
    )
    assert decode_line(encode(result)) == result


@pytest.mark.parametrize("event", ["finish", "", None])
def test_unknown_event_is_a_record_error(event: Any) -> None:
    data = {**make_start().to_dict(), "event": event}
    with pytest.raises(RecordError, match=r"unknown event"):
        from_dict(data)


# --- NaN and infinity --------------------------------------------------------------------------


def test_non_finite_floats_become_null() -> None:
    result = make_result(
        samples_per_s=math.nan,
        samples_per_s_per_device=math.inf,
        mfu=-math.inf,
        epoch_times_s=[1.0, math.nan, 2.0],
        config={"trainer": {"lr": math.inf}},
    )
    line = encode(result)
    payload = _payload(line)  # strict: would fail on NaN / Infinity tokens
    assert payload["samples_per_s"] is None
    assert payload["samples_per_s_per_device"] is None
    assert payload["mfu"] is None
    assert payload["epoch_times_s"] == [1.0, None, 2.0]
    assert payload["config"] == {"trainer": {"lr": None}}
    decoded = decode_line(line)
    assert isinstance(decoded, ResultRecord)
    assert decoded.samples_per_s is None
    assert decoded.train_time_s == result.train_time_s


def test_rate_without_elapsed_time_is_nan_not_an_error() -> None:
    assert record.rate(100, 4.0) == 25.0
    assert math.isnan(record.rate(100, 0.0))
    assert math.isnan(record.rate(100, -1.0))


def test_mean_excluding_first() -> None:
    assert record.mean_excluding_first([9.0, 1.0, 3.0]) == 2.0
    assert record.mean_excluding_first([9.0]) is None
    assert record.mean_excluding_first([]) is None


# --- result.json on disk -------------------------------------------------------------------------


def test_write_json_atomic_then_read_result_json(tmp_path: Path) -> None:
    result = make_result()
    target = tmp_path / "runs" / "spiral" / "81230_3.r1" / "result.json"
    assert write_json_atomic(target, result.to_dict()) == target
    assert read_result_json(target) == result
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]


def test_write_json_atomic_writes_strict_json_with_nulls(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    write_json_atomic(target, {"a": math.nan, "b": [math.inf, 1.5]})
    text = target.read_text(encoding="utf-8")
    assert json.loads(text, parse_constant=lambda t: pytest.fail(t)) == {
        "a": None,
        "b": [None, 1.5],
    }


def test_write_json_atomic_failure_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    write_json_atomic(target, make_result().to_dict())
    before = target.read_bytes()
    # Serialisable keys first ("a..."), then an object json cannot encode: the encoder has
    # already written part of the file when it fails.
    bad = {"a_big_list": list(range(50_000)), "z_unserialisable": object()}
    with pytest.raises(TypeError):
        write_json_atomic(target, bad)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_write_json_atomic_failure_on_first_write_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    with pytest.raises(TypeError):
        write_json_atomic(target, {"a": list(range(10_000)), "b": {1, 2}})
    assert list(tmp_path.iterdir()) == []


def test_read_result_json_refuses_start_event_and_garbage(tmp_path: Path) -> None:
    start_file = tmp_path / "start.json"
    write_json_atomic(start_file, make_start().to_dict())
    with pytest.raises(RecordError, match="start event"):
        read_result_json(start_file)
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1, "event": "res', encoding="utf-8")
    with pytest.raises(RecordError, match="cannot read"):
        read_result_json(broken)
    with pytest.raises(RecordError, match="cannot read"):
        read_result_json(tmp_path / "absent.json")
    listed = tmp_path / "list.json"
    listed.write_text("[]", encoding="utf-8")
    with pytest.raises(RecordError, match="object"):
        read_result_json(listed)


# --- properties --------------------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
any_float = st.floats(allow_nan=True, allow_infinity=True)
texts = st.text(max_size=40)


@given(
    train_time=finite,
    epoch_times=st.lists(finite, min_size=1, max_size=6),
    peak=st.one_of(st.none(), st.lists(finite, max_size=4)),
    device=texts,
    run_id=texts,
    versions=st.dictionaries(texts, st.one_of(st.none(), texts), max_size=4),
    config=st.dictionaries(
        texts, st.one_of(finite, texts, st.integers(), st.booleans(), st.none()), max_size=5
    ),
)
def test_round_trip_any_finite_floats_and_strings(
    train_time: float,
    epoch_times: list[float],
    peak: list[float] | None,
    device: str,
    run_id: str,
    versions: dict[str, str | None],
    config: dict[str, Any],
) -> None:
    result = make_result(
        make_identity(run_id=run_id, config_name=device),
        train_time_s=train_time,
        epoch_times_s=epoch_times,
        peak_mem_gib=peak,
        device_name=device,
        versions=versions,
        config=config,
    )
    line = encode(result)
    assert "\n" not in line and "\r" not in line  # one event, one line, whatever the strings
    assert decode_line("0: " + line) == result


@given(values=st.lists(any_float, min_size=1, max_size=8))
def test_non_finite_become_none_and_finite_survive(values: list[float]) -> None:
    result = make_result(epoch_times_s=values)
    decoded = decode_line(encode(result))
    assert isinstance(decoded, ResultRecord)
    expected = [v if math.isfinite(v) else None for v in values]
    assert decoded.epoch_times_s == expected


@given(job_id=texts, world=st.integers(1, 4096))
def test_start_event_round_trip_property(job_id: str, world: int) -> None:
    start = StartEvent(replace(make_identity(), job_id=job_id, world_size=world))
    assert decode_line(encode(start)) == start


def test_write_json_atomic_respects_the_umask(tmp_path: Path) -> None:
    """The temp file behind the rename is 0600; the result must not stay private."""
    old = os.umask(0o022)
    try:
        path = write_json_atomic(tmp_path / "r.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# --- checksums ---------------------------------------------------------------------------------


def test_log_line_and_result_json_carry_the_same_checksum(tmp_path: Path) -> None:
    result = make_result(samples_per_s=math.nan)  # null in both, same canonical JSON
    line_payload = _payload(encode(result))
    path = write_json_atomic(tmp_path / "result.json", result.to_dict())
    on_disk = json.loads(path.read_text(encoding="utf-8"))
    assert len(line_payload["checksum"]) == 64
    assert on_disk["checksum"] == line_payload["checksum"]
    body = {k: v for k, v in line_payload.items() if k != "checksum"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    assert line_payload["checksum"] == hashlib.sha256(canonical.encode()).hexdigest()
    assert record.checksum(result.to_dict()) == line_payload["checksum"]
    assert read_result_json(path) == decode_line(encode(result))


def test_start_event_line_carries_a_checksum() -> None:
    payload = _payload(encode(make_start()))
    assert payload["checksum"] == record.checksum(make_start().to_dict())


def test_altered_record_is_a_checksum_mismatch() -> None:
    payload = _payload(encode(make_result()))
    payload["train_time_s"] = payload["train_time_s"] / 2  # a faster run, typed in by hand
    with pytest.raises(RecordError, match=r"^checksum mismatch: the record was altered"):
        decode_line(_line(payload))


def test_altered_result_json_is_a_checksum_mismatch(tmp_path: Path) -> None:
    path = write_json_atomic(tmp_path / "result.json", make_result().to_dict())
    data = json.loads(path.read_text(encoding="utf-8"))
    data["device_name"] = "NVIDIA H200"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    with pytest.raises(RecordError, match="checksum mismatch"):
        read_result_json(path)


def test_record_without_checksum_is_accepted() -> None:
    """Records written before checksums existed."""
    data = make_result().to_dict()
    assert "checksum" not in data
    assert decode_line(_line(data)) == make_result()


def test_sweep_manifest_gets_no_checksum(tmp_path: Path) -> None:
    path = write_json_atomic(tmp_path / "sweep.json", {"sweep_id": "s", "jobs": []})
    assert "checksum" not in json.loads(path.read_text(encoding="utf-8"))


# --- field types ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("train_time_s", "12.3", "should be a number, got a string"),
        ("steps", 1.5, "should be an integer, got a number"),
        ("steps", True, "should be an integer, got true or false"),
        ("job_time_s", [1.0], "should be a number, got a list"),
        ("epoch_times_s", [1.0, "2"], "should be a list of numbers"),
        ("peak_mem_gib", 3.0, "should be a list of numbers or null"),
        ("node_names", "node1", "should be a list of strings"),
        ("versions", {"torch": 2}, "should be an object"),
        ("world_size", "8", "should be an integer"),
        ("sweep_id", 5, "should be a string or null"),
    ],
)
def test_wrong_field_type_is_a_record_error_naming_field_and_type(
    name: str, value: Any, expected: str
) -> None:
    data = {**make_result().to_dict(), name: value}
    with pytest.raises(RecordError, match=rf"field '{name}' {expected}"):
        decode_line(_line(data))


def test_ints_pass_for_floats_and_null_for_non_finite() -> None:
    data = {**make_result().to_dict(), "train_time_s": 12, "samples_per_s": None}
    decoded = from_dict(data)
    assert isinstance(decoded, ResultRecord)
    assert decoded.train_time_s == 12 and decoded.samples_per_s is None


def _wrong_value(tp: Any) -> Any:
    """A JSON value of the wrong type for annotation ``tp`` (for every field type in use)."""
    return (
        {"wrong": ["type"]}
        if str(tp).startswith("list")
        else [{"x": 1}]
        if "dict" in str(tp)
        else {"wrong": ["type"]}
    )


@pytest.mark.parametrize(
    "name",
    [
        *(f.name for f in fields(Identity)),
        *(
            f.name
            for f in fields(ResultRecord)
            if f.name not in ("identity", "schema_version", "event")
        ),
    ],
)
def test_every_field_is_type_checked(name: str) -> None:
    """Derived from the dataclasses: a field added later is covered without a new test."""
    hints = {**get_type_hints(Identity), **get_type_hints(ResultRecord)}
    data = {**make_result().to_dict(), name: _wrong_value(hints[name])}
    with pytest.raises(RecordError, match=rf"field '{name}' should be "):
        from_dict(data)


@given(
    train_time=any_float,
    device=texts,
    config=st.dictionaries(
        texts, st.one_of(any_float, texts, st.integers(), st.none()), max_size=4
    ),
)
def test_result_json_and_log_line_agree_on_the_checksum(
    train_time: float, device: str, config: dict[str, Any]
) -> None:
    """Whatever the values (unicode, NaN, huge ints), both copies verify and agree."""
    result = make_result(train_time_s=train_time, device_name=device, config=config)
    line = encode(result)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_json_atomic(Path(tmp) / "result.json", result.to_dict())
        on_disk = json.loads(path.read_text(encoding="utf-8"))
        assert on_disk["checksum"] == _payload(line)["checksum"]
        assert read_result_json(path) == decode_line(line)
