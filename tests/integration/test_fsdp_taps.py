"""FSDP2's collectives tapped through its custom-collective hooks (scalescope.job.faults.
fsdp_comms), 2 processes on gloo: what is counted where it is issued equals what FSDP
issued, and a hold sits inside the timed span.

The gpt workload's tiny module sharded per block, then the root (as its configure_model
does): per optimizer step 5 all-gathers (the root's once, each of the 2 blocks' twice),
211,200 bytes gathered, and 3 reduce-scatters, 55,936 bytes out; with
reshard_after_forward off the blocks are gathered once: 3 all-gathers.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

STEPS = 9
"""Optimizer steps a run takes: the first sets FSDP up; under a hold, the odd ones are held."""


def _worker(
    rank: int, world: int, init_file: str, out_dir: str, reshard: bool, hold_s: float
) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from scalescope.job.faults.fsdp_comms import ALL_GATHER, taps_for
    from scalescope.workloads.gpt import build
    from scalescope.workloads.params import GptParams

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model, _ = build(GptParams(), batch_size=4, seed=0)
        for block in model.blocks:
            fully_shard(block, reshard_after_forward=reshard)
        fully_shard(model, reshard_after_forward=False)  # the root: gathered once
        taps, why = taps_for(model)
        assert taps is not None, why
        issued: list[dict[str, list[float]]] = []

        class Count:
            def start(self, kind: str) -> Any:
                return time.perf_counter()

            def end(self, kind: str, nbytes: int, started: Any) -> None:
                c = issued[-1].setdefault(kind, [0, 0, 0.0])
                c[0] += 1
                c[1] += nbytes
                c[2] += time.perf_counter() - started

        first = [False]  # the step's first all-gather is still to be held

        def hold(kind: str) -> None:
            if kind == ALL_GATHER and first[0]:
                first[0] = False
                time.sleep(hold_s)

        taps.listeners.append(Count())
        if hold_s > 0:
            taps.holds.append(hold)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(rank)
        for step in range(STEPS):
            issued.append({})
            first[0] = step % 2 == 1
            idx = torch.randint(0, 64, (4, 32), generator=g)
            loss = model(idx, torch.roll(idx, -1, dims=1))
            loss.backward()
            opt.step()
            opt.zero_grad()
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(issued))
        dist.barrier()  # both done before either tears down, as a run's ranks leave
    finally:
        dist.destroy_process_group()


def _run(tmp_path: Path, reshard: bool, hold_s: float = 0.0) -> list[list[dict[str, Any]]]:
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessExitedException

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tmp_path.mkdir(exist_ok=True)
    try:
        mp.spawn(
            _worker,
            args=(2, str(tmp_path / "init"), str(tmp_path), reshard, hold_s),
            nprocs=2,
            join=True,
        )
    except ProcessExitedException as exc:
        # torch's gloo teardown now and then aborts a rank ("terminate called without an
        # active exception"; seen once, beside the Slurm tier, before the barrier above,
        # which a run's ranks meet at too: job.run.fitting._leave_process_group) after every
        # rank has written its counts: the collectives under test are over by then. Only
        # that abort is let through; any other exit, or one before every rank's counts,
        # fails the test.
        written = all((tmp_path / f"rank{r}.json").is_file() for r in range(2))
        if not (written and exc.signal_name == "SIGABRT"):
            raise
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize(
    ("reshard", "gathers", "gathered"),
    [
        pytest.param(True, 5, 211_200, id="reshard_after_forward"),
        pytest.param(False, 3, None, id="kept_after_forward"),
    ],
)
def test_counts_and_bytes_are_what_fsdp_issued(
    tmp_path: Path, reshard: bool, gathers: int, gathered: int | None
) -> None:
    ranks = _run(tmp_path, reshard)
    for steps in ranks:
        assert len(steps) == STEPS
        for step in steps:
            assert step["all_gather"][0] == gathers
            assert step["reduce_scatter"][:2] == [3, 55_936]
            if gathered is not None:
                assert step["all_gather"][1] == gathered


def test_a_hold_is_inside_the_timed_all_gather(tmp_path: Path) -> None:
    """The first all-gather of every odd step held 500 ms: each held step's timed all-gather
    time holds the whole hold (it is inside the timed span), and exceeds the unheld step
    after it by the hold, once (median over pairs and ranks, within 25%). The first step,
    which sets FSDP up, is left out. Held and unheld steps alternate within one run, so
    that the machine's load, which drifts from run to run, is the same on both sides: two
    separate runs beside the Slurm tier on two cores differed by 35 ms unheld, and in a CI
    run with nothing beside it a 300 ms hold measured 398 ms over a separate unheld run."""
    held_s = 0.5
    added = []
    for steps in _run(tmp_path, True, held_s):
        gathering = [s["all_gather"][2] for s in steps]
        held, unheld = gathering[1::2], gathering[2::2]
        assert len(held) == len(unheld) == (STEPS - 1) // 2
        assert min(held) >= held_s, held
        added += [h - u for h, u in zip(held, unheld, strict=True)]
    print(f"held all-gather: +{1e3 * statistics.median(added):.1f} ms for {1e3 * held_s:.0f} ms")
    assert statistics.median(added) == pytest.approx(held_s, rel=0.25), added
