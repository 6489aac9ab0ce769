"""The backtest's model of a published case (analysis.compute.scoring): the buckets each
method makes."""

from __future__ import annotations

from pathlib import Path

from analysis.compute.scoring import case_model, read_cases
from scalescope.allreduce_model import DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES, MIB

REPO = Path(__file__).resolve().parents[3]
CASES = {c.name: c for c in read_cases(str(REPO / "benchmarks" / "projection_cases.yaml"))}


# --- buckets as the case's method makes them ----------------------------------------------------


def test_each_method_makes_its_own_buckets() -> None:
    # DDP at its default cap: 1 MiB first, then 25 MiB
    ddp = case_model(CASES["pytorch-ddp-resnet50-dgx1"]).bucket_bytes
    assert ddp[:2] == (DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_CAP_BYTES)
    # Horovod's fusion buffer: 64 MiB from the first, no small first bucket
    hvd = case_model(CASES["horovod-vgg16-roce25"]).bucket_bytes
    assert hvd[0] == 64 * MIB and sum(hvd) == 553430176
    tf2 = CASES["dle-tf2-bert-large-phase1-dgxa100-amp"]  # Horovod, its threshold not stated
    assert tf2.method == "horovod" and tf2.bucket_mb is None
    assert case_model(tf2).bucket_bytes[0] == 64 * MIB
    # DDP with an explicit cap larger than the gradients: one bucket
    assert case_model(CASES["dle-pyt-bert-large-phase1-dgxa100-amp"]).bucket_bytes == (660e6,)
    # a method whose grouping the source does not give: one message
    paddle = CASES["dle-paddle-bert-large-phase1-dgxa100-amp"]
    assert paddle.method not in ("ddp", "horovod") and paddle.bucket_mb is None
    assert case_model(paddle).bucket_bytes == (paddle.grad_bytes,)
