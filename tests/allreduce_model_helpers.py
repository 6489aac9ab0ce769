"""The latency + bandwidth model of an all-reduce, written out independently of
scalescope.allreduce_model, for the tests of the model's fit and of the job's all-reduce
baseline."""

from __future__ import annotations


def model_time_s(alpha: float, busbw_gbps: float, world: int, nbytes: float) -> float:
    """The latency + bandwidth model the fit assumes, written out independently."""
    return alpha + nbytes * 2 * (world - 1) / world / (busbw_gbps * 1e9)


def sweep(top_exponent: int) -> list[int]:
    """Message sizes doubling from 4 KiB, ``top_exponent`` times."""
    return [4096 * 2**k for k in range(top_exponent + 1)]
