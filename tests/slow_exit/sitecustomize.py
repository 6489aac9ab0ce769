"""Imported at start-up by every Python process that has this folder on PYTHONPATH.

With SCALESCOPE_TEST_SLOW_EXIT_S set, rank 0 of a local run (the process without LOCAL_RANK
in its starting environment) spends that long in an atexit handler: a teardown slower than
Lightning's child observer polls (5 s), as on a busy machine. The Ctrl-C test uses it to make
the race between rank 0's exit and the observer certain instead of rare.
"""

import atexit
import os
import time

_delay = float(os.environ.get("SCALESCOPE_TEST_SLOW_EXIT_S") or 0)
if _delay > 0 and "LOCAL_RANK" not in os.environ:
    atexit.register(time.sleep, _delay)
