"""Time limits that stretch on a slow machine (used by tests/conftest.py).

Every test has a time limit (pyproject.toml's ``timeout``, or its own ``@pytest.mark.timeout``)
so that one hung fixture cannot eat a CI run. The limits were set on one machine; on a machine
three times slower a test that takes a minute there takes three, and a limit that does not
stretch fails it for being slow, not for hanging. So each limit is multiplied by how much
slower than the reference this machine runs a fixed workload (:func:`loop_seconds`).
"""

from __future__ import annotations

import os
import time

import pytest

REFERENCE_LOOP_S = 0.03
"""What :func:`loop_seconds` takes on the machine the tests' limits were set on, from the ratio
of one workload timed on both: the cross-validated backtest took 88 s there, and 339 s on a
machine where :func:`loop_seconds` took 0.11 s."""
MAX_TIMEOUT_SCALE = 8.0
"""The most a limit stretches: past it, a machine too slow for the suite fails it."""
TIMEOUT_SCALE = pytest.StashKey[float]()


def loop_seconds() -> float:
    """The fastest of three runs of a fixed workload like the slowest unit tests' (the
    projection's draws: many small numpy operations, driven from Python): how fast one core
    runs it here (the fastest, so that a moment's load elsewhere counts least)."""
    import numpy as np

    values = np.linspace(0.05, 1.0, 400)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for i in range(2_000):
            weight = np.exp(-0.5 * (np.log(values / (0.3 + i % 7 / 10)) / 0.05) ** 2)
            float(np.median(weight))
        best = min(best, time.perf_counter() - start)
    return best


def timeout_scale(measured: float, override: str | None = None) -> float:
    """How many times its limit a test may run here: ``measured`` (:func:`loop_seconds`)
    against :data:`REFERENCE_LOOP_S`, never below 1 nor above :data:`MAX_TIMEOUT_SCALE`; or
    ``override`` (SCALESCOPE_TIMEOUT_SCALE) where set, a positive number."""
    if override:
        try:
            value = float(override)
        except ValueError:
            raise pytest.UsageError(
                f"SCALESCOPE_TIMEOUT_SCALE={override!r} is not a number"
            ) from None
        if not value > 0:
            raise pytest.UsageError(f"SCALESCOPE_TIMEOUT_SCALE={override!r} is not positive")
        return value
    return min(MAX_TIMEOUT_SCALE, max(1.0, measured / REFERENCE_LOOP_S))


def measure_scale() -> float:
    """:func:`timeout_scale` of this machine (the loop is not run where the override is set)."""
    override = os.environ.get("SCALESCOPE_TIMEOUT_SCALE")
    return timeout_scale(0.0 if override else loop_seconds(), override)


def stretch_limits(config: pytest.Config, items: list[pytest.Item], scale: float) -> None:
    """Each item's limit (its nearest ``timeout`` mark, else the ini's) times ``scale``, as a
    mark nearer the test than any it had (pytest-timeout reads the nearest)."""
    if scale == 1.0:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        mark = item.get_closest_marker("timeout")
        base = default
        if mark is not None:
            base = float(mark.args[0] if mark.args else mark.kwargs.get("timeout", default))
        if base > 0:
            item.add_marker(pytest.mark.timeout(base * scale), append=False)
