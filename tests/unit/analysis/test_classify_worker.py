"""A DataLoader worker that dies takes its own error with it, and the job ends with the main
process's "exited unexpectedly": the cause is how the worker died, with the way to see its
error (num_workers=0). The lines are torch 2.13's, from a dataset whose item 5 exits, aborts or
faults in a worker (two workers)."""

from __future__ import annotations

import re

import pytest

from analysis.read.failures.cause import diagnose
from analysis.read.failures.classify import KEYWORDS, classify_line
from analysis.read.failures.collect import scan_lines


def tail(pids: str) -> list[str]:
    """What the main process prints after the line that says how a worker died: the pids of
    every worker gone by then."""
    return [line.replace("14481", pids) for line in TAIL]


TAIL = [
    "",
    "The above exception was the direct cause of the following exception:",
    "",
    "Traceback (most recent call last):",
    '  File "train.py", line 12, in <module>',
    "    for b in DataLoader(D(), batch_size=2, num_workers=2, timeout=0):",
    '  File "torch/utils/data/dataloader.py", line 1346, in _try_get_data',
    "    raise RuntimeError(",
    "RuntimeError: DataLoader worker (pid(s) 14481) exited unexpectedly",
]
HEAD = [
    "Traceback (most recent call last):",
    '  File "torch/utils/data/dataloader.py", line 1301, in _try_get_data',
    "    data = self._data_queue.get(timeout=timeout)",
    "_queue.Empty",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "torch/utils/data/_utils/signal_handling.py", line 73, in handler',
    "    _error_if_any_worker_fails()",
]


@pytest.mark.parametrize(
    ("said", "detail"),
    [
        (
            [
                "RuntimeError: DataLoader worker (pid 14481) exited unexpectedly with exit code "
                "3. Details are lost due to multiprocessing. Rerunning with num_workers=0 may "
                "give better error trace."
            ],
            "DataLoader worker (pid 14481) exited with exit code 3",
        ),
        (
            ["RuntimeError: DataLoader worker (pid 14502) is killed by signal: Aborted. "],
            "DataLoader worker (pid 14502) killed by signal: Aborted",
        ),
        (
            [
                "ERROR: Unexpected segmentation fault encountered in worker.",
                *HEAD,
                "RuntimeError: DataLoader worker (pid 14492) is killed by signal: Segmentation "
                "fault. ",
            ],
            "a segmentation fault in a DataLoader worker",
        ),
    ],
)
def test_how_the_worker_died_is_the_cause(said: list[str], detail: str) -> None:
    pid = re.search(r"\(pid (\d+)\)", said[-1]).group(1)
    lines = [*said, *tail(pid)] if said[0].startswith("ERROR") else [*HEAD, *said, *tail(pid)]
    for line in lines:
        if classify_line(line):
            assert KEYWORDS.search(line.encode()), line
    d = diagnose(scan_lines(enumerate(lines, 1), "slurm-7.out"))
    assert d.code == "worker_died"
    assert d.detail == f"{detail}: num_workers=0 shows its error"
    # the closing "exited unexpectedly" is the same death told again, not another symptom
    assert len(lines) not in {e.line_no for e in d.consequences}


def test_the_closing_line_alone_still_names_the_worker() -> None:
    assert classify_line(
        "RuntimeError: DataLoader worker (pid(s) 14481, 14482) exited unexpectedly"
    ) == [
        (
            "worker_died",
            "DataLoader worker (pid(s) 14481, 14482) exited unexpectedly: num_workers=0 shows "
            "its error",
        )
    ]


def test_sigkill_and_sigbus_keep_their_own_readings() -> None:
    killed = "RuntimeError: DataLoader worker (pid 9) is killed by signal: Killed. "
    bus = "RuntimeError: DataLoader worker (pid 9) is killed by signal: Bus error. It is possible"
    assert [c for c, _ in classify_line(killed)] == ["host_oom"]
    assert [c for c, _ in classify_line(bus)] == ["shared_memory"]
    # and the job's closing line after a SIGKILL does not outrank it
    lines = [*HEAD, killed, *tail("9")]
    assert diagnose(scan_lines(enumerate(lines, 1), "slurm-8.out")).code == "host_oom"


TIME_LIMIT = (
    "slurmstepd: error: *** JOB 41 ON node1 CANCELLED AT 2026-12-01T20:00:05 DUE TO TIME LIMIT ***"
)
CANCEL = "slurmstepd: error: *** JOB 41 ON node1 CANCELLED AT 2026-12-01T20:00:05 ***"


@pytest.mark.parametrize(
    ("sig", "sender"),
    [
        ("Terminated", "SIGTERM: Slurm's cancel, time limit or preemption, most often"),
        ("Hangup", "SIGHUP: a closed session or a user's kill"),
        ("Interrupt", "SIGINT: Ctrl-C, most often"),
    ],
)
def test_a_worker_killed_from_outside_is_a_task_end_that_slurms_kill_explains(
    sig: str, sender: str
) -> None:
    """Slurm signals every process of a step at a time limit or a cancel, the workers too: the
    main process then raises that a worker was killed by SIGTERM, and closes with "exited
    unexpectedly". That is the kill's consequence wherever its line lands in the log, and
    where the log says nothing else, a task's end sent from outside (torch 2.13's lines for a
    worker killed by SIGTERM or SIGHUP; SIGTERM's at a time limit on the local Slurm cluster,
    where the main process handled SIGTERM and went on)."""
    said = f"RuntimeError: DataLoader worker (pid 11552) is killed by signal: {sig}. "
    # at a time limit on the local Slurm cluster, torch told of one worker and closed with both
    job = [*HEAD, said, *tail("11551, 11552")]
    alone = diagnose(scan_lines(enumerate(job, 1), "slurm-41.out"))
    assert (alone.code, alone.detail) == (
        "exit_code",
        f"DataLoader worker (pid 11552) killed by signal: {sig} ({sender})",
    )
    assert alone.evidence is not None and alone.evidence.line_no == len(HEAD) + 1
    for kill, code in ((TIME_LIMIT, "time_limit"), (CANCEL, "cancelled")):
        for lines in ([kill, *job], [*job, kill]):
            d = diagnose(scan_lines(enumerate(lines, 1), "slurm-41.out"))
            assert d.code == code, lines
            assert d.also_seen == ("exit_code",)
