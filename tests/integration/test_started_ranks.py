"""Ranks 1..N-1 of a plain local run, started by rank 0 before it imports Lightning
(scalescope.job.run.children.start_local_ranks), with real processes.

The adopted path (Lightning's launcher taking the started ranks) is what every 2-process
run in this tier goes through; here: the variables each rank gets, and that ranks rank 0
never handed over do not outlive it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from core_helpers import clean_env

SCRIPT = """
import json, os, sys, time
from scalescope.job.run.children import start_local_ranks

out = sys.argv[1]
if "LOCAL_RANK" in os.environ:  # a started rank: say what it got, then wait (a rendezvous)
    keys = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "MARK")
    with open(os.path.join(out, f"rank{os.environ['LOCAL_RANK']}.json"), "w") as f:
        json.dump({k: os.environ.get(k) for k in keys} | {"pid": os.getpid()}, f)
    time.sleep(120)
    sys.exit(0)
started = start_local_ranks(3)
with open(os.path.join(out, "rank0.json"), "w") as f:
    json.dump({"MASTER_PORT": os.environ["MASTER_PORT"], "pids": [p.pid for p in started.procs]}, f)
while sum(os.path.exists(os.path.join(out, f"rank{r}.json")) for r in (1, 2)) < 2:
    time.sleep(0.1)
sys.exit(3)  # before handing them to Lightning: an error while building the model, say
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for every purpose here
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_started_ranks_get_lightnings_variables_and_end_with_rank_zero(tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    env = clean_env({"MARK": "inherited"})  # no LOCAL_RANK: this is rank 0
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], env=env, timeout=90, check=False
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 3
    zero = json.loads((tmp_path / "rank0.json").read_text())
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (1, 2)]
    for r, got in zip((1, 2), ranks, strict=True):
        assert got["LOCAL_RANK"] == str(r) and got["NODE_RANK"] == "0"
        assert got["WORLD_SIZE"] == "3" and got["MASTER_ADDR"] == "127.0.0.1"
        assert got["MASTER_PORT"] == zero["MASTER_PORT"]  # rank 0's own
        assert got["MARK"] == "inherited"  # the rest of rank 0's environment
    assert sorted(zero["pids"]) == sorted(g["pid"] for g in ranks)
    # Rank 0 exited before handing them over: they were ended with it, not left to wait
    # out their 120 s.
    assert elapsed < 60
    assert not [pid for pid in zero["pids"] if _alive(pid)]
