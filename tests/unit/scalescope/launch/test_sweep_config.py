"""The sweep's config and its plan (scalescope.launch.sweep_config): the axes a sweep runs
over (shapes, precisions, gradient accumulation), what it refuses before anything is
submitted, and the node counts it projects to."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from sweep_helpers import plan_of, write_sweep

from scalescope.errors import ConfigError
from scalescope.launch.dry_run import dry_run_lines
from scalescope.launch.sweep_config import SweepConfig, load_sweep_config, plan_sweep
from scalescope.schema import build


def test_a_sweep_names_its_projection_nodes() -> None:
    base = {"name": "s", "train_config": "t.yaml", "shapes": [{"nodes": 1, "devices_per_node": 1}]}
    assert build(SweepConfig, {**base, "project_nodes": [2, 8]}).project_nodes == [2, 8]
    with pytest.raises(ConfigError, match="project_nodes: 0 is not a node count"):
        build(SweepConfig, {**base, "project_nodes": [0]}).validate("s.yaml")


def test_a_folder_of_earlier_runs_across_nodes_is_a_network_and_a_train_config_is_a_file(
    in_tmp: Path,
) -> None:
    """``project_network`` may name a folder of earlier scalescope runs across nodes (the
    network their all-reduce sweeps measured, read before submission); ``train_config``
    names a file, and a folder there is said to be one."""
    from projection_helpers import write_runs_across_nodes

    extra = "project_nodes: [2, 4]\nproject_network: earlier\n"
    sweep = write_sweep(in_tmp, shapes=((1, 1),), extra=extra)
    earlier = write_runs_across_nodes(sweep.parent / "earlier")
    got = plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    assert got.project_network == earlier.absolute()
    folder = write_sweep(in_tmp, shapes=((1, 1),), train_path="..")
    with pytest.raises(ConfigError, match=r"train_config '\.\.' is a folder .*name a file"):
        plan_sweep(load_sweep_config(folder), folder, executor="local", sweep_id="t")


def test_a_sweep_names_its_projections_network_and_it_is_read_before_submission(
    in_tmp: Path,
) -> None:
    """``project_network`` (the summary's ``--network``) is found beside the sweep file and
    read as the summary will read it, before anything is submitted; it travels to the summary
    as an absolute path."""
    nodes = "project_nodes: [2, 4]\n"
    sweep = write_sweep(in_tmp, shapes=((1, 1),), extra=f"{nodes}project_network: net.yaml\n")
    net = sweep.parent / "net.yaml"

    def plan():  # type: ignore[no-untyped-def]
        return plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")

    with pytest.raises(ConfigError, match=r"project_network 'net.yaml' not found \(looked for"):
        plan()
    net.mkdir()  # a folder: earlier scalescope runs across nodes, and this one holds none
    with pytest.raises(ConfigError, match=r"project_network: .*no scalescope run across nodes"):
        plan()
    net.rmdir()
    net.write_text("inter_line_rate_gbit_s: 0\n")
    with pytest.raises(ConfigError, match=r"project_network: .*inter_line_rate_gbit_s must be a"):
        plan()
    net.write_text("inter_line_rate_gbit_s: 800\n")
    got = plan()
    assert got.project_network == net.absolute()
    # --dry-run says what the summary will do, as it was checked
    summary = [line for line in dry_run_lines(got, "asked for") if "summary" in line]
    where = net.relative_to(in_tmp)  # as --dry-run names files: from where it runs
    assert summary == [f"  summary       projects to 2, 4 node(s) on the network of {where}"]
    bare = write_sweep(in_tmp, shapes=((1, 1),))
    bare_plan = plan_sweep(load_sweep_config(bare), bare, executor="local", sweep_id="t")
    assert not [line for line in dry_run_lines(bare_plan, "asked for") if "summary" in line]
    alone = write_sweep(in_tmp, shapes=((1, 1),), extra="project_network: net.yaml\n")
    with pytest.raises(ConfigError, match="project_network: the summary projects only where"):
        load_sweep_config(alone)


def test_the_sweeps_network_reaches_its_summary(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The sweep's end: run_summary hands the sweep file's network to summarize_sweep, which
    gives it to the summary as ``--network``."""
    import analysis.commands.summarize as summarize_command
    import analysis.summarize
    from scalescope.launch.sweep import run_summary

    net = tmp_path / "net.yaml"
    got: dict = {}
    monkeypatch.setattr(
        analysis.summarize, "summarize_sweep", lambda folder, **kw: got.update(kw) or 0
    )
    plan = SimpleNamespace(
        sweep_dir=tmp_path,
        project_nodes=(4,),
        summary_plan=None,
        sweep_file=None,
        project_network=net,
    )
    assert run_summary(plan, None) == 0  # type: ignore[arg-type]
    assert got == {"project_nodes": (4,), "network": net}
    monkeypatch.undo()
    seen: dict = {}
    monkeypatch.setattr(summarize_command, "guarded", lambda fn, args: seen.update(vars(args)) or 0)
    assert summarize_command.summarize_sweep(tmp_path, project_nodes=(4,), network=net) == 0
    assert seen["network"] == str(net) and seen["project"] == [4]


def test_a_sweep_names_the_training_its_summary_plans(in_tmp: Path) -> None:
    """``plan:`` is checked where it is read and travels to the summary as its fields."""
    base = {"name": "s", "train_config": "t.yaml", "shapes": [{"nodes": 1, "devices_per_node": 1}]}
    got = build(SweepConfig, {**base, "plan": {"work": 2e11, "unit": "tokens"}}).plan
    assert got is not None and (got.work, got.unit, got.floor) == (2e11, "tokens", 0.7)
    with pytest.raises(ConfigError, match=r"s.yaml.plan.work: must be > 0, got 0"):
        build(SweepConfig, {**base, "plan": {"work": 0}}, where="s.yaml")
    with pytest.raises(ConfigError, match=r"plan.unit: expected 'samples' or 'tokens' or 'steps'"):
        build(SweepConfig, {**base, "plan": {"work": 1, "unit": "images"}}, where="s.yaml")
    # 4e6 without a dot: a number to the sweep file's YAML 1.2 reader, as the README writes it
    sweep = write_sweep(in_tmp, shapes=((1, 1),), extra="plan: {work: 4e6, unit: steps}\n")
    plan = plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    assert plan.summary_plan == {
        "work": 4e6,
        "unit": "steps",
        "floor": 0.7,
        "charge": "node",
        "charge_factor": None,
        "price_per_gpu_hour": None,
    }
    assert "  summary       plans 4e+06 steps" in dry_run_lines(plan, "asked for")


def test_the_sweep_axis_runs_every_shape_at_each_accumulation(in_tmp: Path) -> None:
    sweep = write_sweep(
        in_tmp,
        shapes=((1, 1), (1, 2)),
        extra='precisions: ["32", "bf16-mixed"]\naccumulate_grad_batches: [1, 4]\nrepeats: 2\n',
    )
    plan = plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    assert plan.num_jobs == 16
    triples = {(sp.shape.label, sp.precision, sp.accumulate) for sp in plan.shapes}
    assert len(triples) == 8
    for sp in plan.shapes:
        assert sp.config.trainer.accumulate_grad_batches == sp.accumulate
        assert sp.label == f"{sp.shape.label}@{sp.precision}@acc{sp.accumulate}"
    (round_one,) = {r for r, _ in plan.submission_order()[:8]}
    assert round_one == 0


@pytest.mark.parametrize(
    ("extra", "overrides", "message"),
    [
        ("accumulate_grad_batches: []\n", "", "accumulate_grad_batches: the list is empty"),
        ("accumulate_grad_batches: [2, 2]\n", "", "accumulate_grad_batches: 2 is listed twice"),
        ("accumulate_grad_batches: [0]\n", "", "accumulate_grad_batches: 0 is not a count"),
        (
            "accumulate_grad_batches: [1, 2]\n",
            "  trainer.accumulate_grad_batches: 2\n",
            "override trainer.accumulate_grad_batches: the sweep's accumulate_grad_batches list",
        ),
        (
            "accumulate_grad_batches: [1, 3]\n",
            "",
            "with 3 micro-batches per step: trainer.accumulate_grad_batches: 3 micro-batches "
            "do not divide",
        ),
    ],
)
def test_a_wrong_accumulation_axis_is_refused_before_anything_is_submitted(
    in_tmp: Path, extra: str, overrides: str, message: str
) -> None:
    sweep = write_sweep(in_tmp, extra=extra, overrides=overrides)
    with pytest.raises(ConfigError, match=None) as err:
        plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    assert message in str(err.value)


def test_without_the_list_every_run_uses_the_train_configs_precision(in_tmp: Path) -> None:
    sweep = write_sweep(in_tmp, extra="repeats: 2\n", overrides="  trainer.precision: bf16-mixed\n")
    plan = plan_of(sweep)
    assert plan.num_jobs == 4
    assert [sp.precision for sp in plan.shapes] == ["bf16-mixed", "bf16-mixed"]
    assert [sp.label for sp in plan.shapes] == ["1x1", "1x2"]  # labels unchanged


GPT_TRAIN = "name: g\nworkload: {name: gpt}\ntrainer: {batch_size: 8, accelerator: cpu}\n"


@pytest.mark.parametrize("train", ["spiral", "resnet"])
def test_a_plan_in_tokens_on_a_workload_that_counts_none_is_refused_up_front(
    in_tmp: Path, train: str
) -> None:
    """What the summary would refuse after every job ran is refused before anything is
    submitted, naming the sweep file, the key and what would be valid."""
    text = f"name: t\nworkload: {{name: {train}}}\ntrainer: {{batch_size: 8, accelerator: cpu}}\n"
    sweep = write_sweep(
        in_tmp, shapes=((1, 1),), train=text, extra="plan: {work: 2e11, unit: tokens}\n"
    )
    with pytest.raises(ConfigError) as caught:
        plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    said = str(caught.value)
    assert said.startswith(f"{sweep}: plan.unit: tokens, but workload {train} counts no tokens")
    assert "plan in samples or steps" in said and "\n" not in said


def test_a_plan_in_tokens_on_gpt_or_in_samples_passes(in_tmp: Path) -> None:
    tokens = write_sweep(
        in_tmp, shapes=((1, 1),), train=GPT_TRAIN, extra="plan: {work: 2e11, unit: tokens}\n"
    )
    plan = plan_sweep(load_sweep_config(tokens), tokens, executor="local", sweep_id="t")
    assert plan.summary_plan is not None and plan.summary_plan["unit"] == "tokens"
    samples = write_sweep(in_tmp, shapes=((1, 1),), extra="plan: {work: 4e6}\n")
    assert plan_sweep(load_sweep_config(samples), samples, executor="local", sweep_id="u")


def test_a_users_module_plans_in_tokens_once_its_train_config_says_how_many(
    in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key ``workload.tokens_per_sample`` (here as a sweep override) is what the check
    reads; without it (and without the attribute) the plan is refused naming both ways."""
    import shutil
    import sys

    from core_helpers import REPO

    monkeypatch.setattr(sys, "path", list(sys.path))
    shutil.copytree(REPO / "examples", in_tmp / "examples", ignore=shutil.ignore_patterns("__py*"))
    train = (REPO / "examples" / "my_project.yaml").read_text()
    plan_line = "plan: {work: 2e9, unit: tokens}\n"
    sweep = write_sweep(in_tmp, shapes=((1, 1),), train=train, extra=plan_line)
    with pytest.raises(
        ConfigError,
        match=r"plan.unit: tokens, but workload examples.*"
        r"set workload.tokens_per_sample",
    ):
        plan_sweep(load_sweep_config(sweep), sweep, executor="local", sweep_id="t")
    said = write_sweep(
        in_tmp,
        shapes=((1, 1),),
        train=train,
        extra=plan_line,
        overrides="  workload.tokens_per_sample: 64\n",
    )
    plan = plan_sweep(load_sweep_config(said), said, executor="local", sweep_id="u")
    assert plan.shapes[0].config.workload["tokens_per_sample"] == 64
