"""The record's ``compile`` section from dynamo's compile clock (pure logic: the readings are
set as the callback would have taken them)."""

from __future__ import annotations

from scalescope.job.clocks.compiling import CompileClock, compile_seconds
from scalescope.job.clocks.timing import Timings


def _clock(start: float, warm: float | None, end: float, *, val: float = 0.0, val_after=0.0):  # type: ignore[no-untyped-def]
    c = CompileClock(Timings(process_start_unix=0.0), backend="inductor")
    c.start, c.at_warmup, c.end = start, warm, end
    c.validation, c.validation_after_warmup = val, val_after
    return c


def test_compiling_in_the_warm_up_only() -> None:
    s = _clock(1.0, 13.0, 14.5, val=1.5, val_after=1.5).section(True)
    assert s is not None
    assert (s["by"], s["backend"], s["enabled"]) == ("scalescope", "inductor", True)
    assert s["warmup_s"] == 12.0 and s["steady_s"] == 0.0
    assert s["training_s"] == 12.0 and s["validation_s"] == 1.5 and s["warnings"] == []


def test_a_recompilation_in_the_steady_state_is_a_warning() -> None:
    s = _clock(0.0, 5.0, 7.0).section(True)
    assert s is not None and s["steady_s"] == 2.0
    (warning,) = s["warnings"]
    assert warning.startswith("2.00 s of compiling fell in the steady state")


def test_an_eager_run_has_no_section_and_a_self_compiling_module_has_one() -> None:
    assert _clock(0.0, 0.0, 0.0).section(False) is None
    s = _clock(3.0, 4.0, 4.0).section(False)
    assert s is not None and (s["by"], s["backend"], s["enabled"]) == ("module", None, False)
    assert s["before_s"] == 3.0 and s["warmup_s"] == 1.0
    # compiled before training only (the FLOPs probe's copy): recorded, nothing timed
    s = _clock(3.0, 3.0, 3.0).section(False)
    assert s is not None and s["before_s"] == 3.0 and s["training_s"] == 0.0


def test_training_that_never_left_the_warm_up_has_no_split() -> None:
    s = _clock(0.0, None, 2.0).section(True)
    assert s is not None and s["warmup_s"] is None and s["steady_s"] is None
    assert s["training_s"] == 2.0 and s["warnings"] == []


def test_the_clock_reads_dynamo() -> None:
    """A compilation in this process (dynamo with the eager backend: no code generated) moves
    the clock forward by at least dynamo's own count of the frame's compile time; a clock that
    read nothing, or a key dynamo does not keep, would stay put."""
    import torch
    from torch._dynamo.utils import calculate_time_spent

    before = compile_seconds()
    assert before is not None
    frame_before = calculate_time_spent().get("entire_frame_compile", 0.0)
    fn = torch.compile(lambda x: (x * 2).sin().sum(), backend="eager")
    fn(torch.randn(8))
    after = compile_seconds()
    assert after is not None and after > before
    frame = calculate_time_spent()["entire_frame_compile"] - frame_before
    assert frame > 0 and after - before >= frame * (1 - 1e-9)  # at least the frame's
