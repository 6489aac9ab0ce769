"""Failures the node or the job's resources cause, on their real wordings: a GPU's hardware
fault, the rendezvous port taken, DataLoader workers short of shared memory or killed, a full
disk. Each is its own cause, over the Python exception that reports it and the collective
errors the other ranks see."""

from __future__ import annotations

import pytest

from analysis.read.failures.cause import diagnose
from analysis.read.failures.classify import KEYWORDS, classify_line
from analysis.read.failures.collect import scan_lines

WORDINGS = [
    # CUDA's cudaErrorECCUncorrectable, raised by torch and printed by NCCL
    ("gpu_fault", "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    (
        "gpu_fault",
        "node3:1234:1300 [2] NCCL WARN Cuda failure 'uncorrectable ECC error encountered'",
    ),
    (
        "gpu_fault",
        "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the "
        "system to recover this GPU",
    ),
    ("gpu_fault", "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."),
    # torch's TCPStore on rank 0: torch 2.2+, and the older warning for each address tried
    (
        "port_in_use",
        "RuntimeError: The server socket has failed to listen on any local network address. "
        "port: 12341, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
    ),
    (
        "port_in_use",
        "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:38429 (errno: 98 "
        "- Address already in use).",
    ),
    # a DataLoader worker's bus error, the main process's report of it, and a batch's write
    # into a full /dev/shm
    (
        "shared_memory",
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
        "shared memory (shm).",
    ),
    (
        "shared_memory",
        "RuntimeError: DataLoader worker (pid 3527) is killed by signal: Bus error. It is "
        "possible that dataloader's workers are out of shared memory. Please try to raise your "
        "shared memory limit.",
    ),
    ("shared_memory", "RuntimeError: unable to write to file </torch_3531_3962650647>"),
    (
        "shared_memory",
        "RuntimeError: unable to write to file </torch_88_1977_0>: No space left on device (28)",
    ),
    ("host_oom", "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed."),
    ("disk_full", "OSError: [Errno 28] No space left on device"),
    ("disk_full", "OSError: [Errno 122] Disk quota exceeded: '/scratch/u/ckpt/last.ckpt'"),
    ("disk_full", "tar: out.tar: Cannot write: No space left on device"),
]


@pytest.mark.parametrize(
    ("code", "line"), WORDINGS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(WORDINGS)]
)
def test_each_wording_is_its_cause(code: str, line: str) -> None:
    assert KEYWORDS.search(line.encode()), "the byte prefilter would skip the line"
    assert code in [c for c, _ in classify_line(line)]
    # the line's traceback around it (where it is an exception's) does not take it over
    lines = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>', line]
    assert diagnose(scan_lines(enumerate(lines, 1), "slurm-9.out")).code == code


def test_a_full_dev_shm_is_shared_memory_not_a_full_disk() -> None:
    assert classify_line(WORDINGS[9][1]) == [
        ("shared_memory", "a batch's write into /dev/shm failed")
    ]


def test_each_shared_memory_wording_says_which_it_is() -> None:
    details = [dict(classify_line(line))["shared_memory"] for _, line in WORDINGS[6:9]]
    assert details == [
        "a DataLoader worker's bus error (SIGBUS)",
        "DataLoader worker (pid 3527) killed by SIGBUS",
        "a batch's write into /dev/shm failed",
    ]


def test_the_port_is_named_in_either_wording() -> None:
    assert dict(classify_line(WORDINGS[4][1]))["port_in_use"] == ("port 12341 (EADDRINUSE)")
    assert dict(classify_line(WORDINGS[5][1]))["port_in_use"] == ("port 38429 (EADDRINUSE)")


def test_a_quota_is_told_from_a_full_disk() -> None:
    assert dict(classify_line(WORDINGS[12][1]))["disk_full"] == "disk quota exceeded"
    assert dict(classify_line(WORDINGS[11][1]))["disk_full"] == "no space left on device"


def test_a_worker_killed_outright_names_the_oom_killer_as_the_usual_sender() -> None:
    assert dict(classify_line(WORDINGS[10][1]))["host_oom"] == (
        "DataLoader worker (pid 1234) killed by SIGKILL: the kernel's OOM killer, most often"
    )
    # a worker killed by another signal is not read as an OOM kill
    other = "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Terminated."
    assert "host_oom" not in [c for c, _ in classify_line(other)]


def test_a_workers_bus_error_is_the_cause_of_the_exception_that_follows() -> None:
    """The worker prints its bus error; the main process raises a generic error later."""
    lines = [
        "Epoch 0:  12%|#2        | 30/250 [00:04<00:31]",
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
        "shared memory (shm).",
        "Traceback (most recent call last):",
        '  File "/opt/torch/utils/data/dataloader.py", line 1133, in _try_get_data',
        "RuntimeError: DataLoader worker (pid(s) 3527) exited unexpectedly",
    ]
    d = diagnose(scan_lines(enumerate(lines, 1), "slurm-11.out"))
    assert (d.code, d.evidence.line_no if d.evidence else None) == ("shared_memory", 2)
    # the main process's closing line is the worker's death, a consequence here
    assert [e.code for e in d.consequences] == ["worker_died"]


def test_a_gpu_fault_printed_after_the_peers_timeouts_is_still_the_cause() -> None:
    """In one log, srun's: the peers' watchdog fires before the rank whose GPU failed says
    so. Nothing the job printed can have caused a hardware fault."""
    lines = [
        "1: [rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600015 milliseconds before timing out.",
        "0: [rank0]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "srun: error: node7: task 0: Exited with exit code 1",
    ]
    d = diagnose(scan_lines(enumerate(lines, 1), "slurm-12.out"))
    assert d.code == "gpu_fault"
    assert {"collective_timeout", "exit_code"} <= {e.code for e in d.consequences}


def test_between_logs_a_full_disk_is_the_cause_of_the_peers_collective_error() -> None:
    full = scan_lines(
        enumerate(
            ["Traceback (most recent call last):", "OSError: [Errno 28] No space left on device"], 1
        ),
        "rank0.err",
    )
    peer = scan_lines(
        [
            (
                1,
                "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                "remote process exited or there was a network error, NCCL version 2.19.3",
            )
        ],
        "rank1.err",
    )
    assert diagnose([*peer, *full]).code == "disk_full"
