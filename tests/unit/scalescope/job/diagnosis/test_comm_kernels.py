"""The collectives' kernel time per synced pass (scalescope.job.diagnosis.comm_kernels): a profiler
window after training, read by scalescope.traces.collective_kernels."""

from __future__ import annotations

import pytest

from scalescope.job.diagnosis.comm_kernels import CPU_REASON, measured, profiled_window


def test_the_window_is_per_pass_and_says_when_nothing_was_recorded() -> None:
    """3 passes in which the collectives ran 24 ms, 21 of them alone: 8 and 7 ms a pass."""
    summary = {"kernels": 40, "collective_kernels": 6, "kernel_s": 0.024, "alone_s": 0.021}
    part = measured(summary, passes=3)
    assert part["status"] == "measured" and part["passes"] == 3
    assert (part["kernel_s"], part["alone_s"]) == (pytest.approx(0.008), pytest.approx(0.007))
    assert (part["kernels"], part["collective_kernels"]) == (40, 6)
    empty = {"kernels": 0, "collective_kernels": 0, "kernel_s": 0.0, "alone_s": 0.0}
    assert measured(empty, passes=3) == {
        "status": "not measured",
        "reason": "the profiler recorded no kernel",
    }


def test_a_cpu_run_times_no_kernels_and_runs_no_pass() -> None:
    ran: list[int] = []
    part = profiled_window(lambda: ran.append(1), lambda: None, 3, cuda=False)
    assert part == {"status": "not measured", "reason": CPU_REASON} and ran == []


@pytest.mark.gpu
def test_a_real_profiler_window_on_one_gpu_times_its_kernels() -> None:
    """On a GPU: three passes of matmuls under the profiler. The trace is read back from the
    device's own kernel records: kernels were seen, none of them a collective (one GPU, no
    process group), so the collectives ran 0 s and the part is measured, not missing. The
    collectives' own kernels are timed on two GPUs (tests/integration/test_gpu_collectives.py)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    device = torch.device("cuda", torch.cuda.current_device())
    a = torch.randn(1024, 1024, device=device, requires_grad=True)

    def one_pass() -> None:
        (a @ a).relu().sum().backward()

    part = profiled_window(one_pass, lambda: torch.cuda.synchronize(device), 3, cuda=True)
    assert part["status"] == "measured", part
    assert part["passes"] == 3 and part["kernels"] >= 3 and part["collective_kernels"] == 0
    assert part["kernel_s"] == 0.0 and part["alone_s"] == 0.0
