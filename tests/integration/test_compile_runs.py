"""``torch.compile`` in real runs at 2 processes: scalescope compiling a module it never saw
(``trainer.compile``), and a module compiling itself in ``configure_model``.

The backend is ``aot_eager``: dynamo traces and AOTAutograd splits forward and backward, as
with every backend, without generating C++ (inductor's code generation costs tens of seconds
of a 2-core CI machine per process; ``benchmarks/compile_cost.py`` measures inductor).
"""

from __future__ import annotations

from pathlib import Path

from core_helpers import DEMOS, run_demo, run_train


def test_a_compiled_module_compiles_in_the_warm_up_and_keeps_eager_flops(tmp_path: Path) -> None:
    run = run_demo(
        tmp_path,
        "BoringModel",
        "BoringDataModule",
        "trainer.max_epochs=2",
        "trainer.compile=true",
        "trainer.compile_backend=aot_eager",
    )
    assert run.returncode == 0, run.describe()
    (r,) = run.results()
    c = r.compile
    assert c is not None and c["enabled"] is True and c["by"] == "scalescope"
    assert c["backend"] == "aot_eager"
    # The first step compiled the training graph: inside the warm-up (the first epoch), none
    # of it in the steady state, which is why no warning was printed.
    assert c["warmup_s"] > 0 and c["training_s"] >= c["warmup_s"]
    assert c["steady_s"] < 0.01 and c["warnings"] == []
    assert "compiling fell in the steady state" not in run.stdout
    assert c["validation_s"] > 0  # the eval-mode graph, compiled during validation
    # FLOPs from the eager module (the probe runs before the forward is compiled)
    assert r.flops_source == "measured" and r.model_flops_per_sample > 0
    assert r.steps == 64 and r.identity.per_device_batch_size == 1
    assert r.steady_samples_per_s is not None and r.steady_samples_per_s > 0
    assert r.diagnosis["status"] == "recorded"


SELF_COMPILING = """
import torch
from lightning.pytorch.demos.boring_classes import BoringModel


class SelfCompiling(BoringModel):
    def configure_model(self):
        self.layer = torch.compile(self.layer, backend="aot_eager")

    def flops_per_sample(self):  # no FLOPs probe: its copy would compile first
        return 256.0
"""


def test_a_module_that_compiles_itself_is_recorded_and_a_steady_state_compile_warned(
    tmp_path: Path,
) -> None:
    """No warm-up: the module's own compilation falls in the steady state, and the record and
    the output say so."""
    (tmp_path / "self_compiling.py").write_text(SELF_COMPILING)
    run = run_train(
        tmp_path,
        "tracking.mode='off'",
        "trainer.devices=2",
        "workload.name=self_compiling:SelfCompiling",
        f"workload.datamodule={DEMOS}:BoringDataModule",
        "trainer.max_epochs=1",
        "trainer.warmup_steps=0",
        output_dir=tmp_path / "out",
    )
    assert run.returncode == 0, run.describe()
    (r,) = run.results()
    c = r.compile
    assert c is not None and c["enabled"] is False and c["by"] == "module"
    assert c["backend"] is None and c["warmup_s"] == 0.0 and c["before_s"] == 0.0
    assert c["steady_s"] > 0.01 and c["steady_s"] == c["training_s"]
    (warning,) = c["warnings"]
    assert "of compiling fell in the steady state" in warning
    assert f"warning: {warning}" in run.stdout
