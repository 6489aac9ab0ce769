"""How long the collectives' kernels ran in a synced pass: a short profiler window, after training.

NVML's utilisation (:mod:`.compute_split`) counts a moment as busy whenever any kernel runs,
and on several GPUs that includes the collectives' own: DDP's all-reduce kernels running
beside backward, and the one that spins while it waits for a slower peer. To leave only the
work inside compute, the split needs the time in which a collective's kernel ran *alone*.

Measured here as one more calibration window (:mod:`.calibration`), after its timed pairs:
``k`` forward+backward passes with gradient sync under ``torch.profiler`` with only its CUDA
activity, the kernels' own start and end on the device (CUPTI), summarised by
:func:`scalescope.traces.collective_kernels`: per pass, the time some collective's kernel ran
(``kernel_s``) and the part of it in which no other kernel ran (``alone_s``). Why this and not
CUDA events around each bucket's all-reduce:

* **Correct.** The kernels' own times say which moments a collective ran beside backward's
  kernels and which alone; a pair of events brackets a stream interval (including the time a
  bucket queues behind the previous one) and cannot tell the overlap, which is exactly what
  separates NVML's busy time into the two. Events would also need a comm hook in place of
  DDP's built-in all-reduce, which changes what is measured.
* **Cheap where it counts.** Nothing runs in the timed steady state: the window comes after
  training, beside the calibration's, and costs ``k`` passes and the profiler's start
  (included in the calibration's ``seconds``). Events would cost every steady step.

What it does not see: the window starts every rank together from a barrier on the same batch,
so it holds no wait for a slower rank; :mod:`.compute_split` adds the steady state's own wait
for others (``wait_s``, in which only the collective's kernel runs, spinning). The profiler's
per-launch overhead can spread backward's kernels a little, so the lone time leans high.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import described

SOURCE = "torch.profiler (CUDA kernels) over synced calibration passes, after training"
CPU_REASON = "a CPU run: no kernels to time"


def not_measured(reason: str) -> dict[str, Any]:
    return {"status": "not measured", "reason": reason}


def measured(summary: dict[str, Any], passes: int) -> dict[str, Any]:
    """This rank's part from :func:`scalescope.traces.collective_kernels` over ``passes``
    synced passes: per pass; not measured where the profiler recorded no kernel at all."""
    if not summary.get("kernels"):
        return not_measured("the profiler recorded no kernel")
    return {
        "status": "measured",
        "reason": None,
        "source": SOURCE,
        "passes": passes,
        "kernels": summary["kernels"],
        "collective_kernels": summary["collective_kernels"],
        "kernel_s": summary["kernel_s"] / passes,
        "alone_s": summary["alone_s"] / passes,
        "by_operation": {
            op: {"calls": part["calls"] / passes, "alone_s": part["alone_s"] / passes}
            for op, part in (summary.get("by_operation") or {}).items()
        },
    }


def profiled_window(
    one_pass: Callable[[], None], sync: Callable[[], None], k: int, *, cuda: bool
) -> dict[str, Any]:
    """``k`` synced passes (``one_pass``; every rank runs them, so every all-reduce has its
    peers), under the profiler where it starts: this rank's ``comm_kernels`` part. ``sync``
    waits for the device. A pass that raises propagates, as one in a timed window does; the
    profiler's own failures are the part's reason, never the job's. A CPU run has no kernels
    to time: no pass runs (every rank of a job is on the same kind of device)."""
    if not cuda:
        return not_measured(CPU_REASON)
    from ...traces import collective_kernels, read_trace

    prof: Any = None
    why = ""
    try:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CUDA])
        sync()
        prof.start()
    except Exception as exc:  # the passes still run: the peers' all-reduces need them
        prof, why = None, f"the profiler did not start: {described(exc)}"
    try:
        for _ in range(k):
            one_pass()
        sync()
    finally:
        if prof is not None:
            prof.stop()
    if prof is None:
        return not_measured(why)
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "collectives.json"
            prof.export_chrome_trace(str(path))
            summary = collective_kernels(read_trace(path))
    except Exception as exc:
        return not_measured(f"reading the profile failed: {described(exc)}")
    return measured(summary, k)
