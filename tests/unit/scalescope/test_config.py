"""Train config: defaults, file < command line precedence, one-line errors naming the key,
the batch arithmetic of strong and weak scaling, and gradient accumulation's micro-batch.

Override values (and files) are read as YAML 1.1 scalars: a bare ``tracking.mode=off``
arrives as ``False`` and ``workload.lr=1e-3`` as the string ``'1e-3'``, and both are
rejected. Reported; the tests quote ``'off'`` and pin neither behaviour.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from scalescope.config import (
    TrainConfig,
    TrainerConfig,
    check_workload,
    load_train_config,
    resolve_batch,
)
from scalescope.config.files import parse_overrides
from scalescope.errors import ConfigError
from scalescope.schema import build
from scalescope.workloads.params import SpiralParams

REPO = Path(__file__).resolve().parents[3]


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- defaults and precedence -----------------------------------------------------------------


def test_defaults_load_without_a_file() -> None:
    cfg = load_train_config(None)
    assert isinstance(cfg, TrainConfig)
    assert cfg.name == "spiral"
    assert cfg.workload_name == "spiral"
    assert cfg.trainer == TrainerConfig()
    assert cfg.trainer.scaling == "strong"
    assert cfg.trainer.precision == "32"
    assert cfg.trainer.devices == "auto"
    assert cfg.workload_params() == SpiralParams()
    assert cfg.sweep_id is None


def test_a_config_without_a_name_is_named_after_its_workload(tmp_path: Path) -> None:
    """Not after the default workload: a user's module run without a file would otherwise be
    filed and reported as ``spiral``."""
    assert load_train_config(None, ["workload.name=gpt"]).name == "gpt"
    user = ["workload.name=examples.my_project.model:MyModel"]
    assert load_train_config(None, user).name == "MyModel"
    unnamed = _write(tmp_path / "c.yaml", "workload: {name: resnet}\n")
    assert load_train_config(unnamed).name == "resnet"
    named = _write(tmp_path / "n.yaml", "name: mine\nworkload: {name: resnet}\n")
    assert load_train_config(named, ["workload.name=gpt"]).name == "mine"
    assert load_train_config(None, ["name=x", *user]).name == "x"


def test_resolved_dict_carries_every_workload_default() -> None:
    data = load_train_config(None, ["workload.num_samples=500"]).to_dict()
    assert data["workload"]["name"] == "spiral"
    assert data["workload"]["num_samples"] == 500
    assert data["workload"]["hidden_sizes"] == [64, 32, 16]
    assert data["trainer"]["batch_size"] == 256
    assert set(data) == {
        "name",
        "workload",
        "trainer",
        "tracking",
        "diagnosis",
        "faults",
        "fsdp",
        "output_dir",
        "sweep_id",
        "cluster",
        "repeat_index",
    }
    assert data["trainer"]["warmup_steps"] == "auto"
    assert data["faults"] == {  # recorded even when off
        "step_sleep_s": 0.0,
        "input_sleep_s": 0.0,
        "slow_rank": None,
        "slow_rank_sleep_s": 0.0,
        "slow_rank_at": "step",
        "rotating_sleep_s": 0.0,
        "allreduce_delay_s": 0.0,
        "allgather_delay_s": 0.0,
        "reducescatter_delay_s": 0.0,
        "overlap_burn_s": 0.0,
        "network_alpha_s": 0.0,
        "network_busbw_gbps": 0.0,
        "window_error_rank": None,
        "exit_rank": None,
        "exit_at": "calibration",
    }
    assert data["diagnosis"]["enabled"] is True
    assert data["trainer"]["collective_timeout_s"] == 300.0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("faults.step_sleep_s=-1", "faults.step_sleep_s: must be >= 0"),
        ("faults.slow_rank=1", "faults.slow_rank_sleep_s: must be > 0 when faults.slow_rank"),
        ("faults.exit_at=later", "faults.exit_at"),
        ("diagnosis.calibration_budget_s=0", "diagnosis.calibration_budget_s"),
        ("faults.slow_node=1", "unknown key faults.slow_node"),
        ("trainer.collective_timeout_s=0", "trainer.collective_timeout_s: must be > 0"),
    ],
)
def test_fault_and_timeout_keys_are_validated(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_train_config(None, [override])


def test_command_line_over_file_over_defaults(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "train.yaml",
        "name: from-file\n"
        "workload: {name: spiral, num_samples: 5000, hidden_sizes: [8, 8]}\n"
        "trainer: {batch_size: 128, max_epochs: 5}\n",
    )
    cfg = load_train_config(
        path, ["trainer.max_epochs=3", "workload.lr=0.01", "workload.hidden_sizes=[4]"]
    )
    assert cfg.name == "from-file"  # file, not overridden
    assert cfg.trainer.batch_size == 128  # file over default
    assert cfg.trainer.max_epochs == 3  # command line over file
    assert cfg.trainer.seed == 42  # default: neither file nor command line
    params = cfg.workload_params()
    assert params.num_samples == 5000  # sections merge key by key
    assert params.lr == 0.01
    assert params.hidden_sizes == [4]  # a list is replaced, not merged
    assert params.noise == SpiralParams().noise


def test_overrides_as_a_nested_mapping(tmp_path: Path) -> None:
    path = _write(tmp_path / "train.yaml", "trainer: {batch_size: 128}\n")
    cfg = load_train_config(path, {"trainer": {"devices": 2}})
    assert (cfg.trainer.batch_size, cfg.trainer.devices) == (128, 2)


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    assert load_train_config(_write(tmp_path / "empty.yaml", "")) == load_train_config(None)


def test_override_values_are_yaml_scalars() -> None:
    data = parse_overrides(
        ["trainer.max_steps=", "workload.hidden_sizes=[128, 64]", "a.b.c=true", "x=0.5", "s=abc"]
    )
    assert data == {
        "trainer": {"max_steps": None},
        "workload": {"hidden_sizes": [128, 64]},
        "a": {"b": {"c": True}},
        "x": 0.5,
        "s": "abc",
    }


def test_precision_32_from_yaml_int_is_accepted() -> None:
    assert load_train_config(None, ["trainer.precision=32"]).trainer.precision == "32"
    assert load_train_config(None, ["trainer.precision=bf16-mixed"]).trainer.precision == (
        "bf16-mixed"
    )


def test_16_mixed_on_auto_accelerator_is_accepted() -> None:
    """auto may find a GPU at run time; only an explicit cpu is refused up front."""
    cfg = load_train_config(None, ["trainer.precision=16-mixed"])
    assert cfg.trainer.precision == "16-mixed"


# --- errors: one line, naming the key ----------------------------------------------------------

BAD_OVERRIDES = [
    # (overrides, substrings the message must contain)
    (["trainer.foo=1"], ["unknown key trainer.foo", "batch_size", "max_epochs", "precision"]),
    (["foo=1"], ["unknown key foo", "name", "workload", "trainer", "output_dir"]),
    (["workload.epochs=1"], ["unknown key workload.epochs", "num_samples", "hidden_sizes"]),
    (["workload.name=mnist"], ["workload.name", "mnist", "spiral"]),
    (["trainer=3"], ["trainer", "mapping"]),
    (["workload=3"], ["workload", "mapping"]),
    (["trainer.batch_size=-8"], ["trainer.batch_size", "> 0", "-8"]),
    (["trainer.batch_size=0"], ["trainer.batch_size", "> 0"]),
    (["trainer.max_epochs=-1"], ["trainer.max_epochs", "> 0"]),
    (["trainer.max_steps=0"], ["trainer.max_steps", "> 0"]),
    (["trainer.devices=0"], ["trainer.devices", "> 0"]),
    (["trainer.num_nodes=-2"], ["trainer.num_nodes", "> 0"]),
    (["trainer.threads_per_process=0"], ["trainer.threads_per_process", "> 0"]),
    (["trainer.gradient_clip_val=0"], ["trainer.gradient_clip_val", "> 0"]),
    (["trainer.gradient_clip_val=-1.5"], ["trainer.gradient_clip_val", "> 0", "-1.5"]),
    (["trainer.gradient_clip_algorithm=l2"], ["trainer.gradient_clip_algorithm", "'norm'"]),
    (["workload.num_samples=-5"], ["workload.num_samples", "> 0"]),
    (["workload.hidden_sizes=[64,-1]"], ["workload.hidden_sizes", "> 0"]),
    (["workload.hidden_sizes=[]"], ["workload.hidden_sizes", "at least one"]),
    (["workload.noise=-0.1"], ["workload.noise", ">= 0"]),
    (["workload.val_fraction=1"], ["workload.val_fraction", "between 0 and 1"]),
    (["workload.dropout=1"], ["workload.dropout", "[0, 1)"]),
    (["workload.num_samples=1"], ["workload.num_samples", "too few"]),
    (["tracking.connect_timeout_s=0"], ["tracking.connect_timeout_s", "> 0"]),
    (["trainer.batch_size=2.5"], ["trainer.batch_size", "integer", "2.5"]),
    (["trainer.batch_size=true"], ["trainer.batch_size", "integer", "True"]),
    (["trainer.batch_size=big"], ["trainer.batch_size", "integer", "'big'"]),
    (["trainer.max_epochs="], ["trainer.max_epochs", "integer", "None"]),
    (["trainer.devices=many"], ["trainer.devices", "integer", "'auto'"]),
    (["trainer.scaling=linear"], ["trainer.scaling", "'strong'", "'weak'"]),
    (["trainer.accelerator=tpu"], ["trainer.accelerator", "'cpu'", "'gpu'"]),
    (["trainer.precision=16"], ["trainer.precision", "'16-mixed'", "16"]),
    (["trainer.precision=bf16"], ["trainer.precision", "'bf16-mixed'"]),
    (
        ["trainer.precision=16-mixed", "trainer.accelerator=cpu"],
        ["trainer.precision", "16-mixed", "GPU"],
    ),
    (["workload.hidden_sizes=64"], ["workload.hidden_sizes", "list"]),
    (["workload.hidden_sizes=[64, x]"], ["workload.hidden_sizes[1]", "integer"]),
    (["name=bad/name"], ["name", "bad/name", "letters"]),
    (["name=.hidden"], ["name", ".hidden"]),
    (["name=a b"], ["name", "'a b'"]),
    (["output_dir=[1]"], ["output_dir", "string"]),
    (["trainer.max_epochs.x=1"], ["trainer.max_epochs"]),
    (["trainer.max_epochs"], ["trainer.max_epochs", "key=value"]),
    (["=3"], ["'=3'", "key=value"]),
    (["a b=3"], ["'a b=3'", "key=value"]),
]


@pytest.mark.parametrize(
    ("overrides", "expected"), BAD_OVERRIDES, ids=[" ".join(o) for o, _ in BAD_OVERRIDES]
)
def test_bad_override_is_one_line_naming_the_key(overrides: list[str], expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_train_config(None, overrides)
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_file_may_omit_the_workload_name(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.yaml", "workload: {num_samples: 100}\n")
    cfg = load_train_config(path)
    assert cfg.workload_name == "spiral"
    assert cfg.workload_params().num_samples == 100


def test_workload_without_name_lists_registered_workloads() -> None:
    with pytest.raises(ConfigError, match=r"^workload\.name: missing; registered: .*spiral"):
        build(TrainConfig, {"workload": {"num_samples": 100}})


def test_file_errors_name_the_file_and_the_key(tmp_path: Path) -> None:
    path = _write(tmp_path / "train.yaml", "trainer:\n  batch_size: -4\n")
    with pytest.raises(ConfigError) as info:
        load_train_config(path)
    message = str(info.value)
    assert str(path) in message
    assert "trainer.batch_size" in message
    assert "\n" not in message


def test_unknown_key_in_file_lists_valid_keys(tmp_path: Path) -> None:
    path = _write(tmp_path / "train.yaml", "trainer:\n  max_epoch: 3\n")
    with pytest.raises(ConfigError) as info:
        load_train_config(path)
    message = str(info.value)
    assert "unknown key trainer.max_epoch" in message
    assert "max_epochs" in message


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="not found") as info:
        load_train_config(missing)
    assert str(missing) in str(info.value)


def test_directory_is_not_a_config_file(tmp_path: Path) -> None:
    """A folder given as the config is named as a folder, not as missing."""
    with pytest.raises(ConfigError) as info:
        load_train_config(tmp_path)
    assert str(info.value) == f"config file expected, got a folder: {tmp_path}"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("trainer: {batch_size: 64\n", "line 2, column 1: "),
        ("trainer:\n  batch_size: 64\n bad_indent: 1\n", "line 3, column 2: "),
        ("a: b: c\n", "line 1, column 5: mapping values are not allowed here"),
    ],
)
def test_invalid_yaml_is_one_line_naming_the_file_and_where(
    tmp_path: Path, text: str, where: str
) -> None:
    """The line and column the parser stopped at, so a newcomer finds the fault."""
    path = _write(tmp_path / "broken.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_train_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not valid YAML ({where}")
    assert "\n" not in message


def test_invalid_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_train_config(path)


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str) -> None:
    path = _write(tmp_path / "list.yaml", text)
    with pytest.raises(ConfigError, match="mapping") as info:
        load_train_config(path)
    assert str(path) in str(info.value)


# --- batch arithmetic --------------------------------------------------------------------------


def test_resolve_batch_strong_splits_the_global_batch() -> None:
    r = resolve_batch(TrainerConfig(scaling="strong", batch_size=256), 4)
    assert (r.per_device_batch_size, r.global_batch_size) == (64, 256)


def test_resolve_batch_weak_grows_the_global_batch() -> None:
    r = resolve_batch(TrainerConfig(scaling="weak", batch_size=64), 4)
    assert (r.per_device_batch_size, r.global_batch_size) == (64, 256)


def test_resolve_batch_non_dividing_is_an_error_naming_key_and_world() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_batch(TrainerConfig(scaling="strong", batch_size=100), 3)
    message = str(info.value)
    assert message.startswith("trainer.batch_size")
    assert "100" in message and "3" in message
    assert "\n" not in message


def test_weak_scaling_accepts_any_world_size() -> None:
    r = resolve_batch(TrainerConfig(scaling="weak", batch_size=100), 3)
    assert r.global_batch_size == 300


@given(per_device=st.integers(1, 10_000), world=st.integers(1, 1024))
def test_strong_scaling_divisible_batch_splits_exactly(per_device: int, world: int) -> None:
    batch = per_device * world
    r = resolve_batch(TrainerConfig(scaling="strong", batch_size=batch), world)
    assert r.global_batch_size == batch
    assert r.per_device_batch_size * world == r.global_batch_size
    assert r.per_device_batch_size == per_device


@given(batch=st.integers(1, 100_000), world=st.integers(1, 1024))
def test_strong_scaling_raises_exactly_when_not_divisible(batch: int, world: int) -> None:
    trainer = TrainerConfig(scaling="strong", batch_size=batch)
    if batch % world:
        with pytest.raises(ConfigError):
            resolve_batch(trainer, world)
    else:
        assert resolve_batch(trainer, world).per_device_batch_size * world == batch


@given(batch=st.integers(1, 100_000), world=st.integers(1, 1024))
def test_weak_scaling_per_device_is_the_configured_batch(batch: int, world: int) -> None:
    r = resolve_batch(TrainerConfig(scaling="weak", batch_size=batch), world)
    assert r.per_device_batch_size == batch
    assert r.global_batch_size == batch * world


@given(world=st.integers(2, 64), batch=st.integers(1, 10_000))
def test_strong_scaling_error_message_suggests_a_multiple(world: int, batch: int) -> None:
    assume(batch % world)
    with pytest.raises(ConfigError, match=f"multiple of {world}"):
        resolve_batch(TrainerConfig(scaling="strong", batch_size=batch), world)


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ("file", "train.yaml: unknown key trainer.max_epoch; did you mean trainer.max_epochs?"),
        (
            "cli",
            "the command line: unknown key trainer.max_epoch; did you mean trainer.max_epochs?",
        ),
        (
            "env",
            "SCALESCOPE_OVERRIDES: unknown key trainer.max_epoch; did you mean trainer.max_epochs?",
        ),
    ],
)
def test_an_unknown_key_is_named_with_its_route_and_the_closest_valid_key(
    tmp_path: Path, route: str, expected: str
) -> None:
    """The same typo through the three routes a newcomer uses; a right key in the file
    beside a typo on the command line blames the command line, not the file."""
    path = tmp_path / "train.yaml"
    path.write_text("trainer:\n  max_epochs: 2\n" + ("  max_epoch: 3\n" if route == "file" else ""))
    cli = ["trainer.max_epoch=3"] if route == "cli" else []
    layers = [("SCALESCOPE_OVERRIDES", {"trainer": {"max_epoch": 3}})] if route == "env" else []
    with pytest.raises(ConfigError) as info:
        load_train_config(path, cli, layers=layers)
    message = str(info.value)
    assert message.startswith(str(tmp_path / expected) if route == "file" else expected), message
    assert "valid keys in trainer:" in message


@pytest.mark.parametrize(
    ("route", "expected"),
    [
        ("file", "train.yaml: trainer.max_epochs: expected an integer, got 'two'"),
        ("cli", "the command line: trainer.max_epochs: expected an integer, got 'two'"),
        ("env", "SCALESCOPE_OVERRIDES: trainer.max_epochs: expected an integer, got 'two'"),
    ],
)
def test_a_bad_value_is_named_with_the_route_that_set_it(
    tmp_path: Path, route: str, expected: str
) -> None:
    """A wrong value is blamed where it was written: a file whose own value is fine beside a
    bad one on the command line (or in an override layer) names that route, not the file."""
    path = tmp_path / "train.yaml"
    path.write_text(f"trainer:\n  max_epochs: {'two' if route == 'file' else 2}\n")
    cli = ["trainer.max_epochs=two"] if route == "cli" else []
    layers = (
        [("SCALESCOPE_OVERRIDES", {"trainer": {"max_epochs": "two"}})] if route == "env" else []
    )
    with pytest.raises(ConfigError) as info:
        load_train_config(path, cli, layers=layers)
    message = str(info.value)
    assert message == (str(tmp_path / expected) if route == "file" else expected), message


def test_a_bad_workload_argument_on_the_command_line_is_blamed_there(tmp_path: Path) -> None:
    """A value the workload itself refuses (its section named first in the message) is
    blamed on the override that set it."""
    path = tmp_path / "train.yaml"
    path.write_text("workload:\n  name: spiral\n")
    with pytest.raises(ConfigError) as info:
        load_train_config(path, ["workload.dropout=1.5"])
    assert str(info.value).startswith("the command line: workload."), str(info.value)


def test_no_suggestion_where_nothing_is_close() -> None:
    with pytest.raises(ConfigError) as info:
        load_train_config(None, ["trainer.zzz=1"])
    assert "did you mean" not in str(info.value)


def test_the_batch_of_a_step_is_split_into_micro_batches() -> None:
    b = resolve_batch(TrainerConfig(batch_size=256, accumulate_grad_batches=4), 2)
    assert (b.per_device_batch_size, b.global_batch_size) == (128, 256)
    assert b.micro_batch_size == 32 and b.check_micro_batch() == 32
    weak = resolve_batch(TrainerConfig(scaling="weak", batch_size=24, accumulate_grad_batches=3), 4)
    assert (weak.per_device_batch_size, weak.global_batch_size, weak.micro_batch_size) == (
        24,
        96,
        8,
    )


def test_a_built_in_workload_refuses_an_accumulation_that_does_not_divide() -> None:
    cfg = load_train_config(
        REPO / "configs/spiral.yaml",
        {"trainer": {"batch_size": 256, "accumulate_grad_batches": 3, "devices": 2}},
    )
    batch = resolve_batch(cfg.trainer, 2)
    assert batch.micro_batch_size is None
    with pytest.raises(ConfigError) as err:
        check_workload(cfg, batch)
    assert str(err.value) == (
        "trainer.accumulate_grad_batches: 3 micro-batches do not divide the per-device batch "
        "of 128; pick a divisor of it (or another trainer.batch_size)"
    )


USER = textwrap.dedent(
    """
    import lightning as L

    class Model(L.LightningModule):
        pass

    class Data(L.LightningDataModule):
        def __init__(self, batch_size: int = 4) -> None:
            super().__init__()
            self.batch_size = batch_size

    class FixedData(L.LightningDataModule):
        pass
    """
)


def test_a_user_constructor_is_given_the_micro_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "acc_mod.py").write_text(USER)
    monkeypatch.syspath_prepend(str(tmp_path))

    train = tmp_path / "train.yaml"
    train.write_text("name: user\ntracking: {mode: 'off'}\n")

    def cfg(datamodule: str, acc: int):  # type: ignore[no-untyped-def]
        return load_train_config(
            train,
            {
                "workload": {"name": "acc_mod:Model", "datamodule": f"acc_mod:{datamodule}"},
                "trainer": {"batch_size": 64, "accumulate_grad_batches": acc},
            },
        )

    c = cfg("Data", 4)
    resolved = check_workload(c, resolve_batch(c.trainer, 2))
    assert resolved.datamodule_kwargs == {"batch_size": 8}  # 64 / 2 ranks / 4 passes
    c = cfg("Data", 3)
    with pytest.raises(ConfigError, match=r"do not divide the per-device batch of 32; .*"):
        check_workload(c, resolve_batch(c.trainer, 2))
    # A data module that takes no batch_size is not refused: its loader decides the batch.
    c = cfg("FixedData", 3)
    assert check_workload(c, resolve_batch(c.trainer, 2)).datamodule_kwargs == {}


def test_find_unused_parameters_is_ddps_and_left_unused_by_the_sharded_strategies() -> None:
    """A sweep crossing strategies with it on runs its fsdp and hsdp jobs too: they take a
    backward that leaves parameters without a gradient as it is."""
    for strategy in ("ddp", "fsdp", "hsdp"):
        cfg = load_train_config(
            None, [f"trainer.strategy={strategy}", "trainer.find_unused_parameters=true"]
        )
        assert cfg.trainer.find_unused_parameters is True
