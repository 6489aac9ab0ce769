"""The train config's ``faults`` section: deliberate faults, to test how jobs and the
analysis behave (slow input, a slow or dying rank, a held-back all-reduce, a simulated
network). The job side acts on them in :mod:`scalescope.job.faults.injection`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .errors import ConfigError
from .schema import non_negative, option


@dataclass(frozen=True)
class FaultsConfig:
    """Deliberate faults, to test how jobs and the analysis behave; all off by default.

    Recorded in the result's config like every other key, so a run with a fault is never
    mistaken for a clean one.
    """

    step_sleep_s: float = option(
        0.0,
        help="sleep this long in every optimizer step on every rank (slow steps, e.g. to test "
        "that a job stops within Slurm's grace period); 0 = off",
        check=non_negative,
    )

    input_sleep_s: float = option(
        0.0,
        help="the training input sleeps this long before handing over each batch, on every "
        "rank (a slow input pipeline; shows as input wait); 0 = off",
        check=non_negative,
    )
    slow_rank: int | None = option(
        None,
        help="this global rank sleeps slow_rank_sleep_s in every optimizer step (one straggler; "
        "the others wait for it in the gradient all-reduce); null = none",
        check=non_negative,
    )
    slow_rank_sleep_s: float = option(
        0.0, help="how long slow_rank sleeps per optimizer step", check=non_negative
    )
    slow_rank_at: Literal["step", "input", "forward"] = option(
        "step",
        help="where slow_rank sleeps: step = before its optimizer step (after backward), "
        "input = in its batch fetch (a slower loader on that rank alone: its peers wait in "
        "the next collective, DDP's buffer broadcast for a module with buffers), forward = "
        "inside the module's forward (its peers wait in the gradient all-reduce)",
    )
    rotating_sleep_s: float = option(
        0.0,
        help="in every optimizer step one rank sleeps this long, a different one each step "
        "(each rank once in every world-size steps, in a seeded random order): per-step "
        "stragglers, no rank slower on average; 0 = off",
        check=non_negative,
    )
    allreduce_delay_s: float = option(
        0.0,
        help="every rank holds each gradient bucket's all-reduce result back this long (a DDP "
        "communication hook: a slow network of known size; shows as exposed communication); "
        "under HSDP, each synchronising backward's first all-reduce of gradient shards across "
        "the shard groups (FSDP's all-reduce hook); 0 = off",
        check=non_negative,
    )
    allgather_delay_s: float = option(
        0.0,
        help="under FSDP, every rank holds each optimizer step's first all-gather back this "
        "long (FSDP's custom all-gather: the counterpart of allreduce_delay_s; shows as "
        "exposed communication); 0 = off",
        check=non_negative,
    )
    reducescatter_delay_s: float = option(
        0.0,
        help="under FSDP, every rank holds the first reduce-scatter of each backward that "
        "synchronises gradients back this long (FSDP's custom reduce-scatter: a slower "
        "gradient reduction; shows as exposed communication, and in the calibration's synced "
        "windows); 0 = off",
        check=non_negative,
    )
    overlap_burn_s: float = option(
        0.0,
        help="every rank busy-loops this long on the CPU in the DDP communication hook of "
        "each gradient bucket but the last one of backward, before its all-reduce starts: "
        "communication work that slows backward while it overlaps (needs a model of several "
        "buckets, e.g. configs/diagnosis/comm_heavy.yaml); 0 = off",
        check=non_negative,
    )
    network_alpha_s: float = option(
        0.0,
        help="an emulated network whose cost grows with the world size p: every all-reduce "
        "(DDP's buckets in training and the diagnosis' all-reduce sweep) is held back "
        "network_alpha_s x log2(p) + bytes x 2(p-1)/p / network_busbw_gbps, to check the "
        "projection's mechanics; 0 = off",
        check=non_negative,
    )
    network_busbw_gbps: float = option(
        0.0,
        help="the emulated network's bus bandwidth (GB/s) for network_alpha_s; 0 = no "
        "bandwidth term",
        check=non_negative,
    )
    exit_rank: int | None = option(
        None,
        help="this global rank exits abruptly (exit status 1) at exit_at: a rank that dies "
        "while the others wait in a collective; null = none",
        check=non_negative,
    )
    window_error_rank: int | None = option(
        None,
        help="this global rank raises an error in the second pass of its first synced "
        "calibration window (as an out-of-memory there would: its peers are then inside "
        "that pass's collectives); null = none",
        check=non_negative,
    )
    exit_at: Literal["calibration", "gather"] = option(
        "calibration",
        help="where exit_rank dies: calibration = in the diagnosis' calibration windows, "
        "gather = before the end-of-run gather of every rank's numbers",
    )

    @property
    def active(self) -> bool:
        return (
            self.step_sleep_s > 0
            or self.input_sleep_s > 0
            or (self.slow_rank is not None and self.slow_rank_sleep_s > 0)
            or self.rotating_sleep_s > 0
            or self.allreduce_delay_s > 0
            or self.allgather_delay_s > 0
            or self.reducescatter_delay_s > 0
            or self.overlap_burn_s > 0
            or self.emulates_network
        )

    @property
    def emulates_network(self) -> bool:
        return self.network_alpha_s > 0 or self.network_busbw_gbps > 0

    def network_hold_s(self, nbytes: int, world_size: int) -> float:
        """How long the emulated network holds an all-reduce of ``nbytes`` at
        ``world_size`` ranks back (0 on one rank, or when off)."""

        if world_size < 2 or not self.emulates_network:
            return 0.0
        bandwidth = (
            nbytes * 2 * (world_size - 1) / world_size / (self.network_busbw_gbps * 1e9)
            if self.network_busbw_gbps > 0
            else 0.0
        )
        return self.network_alpha_s * math.log2(world_size) + bandwidth

    def validate(self, where: str) -> None:
        if self.slow_rank is not None and self.slow_rank_sleep_s <= 0:
            raise ConfigError(
                f"{where}.slow_rank_sleep_s: must be > 0 when {where}.slow_rank is set"
            )
