"""The unit tier's rule holds: every way of starting a process fails the test that tries."""

from __future__ import annotations

import multiprocessing
import os
import subprocess

import pytest

REFUSED = "a unit test started a process"


def test_subprocess_is_refused() -> None:
    with pytest.raises(AssertionError, match=REFUSED):
        subprocess.run(["true"], check=False)


def test_fork_is_refused() -> None:
    with pytest.raises(AssertionError, match=REFUSED):
        os.fork()


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_is_refused(method: str) -> None:
    proc = multiprocessing.get_context(method).Process(target=print)
    with pytest.raises(AssertionError, match=REFUSED):
        proc.start()


def test_os_system_is_refused() -> None:
    with pytest.raises(AssertionError, match=REFUSED):
        os.system("true")
