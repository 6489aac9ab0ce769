"""Time limits stretch with the machine's speed (tests/time_limits.py): a limit is there to
stop a hung test, not to fail a slow machine."""

from __future__ import annotations

import pytest
from time_limits import MAX_TIMEOUT_SCALE, REFERENCE_LOOP_S, timeout_scale

pytest_plugins = ["pytester"]


def test_the_scale_is_the_loops_time_against_the_reference_within_bounds() -> None:
    assert timeout_scale(REFERENCE_LOOP_S * 3) == pytest.approx(3.0)
    assert timeout_scale(REFERENCE_LOOP_S / 2) == 1.0  # a faster machine keeps the limits
    assert timeout_scale(REFERENCE_LOOP_S * 100) == MAX_TIMEOUT_SCALE
    assert timeout_scale(REFERENCE_LOOP_S * 100, "2.5") == 2.5


@pytest.mark.parametrize("bad", ["fast", "0", "-1"])
def test_a_wrong_override_is_named(bad: str) -> None:
    with pytest.raises(pytest.UsageError, match=f"SCALESCOPE_TIMEOUT_SCALE='{bad}'"):
        timeout_scale(1.0, bad)


SLOW_TEST = """
import time
import pytest

@pytest.mark.timeout(0.5)
def test_slow_but_not_hung():
    time.sleep(1.2)

def test_under_the_ini_limit():
    time.sleep(1.2)
"""

CONFTEST = """
from time_limits import measure_scale, stretch_limits

def pytest_collection_modifyitems(config, items):
    stretch_limits(config, items, measure_scale())
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("scale", "passed"), [("1", 0), ("4", 2)])
def test_each_limit_its_own_mark_or_the_ini_stretches_by_the_scale(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, scale: str, passed: int
) -> None:
    """Real pytest-timeout limits of 0.5 s (a test's own mark) and 0.5 s (the ini's), on tests
    that take 1.2 s: both fail as they are, both pass stretched four times (2 s)."""
    monkeypatch.setenv("SCALESCOPE_TIMEOUT_SCALE", scale)
    pytester.makeini("[pytest]\ntimeout = 0.5\ntimeout_method = signal\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(SLOW_TEST)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:xdist")
    result.assert_outcomes(passed=passed, failed=2 - passed)
