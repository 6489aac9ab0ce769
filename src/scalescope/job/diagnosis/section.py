"""Where a step's time goes, on every rank, without a per-step device sync.

Three measurements, each outside or beside what :mod:`..clocks.timing` measures and none of them
changing what is trained:

* **In the timed loop, per rank** (over the steady-state steps only,
  :mod:`.step_breakdown`, with the clocks of :mod:`.step_clock`): *input wait*, the batch
  fetch and the copy to the device; *communication wait*, from backward's last gradient to
  ``backward`` returning (and DDP's broadcast of buffers before forward); *compute*, the rest
  of the rank's own steady-state time.

* **Calibration windows, after training** (outside every timed interval,
  :mod:`.calibration`): with the last training batch, K forward+backward passes under DDP's
  ``no_sync()`` and K with gradient sync, interleaved, the fastest window of each kind kept.
  ``sync - no_sync`` per pass is the exposed all-reduce time without any skew between ranks.

* **All-reduce baseline, before training** (:mod:`.allreduce`) and **GPU sampling**
  (:mod:`.sampling`), for the comparison and the device view, started by
  :class:`BeforeTiming` (here).

Everything is gathered with the other end-of-run numbers in :func:`..clocks.timing.agree` (one
gather, bounded by the process group's timeout; the per-step waits and the calibration are
reduced across ranks in :mod:`.cross_rank`) and assembled into the record's ``diagnosis``
section by :func:`assemble` on rank 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L

from ...config import DiagnosisConfig, FaultsConfig
from ..clocks.timing import Timings
from .compute_split import compute_split
from .sharded import baseline as fsdp_baseline
from .strategies import BASELINES


class BeforeTiming(L.Callback):
    """Before the training clock starts (earlier in the list than the TimingCallback): the
    all-reduce baseline on every rank, and the NVML sampler on each node's local rank 0.
    When training ends, DDP's own gradient buckets replace the baseline's estimate of them.

    ``timings`` (the TimingCallback's) tells when the warm-up ends: the sampler's figures
    cover the steady state from then on. Without it every sample counts, as before."""

    def __init__(
        self,
        cfg: DiagnosisConfig,
        *,
        local_rank: int,
        node: str,
        timings: Timings | None = None,
        faults: FaultsConfig | None = None,
    ) -> None:
        self.cfg = cfg
        self.local_rank = local_rank
        self.node = node
        self.timings = timings
        self.faults = faults
        """Its emulated network (``faults.network_alpha_s``) holds the sweep's ops back."""
        self.baselines: dict[str, dict[str, Any]] = {
            b.section: b.not_started() for b in BASELINES.values()
        }
        """Each registered strategy's baseline (:mod:`.strategies`), by its record section."""
        self.nvml: dict[str, Any] | None = None
        self._sampler: Any = None
        self._awaiting_steady = False  # a sampler runs and the warm-up has not ended yet

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = trainer.strategy.root_device
        if self.local_rank != 0:
            return
        from .sampling import GpuSampler, cuda_pci_bus_ids_or_reason, nvml_section, off_section

        interval = self.cfg.nvml_interval_s
        if not self.cfg.nvml:
            self.nvml = off_section("diagnosis.nvml=false", interval)
        elif device.type != "cuda":
            self.nvml = nvml_section("unavailable", "CPU run: no GPU to sample", interval)
        else:
            bus_ids, unknown = cuda_pci_bus_ids_or_reason()
            self._sampler = GpuSampler(
                interval_s=interval,
                pci_bus_ids=bus_ids,
                node=self.node,
                unknown_reason=unknown,
            )
            if self.timings is None:
                self._sampler.steady()  # no warm-up known: every sample counts
            else:
                self._awaiting_steady = True
            self._sampler.start()

    @property
    def allreduce(self) -> dict[str, Any]:
        """DDP's all-reduce baseline: the record's ``diagnosis.allreduce``."""
        return self.baselines["allreduce"]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for b in BASELINES.values():
            self.baselines[b.section] = b.measure(trainer, pl_module, self.cfg, self.faults)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        # One attribute test per batch (three until the warm-up ends). This callback runs before
        # the TimingCallback, which sets warmup_steps at the batch end where the warm-up
        # ends: the mark comes one training call later. That call's samples count as warm-up,
        # never a warm-up sample as steady; the TimingCallback's device sync at the warm-up's
        # end has already drained the warm-up's GPU work by then.
        if self._awaiting_steady and self.timings is not None:
            if self.timings.warmup_steps is not None:
                self._sampler.steady()
                self._awaiting_steady = False

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.stop_sampler()
        model = trainer.strategy.model
        for b in BASELINES.values():
            self.baselines[b.section] = b.after_training(model, self.baselines[b.section])

    def stop_sampler(self) -> None:
        if self._sampler is not None:
            self.nvml = self._sampler.stop()
            self._sampler = None
            self._awaiting_steady = False


# -- rank 0: the record's section ---------------------------------------------------------
def off(reason: str) -> dict[str, Any]:
    """The section of a run measured without the breakdown: null fields and why."""
    return {"status": "off", "reason": reason, "ranks": None}


def assemble(
    *,
    per_rank: Sequence[Mapping[str, Any]],
    steady_steps: int | None,
    per_device_batch_size: int,
    allreduce: Mapping[str, Any],
    nvml: Mapping[str, Any],
    calibration: Mapping[str, Any],
    calibration_steps: int,
    fsdp_collectives: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The record's ``diagnosis`` section from every rank's gathered part (rank order);
    ``fsdp_collectives`` (FSDP's baseline) only where the run was sharded by FSDP2."""
    ranks = [_rank_row(i, part, len(per_rank)) for i, part in enumerate(per_rank)]
    parts = [p.get("diagnosis") or {} for p in per_rank]
    clock = parts[0].get("clock", "wall") if parts else "wall"
    out: dict[str, Any] = {
        "status": "recorded",
        "reason": None,
        "clock": clock,
        "steady_steps": steady_steps,
        "per_device_batch_size": per_device_batch_size,
        "ranks": ranks,
        "slowest_rank": None,
        "slowest_node": None,
        "typical_rank": None,
        "rank_skew": None,
    }
    syncs = [r["syncs_per_step"] for r in ranks if "syncs_per_step" in r]
    # Gradient all-reduces per optimizer step: 1 (with accumulation too: only the last
    # micro-batch's backward synchronises); more is communication an accumulation loop
    # could avoid (no_sync).
    out["syncs_per_step"] = max(syncs) if syncs else None
    out.update(_skew(ranks))
    out.update(_step_waits(parts))
    out["bucket_ready"] = _bucket_ready(parts, out["typical_rank"])
    out["calibration"] = dict(calibration)
    if out["calibration"].get("steps") is None:
        out["calibration"]["steps"] = calibration_steps
    out["allreduce"] = dict(allreduce)
    if fsdp_collectives is not None and fsdp_collectives.get("reason") != fsdp_baseline.NOT_FSDP:
        out[fsdp_baseline.SECTION] = dict(fsdp_collectives)
    out["nvml"] = dict(nvml)
    out["compute_split"] = compute_split(ranks, nvml, clock, out["calibration"])
    out["overhead_s"] = {
        "calibration": out["calibration"].get("seconds"),
        "allreduce_baseline": allreduce.get("seconds"),
    }
    return out


def _rank_row(rank: int, part: Mapping[str, Any], world_size: int) -> dict[str, Any]:
    """One rank's row: where it ran, its peaks and, where it has them, its parts per step."""
    d = part.get("diagnosis") or {}
    row: dict[str, Any] = {
        "rank": rank,
        "local_rank": part.get("local_rank"),
        "node": part.get("node"),
        "peak_mem_gib": part.get("peak_dev"),
        "peak_host_rss_gib": part.get("rss"),
    }
    if "step_time_s" not in d:
        return row
    row.update({k: d[k] for k in ("step_time_s", "input_wait_s", "comm_wait_s", "compute_s")})
    row["own_s"] = d["input_wait_s"] + d["compute_s"]
    if "syncs_per_step" in d:
        row["syncs_per_step"] = d["syncs_per_step"]
    if "collectives_per_step" in d:  # FSDP: calls and bytes issued per optimizer step
        row["collectives_per_step"] = d["collectives_per_step"]
    waits = d.get("step_waits")
    if world_size == 1:  # one device: no all-reduce, nobody to wait for
        row.update(wait_s=0.0, exposed_comm_s=d["comm_wait_s"], waits_steps=0)
    elif waits:
        # the gradient wait beyond the step's least over ranks is waiting for others;
        # the rest of the communication wait (and any buffer broadcast) is exposed
        row.update(
            wait_s=waits["wait_s"],
            exposed_comm_s=d["comm_wait_s"] - waits["wait_s"],
            waits_steps=waits["steps"],
        )
        if waits.get("by_collective"):  # per collective: its exposed time and the wait
            row["by_collective"] = waits["by_collective"]
    return row


def _skew(ranks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The slowest and the typical rank and the skew between them, where every rank has its
    own time; the reason, where none has."""
    timed = [r for r in ranks if "own_s" in r]
    if timed and len(timed) == len(ranks):
        slowest = max(timed, key=lambda r: r["own_s"])
        typical = _lower_median(timed)
        return {
            "slowest_rank": slowest["rank"],
            "slowest_node": slowest["node"],
            "typical_rank": typical["rank"],
            "rank_skew": (
                (slowest["own_s"] - typical["own_s"]) / typical["own_s"]
                if typical["own_s"] > 0
                else None
            ),
        }
    if not timed:
        return {"reason": "no complete epoch after the warm-up: nothing to break down"}
    return {}


def _step_waits(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several ranks: the exposed communication per step, the same on every rank, or why
    there is none."""
    waits: list[Any] = [p.get("step_waits") for p in parts]
    if len(parts) > 1 and all(waits):
        return {
            "step_waits": {
                "steps": min(w["steps"] for w in waits),
                "exposed_s": waits[0]["exposed_s"],  # the same per-step minimum on every rank
                "exposed_se_s": waits[0]["exposed_se_s"],
            }
        }
    if len(parts) > 1:
        return {
            "step_waits": None,
            "step_waits_reason": "no per-step gradient waits on every rank",
        }
    return {}


def _bucket_ready(parts: Sequence[Mapping[str, Any]], typical: int | None) -> dict[str, Any]:
    """When each of DDP's buckets was ready in backward (:mod:`.bucket_ready`): the typical
    rank's steps (the first rank's that has them where no rank is typical), or why none."""
    from .allreduce import SKIPPED_ONE_DEVICE
    from .bucket_ready import not_recorded

    mine = [p.get("bucket_ready") for p in parts]
    order = ([typical] if typical is not None else []) + list(range(len(parts)))
    for rank in order:
        got = mine[rank]
        if isinstance(got, Mapping) and got.get("status") == "recorded":
            return {**got, "rank": rank}
    if len(parts) <= 1:
        return not_recorded(SKIPPED_ONE_DEVICE)
    reasons = [g.get("reason") for g in mine if isinstance(g, Mapping) and g.get("reason")]
    return not_recorded(reasons[0] if reasons else "no steady step was timed")


def _lower_median(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The rank at the lower median of own time: in a 2-rank job, the faster one, so one
    slow rank's whole excess counts as skew."""
    ordered = sorted(rows, key=lambda r: (r["own_s"], r["rank"]))
    return ordered[(len(ordered) - 1) // 2]


def merge_nvml(parts: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    """One ``nvml`` section from each node's sampler result (local rank 0 of each node)."""
    found = [p for p in parts if p]
    sampled = [p for p in found if p.get("status") == "sampled"]
    if not sampled:
        first = found[0] if found else {"status": "unavailable", "reason": "no sampler ran"}
        return {
            "status": first.get("status"),
            "reason": first.get("reason"),
            "interval_s": first.get("interval_s"),
            "gpus": None,
        }
    return {
        "status": "sampled",
        "reason": None,
        "interval_s": sampled[0].get("interval_s"),
        "gpus": [g for p in sampled for g in (p.get("gpus") or [])],
    }
