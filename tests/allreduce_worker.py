"""One rank of a real gloo process group running the all-reduce baseline (for tests).

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p \
        python tests/allreduce_worker.py OUT.json --gradient-bytes B [--budget-s S]
        [--bucket-bytes B1,B2] [--die-after-ops K] [--timeout-s T]

Writes the returned section, and whether the call left the RNG and a stand-in parameter
untouched, to OUT.json. ``--die-after-ops K``: this rank exits hard at its K-th all-reduce (a
peer dying mid-sweep).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

from scalescope.job.diagnosis.allreduce import allreduce_baseline


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gradient-bytes", type=int, required=True)
    ap.add_argument("--budget-s", type=float, default=3.0)
    ap.add_argument("--bucket-bytes", default=None)
    ap.add_argument("--die-after-ops", type=int, default=None)
    ap.add_argument("--timeout-s", type=float, default=30.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    if args.die_after_ops is not None:
        real = dist.all_reduce
        calls = [0]

        def dying(*a, **k):  # type: ignore[no-untyped-def]
            calls[0] += 1
            if calls[0] >= args.die_after_ops:
                sys.stdout.flush()
                os._exit(3)
            return real(*a, **k)

        dist.all_reduce = dying  # type: ignore[assignment]
    torch.manual_seed(1234)
    weight = torch.randn(64)
    before_rng = torch.get_rng_state().clone()
    before_weight = weight.clone()
    buckets = (
        [int(b) for b in args.bucket_bytes.split(",")] if args.bucket_bytes is not None else None
    )
    section = allreduce_baseline(
        gradient_bytes=args.gradient_bytes,
        device=torch.device("cpu"),
        budget_s=args.budget_s,
        bucket_bytes=buckets,
    )
    result = {
        "section": section,
        "rng_unchanged": bool(torch.equal(before_rng, torch.get_rng_state())),
        "weight_unchanged": bool(torch.equal(before_weight, weight)),
    }
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
