"""CUDA errors of the job's own, on their real wordings: a kernel that faulted, a
device-side assert, a torch build without kernels for the node's GPU, a driver older than
the CUDA torch was built with. Each is its cause with what finds or fixes it, over the
Python exception that raises it and the collective errors the other ranks then see; a GPU's
hardware fault stays the node's."""

from __future__ import annotations

import pytest

from analysis.read.failures.cause import diagnose
from analysis.read.failures.classify import KEYWORDS, classify_line
from analysis.read.failures.collect import scan_lines

WORDINGS = [
    # torch's, then the two hints it prints below the message
    ("image", "RuntimeError: CUDA error: no kernel image is available for execution on the device"),
    (
        "driver",
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). "
        "Please update your GPU driver by downloading and installing a new version from the "
        "URL: http://www.nvidia.com/Download/index.aspx",
    ),
    (
        "driver",
        "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
    ),
    ("assert", "RuntimeError: CUDA error: device-side assert triggered"),
    (
        "assert",
        "/opt/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d"
        ": block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.",
    ),
    # two ranks on one GPU in exclusive-process mode (torch 2.x, and as torch.AcceleratorError)
    ("busy", "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable"),
    (
        "busy",
        "torch.AcceleratorError: CUDA error: all CUDA-capable devices are busy or unavailable",
    ),
    ("fault", "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"),
    ("fault", "[rank1]: RuntimeError: CUDA error: unspecified launch failure"),
    # NCCL's own report of a CUDA call that failed under it
    (
        "fault",
        "node2:4242:4301 [1] NCCL WARN Cuda failure 'an illegal memory access was encountered'",
    ),
]


ASSERT, KERNEL_ASSERT = WORDINGS[3][1], WORDINGS[4][1]
FAULT = WORDINGS[7][1]


@pytest.mark.parametrize(
    ("kind", "line"), WORDINGS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(WORDINGS)]
)
def test_each_wording_is_a_cuda_error_with_its_remedy(kind: str, line: str) -> None:
    assert KEYWORDS.search(line.encode()), "the byte prefilter would skip the line"
    detail = dict(classify_line(line))["cuda_error"]
    remedy = {
        "image": "install a torch build for that GPU",
        "driver": "older than the CUDA this torch was built with",
        "assert": "CUDA_LAUNCH_BLOCKING=1 names the operation",
        "fault": "CUDA_LAUNCH_BLOCKING=1 names the operation",
        "busy": "two ranks given one GPU",
    }[kind]
    assert remedy in detail, detail
    lines = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>', line]
    d = diagnose(scan_lines(enumerate(lines, 1), "slurm-21.out"))
    assert (d.code, d.detail) == ("cuda_error", detail)


def test_the_kernels_assert_line_names_its_condition_and_is_the_cause() -> None:
    """The kernel prints the failed condition first; torch raises its generic message after:
    the earlier line, with the condition a user can act on, is the cause."""
    lines = [
        KERNEL_ASSERT,
        "Traceback (most recent call last):",
        '  File "train.py", line 9, in <module>',
        ASSERT,
    ]
    d = diagnose(scan_lines(enumerate(lines, 1), "slurm-22.out"))
    assert d.code == "cuda_error" and d.evidence is not None and d.evidence.line_no == 1
    assert "`t >= 0 && t < n_classes` failed in nll_loss_forward_reduce_cuda_kernel_2d" in (
        d.detail
    )


def test_the_fault_names_what_faulted() -> None:
    detail = dict(classify_line(FAULT))["cuda_error"]
    assert detail.startswith("a GPU kernel faulted (an illegal memory access was encountered)")


def test_an_ecc_error_is_still_the_nodes_hardware_not_the_jobs() -> None:
    codes = [c for c, _ in classify_line("RuntimeError: CUDA error: uncorrectable ECC error")]
    assert "cuda_error" not in codes


def test_between_logs_a_ranks_cuda_error_is_the_cause_of_the_peers_collective_error() -> None:
    faulted = scan_lines(enumerate(["Traceback (most recent call last):", FAULT], 1), "rank0.out")
    peer = scan_lines(
        enumerate(
            [
                "[rank1]: torch.distributed.DistBackendError: NCCL error in: "
                "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network "
                "error, NCCL version 2.21.5",
                "ncclRemoteError: A call failed possibly due to a network error or a remote "
                "process exiting prematurely.",
            ],
            1,
        ),
        "rank1.out",
    )
    for logs in ([*peer, *faulted], [*faulted, *peer]):
        d = diagnose(logs)
        assert d.code == "cuda_error" and d.evidence is not None
        assert d.evidence.file == "rank0.out"
        assert "collective_error" in d.also_seen


def test_torchs_warning_of_an_old_driver_is_not_a_cause() -> None:
    """torch warns at CUDA's start-up and goes on (a job on the CPU finishes): only the error
    it raises where a GPU is needed is the cause."""
    warning = (
        "/opt/venv/lib/python3.11/site-packages/torch/cuda/__init__.py:129: UserWarning: CUDA "
        "initialization: The NVIDIA driver on your system is too old (found version 11040). "
        "Please update your GPU driver (Triggered internally at c10/cuda/CUDAFunctions.cpp:108.)"
    )
    assert "cuda_error" not in [c for c, _ in classify_line(warning)]
    lines = [
        warning,
        "slurmstepd: error: *** JOB 77 ON node1 CANCELLED AT 2026-01-01T10:00:00 "
        "DUE TO TIME LIMIT ***",
    ]
    assert diagnose(scan_lines(enumerate(lines, 1), "slurm-77.out")).code == "time_limit"


NCCL_BLOCKS = [
    # NCCL's check that no two ranks share a GPU: two ranks given one GPU
    (
        [
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "ProcessGroupNCCL.cpp:1970, invalid usage (run with NCCL_DEBUG=WARN for details), "
            "NCCL version 2.20.5",
            "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
            "Last error:",
            "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1c000",
        ],
        "cuda_error",
        "ranks 1 and 0 on one GPU (CUDA device 1c000",
    ),
    # NCCL's buffers that did not fit the GPU's memory
    (
        [
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
            "ncclUnhandledCudaError: Call to CUDA function failed.",
            "Last error:",
            "Cuda failure 'out of memory'",
        ],
        "cuda_oom",
        "NCCL could not allocate its buffers",
    ),
    # cuBLAS's workspace, at the first matrix product
    (
        [
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
            "`cublasCreate(handle)`"
        ],
        "cuda_oom",
        "cuBLAS could not allocate its workspace",
    ),
]


@pytest.mark.parametrize(
    ("block", "code", "words"), NCCL_BLOCKS, ids=["duplicate-gpu", "nccl-oom", "cublas-oom"]
)
def test_what_nccl_or_cublas_says_below_its_error_is_the_cause(
    block: list[str], code: str, words: str
) -> None:
    """NCCL explains its error below it (``Last error:``): read alone, its first line was a
    collective error, a peer exited or the network failed; the explanation is the cause
    (two ranks on one GPU; the GPU's memory), with the NCCL error its consequence. And
    cuBLAS's failed allocation is the GPU's memory running out, not a bare exception."""
    assert KEYWORDS.search(block[-1].encode()), "the byte prefilter would skip the cause"
    lines = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>']
    d = diagnose(scan_lines(enumerate([*lines, *block], 1), "slurm-23.out"))
    assert d.code == code and words in d.detail, (d.code, d.detail)
    if len(block) > 1:
        assert "collective_error" in d.also_seen


def test_a_peers_collective_error_printed_first_in_a_shared_log_is_still_a_consequence() -> None:
    """In a log every rank writes to, a rank's CUDA failure may reach the file after the
    collective error its peer saw when it died: the CUDA failure is the cause."""
    lines = [
        "[rank1]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
        "Connection closed by peer [10.0.0.5]:23456",
        "[rank0]: Traceback (most recent call last):",
        f"[rank0]: {FAULT}",
    ]
    d = diagnose(scan_lines(enumerate(lines, 1), "slurm-24.out"))
    assert d.code == "cuda_error" and d.also_seen == ("collective_error",)
