"""The lines of a failed job that say CUDA failed it: memory running out on a GPU, and a
CUDA error of the job's own (a kernel that faulted, a device-side assert, a torch build or a
driver that does not fit the node's GPU, a GPU another of its processes holds). A GPU's
hardware fault is the node's, not the job's: :mod:`.classify` reads it with the rest of the
environment."""

from __future__ import annotations

import re

CUDA_OOM = re.compile(
    r"CUDA out of memory|CUDA error: out of memory|torch(?:\.cuda)?\.OutOfMemoryError"
    r"|(?P<nccl>Cuda failure '?out of memory)|(?P<cublas>CUBLAS_STATUS_ALLOC_FAILED)",
    re.IGNORECASE,
)
_OOM_DETAIL = {
    # NCCL's report of its own buffers' allocation ("Last error: Cuda failure 'out of memory'")
    "nccl": "NCCL could not allocate its buffers (Cuda failure 'out of memory')",
    # cuBLAS's handle and workspace, allocated at the first matrix product
    "cublas": (
        "cuBLAS could not allocate its workspace (CUBLAS_STATUS_ALLOC_FAILED): the GPU's "
        "memory ran out, most often"
    ),
}
# NCCL's check that no two ranks of a communicator share a GPU (ncclInvalidUsage)
_SHARED_GPU = re.compile(
    r"Duplicate GPU detected ?: rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA device "
    r"(?P<device>\w+)"
)
_MAPPING_HINT = (
    "how the job maps ranks to GPUs: each rank's CUDA_VISIBLE_DEVICES, --gpus-per-task, "
    "devices per node"
)
# A CUDA error of the job's own (not a GPU's hardware fault, not memory running out), as
# torch raises it ("RuntimeError: CUDA error: an illegal memory access was encountered") and
# NCCL prints it ("NCCL WARN Cuda failure 'an illegal memory access was encountered'"): a
# kernel that faulted, a torch build without kernels for the GPU, a driver older than the
# CUDA torch was built with (torch's "The NVIDIA driver on your system is too old"), a GPU
# that another process holds in exclusive-process mode (most often a second rank given it)
_CUDA_ERROR = re.compile(
    r"(?P<image>no kernel image is available for execution on the device)"
    r"|(?P<driver>CUDA driver version is insufficient for CUDA runtime version"
    r"|NVIDIA driver on your system is too old)"
    r"|(?P<assert>device-side assert triggered)"
    r"|(?P<busy>all CUDA-capable devices are busy or unavailable)"
    r"|(?P<fault>an illegal memory access was encountered|misaligned address"
    r"|an illegal instruction was encountered|unspecified launch failure)",
    re.IGNORECASE,
)
# the kernel's own line of a device-side assert, printed before torch raises it:
# ".../Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [5,0,0]
# Assertion `t >= 0 && t < n_classes` failed."
_DEVICE_ASSERT = re.compile(
    r"(?P<kernel>\w+): block: \[[\d,]+\], thread: \[[\d,]+\] Assertion `(?P<cond>.*?)` failed"
)
_WARNING = re.compile(r"Warning: |CUDA initialization: ")
_ASSERT_HINT = (
    "(most often an index out of range: a label >= the classes, a token id >= the "
    "vocabulary); CUDA_LAUNCH_BLOCKING=1 names the operation"
)
_CUDA_ERROR_DETAIL = {
    "image": (
        "no kernel image for the node's GPU: this torch build lacks its compute capability "
        "(torch.cuda.get_arch_list()); install a torch build for that GPU"
    ),
    "driver": (
        "the node's NVIDIA driver is older than the CUDA this torch was built with: install "
        "a torch build for an older CUDA, or a newer driver"
    ),
    "assert": "a device-side assert in a GPU kernel " + _ASSERT_HINT,
    "busy": (
        "the GPU is held by another process (cudaErrorDevicesUnavailable: a GPU in "
        "exclusive-process compute mode takes one process): two ranks given one GPU "
        f"({_MAPPING_HINT}) or a stale process of an earlier job on the node (nvidia-smi)"
    ),
    "fault": (
        "a GPU kernel faulted ({what}): the job's code or an extension's, or the GPU where it "
        "happens on one node only; CUDA_LAUNCH_BLOCKING=1 names the operation"
    ),
}


def cuda_oom(line: str) -> list[tuple[str, str]]:
    """CUDA memory running out, with the allocation that failed where the line says (or the
    library whose allocation failed: NCCL's buffers, cuBLAS's workspace)."""
    m = CUDA_OOM.search(line)
    if m is None:
        return []
    if m.lastgroup in _OOM_DETAIL:
        return [("cuda_oom", _OOM_DETAIL[m.lastgroup])]
    m = re.search(r"Tried to allocate [\d.]+ \w+", line)
    return [("cuda_oom", m.group(0) if m else "CUDA out of memory")]


def cuda_error(line: str) -> list[tuple[str, str]]:
    """A CUDA error of the job's own: which kind, and what fixes it or finds it."""
    m = _DEVICE_ASSERT.search(line)
    if m:
        where = f"`{m.group('cond')}` failed in {m.group('kernel')}"
        return [("cuda_error", f"a device-side assert: {where} " + _ASSERT_HINT)]
    m = _SHARED_GPU.search(line)
    if m:
        return [
            (
                "cuda_error",
                f"ranks {m.group('a')} and {m.group('b')} on one GPU (CUDA device "
                f"{m.group('device')}, NCCL's Duplicate GPU detected): {_MAPPING_HINT}",
            )
        ]
    m = _CUDA_ERROR.search(line)
    if not m:
        return []
    kind = m.lastgroup or "fault"
    if kind == "driver" and _WARNING.search(line):
        return []  # torch's warning at CUDA's start-up: a job on the CPU goes on without it
    return [("cuda_error", _CUDA_ERROR_DETAIL[kind].format(what=m.group(0).lower()))]
