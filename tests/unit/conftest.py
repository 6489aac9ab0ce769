"""The unit tier runs in this process: any attempt to start a process fails the test.

The guard covers every way a test could start one: subprocess (``_posixsubprocess``),
``os.fork``/``forkpty``, ``posix_spawn``, ``os.system``/``popen`` and multiprocessing (which
goes through the same calls). It is on around each test's setup (fixtures of any scope
included), call and teardown, so the tier cannot fill up with processes again. A test that
needs a real process belongs in tests/integration.
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_GUARDED: list[tuple[Any, str]] = [
    (_posixsubprocess, "fork_exec"),  # multiprocessing's spawn and forkserver
    (subprocess, "_fork_exec"),  # subprocess keeps its own reference
    (subprocess, "_USE_POSIX_SPAWN"),  # made False: posix_spawn below is refused too
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
    (os, "popen"),
]


class ProcessStarted(AssertionError):
    pass


def _refuse(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ProcessStarted(
            f"a unit test started a process ({what}); unit tests run in-process: call the "
            "function (analysis.summarize.main, scalescope.cli.main) or move the test to "
            "tests/integration"
        )

    return refuse


@contextlib.contextmanager
def refuse_process_starts() -> Iterator[None]:
    saved = [(obj, name, getattr(obj, name)) for obj, name in _GUARDED if hasattr(obj, name)]
    for obj, name, _ in saved:
        refused = False if name == "_USE_POSIX_SPAWN" else _refuse(f"{obj.__name__}.{name}")
        setattr(obj, name, refused)
    try:
        yield
    finally:
        for obj, name, original in saved:
            setattr(obj, name, original)


# Hook wrappers rather than an autouse fixture: they also cover module- and session-scoped
# fixtures, which pytest sets up before any function-scoped fixture could switch a guard on.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with refuse_process_starts():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with refuse_process_starts():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with refuse_process_starts():
        yield
