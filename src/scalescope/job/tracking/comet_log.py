"""What rank 0 logs to Comet, and how every call into comet_ml is guarded.

* at start (:func:`populate`): the experiment's name, tags, parameters and others, as the
  trainer passed them (:class:`Request`);
* during training: ``tracker.log_metrics(metrics, step=..., epoch=...)``, the loss every N
  steps and each epoch's figures;
* at the end: ``tracker.log_result(record_dict)``, the result record's scalars as
  ``result/<field>`` metrics and the rest as others (:func:`result_to_comet`, with the
  diagnosis' headline numbers), then ``tracker.end()``; ``tracker.info()`` is what goes into
  the record's ``tracking`` field (never secrets).

Every call into comet_ml is guarded: an exception becomes one warning line and tracking turns
off; training never fails because of tracking. How the experiment is made is
:mod:`.comet`'s.
"""

from __future__ import annotations

import glob
import logging
import math
import os
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ...config import TrackingConfig
from ...errors import described
from ...record import other_cpu_share
from .comet_guards import redact, run_bounded

LOGGER = logging.getLogger("scalescope.job.tracking")
"""Named after the tracking as a whole (what a user filters on), whichever module logs."""

METRIC_PREFIX = "result/"
"""Result-record scalars are logged as ``result/<field>`` so they never mix with the per-step
and per-epoch series of the same name (``samples_per_s`` is both)."""

# Result-record fields that are not logged as metrics or others: the resolved config is
# already in the parameters, ``tracking`` is what the tracker reports about itself.
_RESULT_SKIP = {
    "config",
    "tracking",
    "event",
    "schema_version",
    "epoch_times_s",
    "diagnosis",
    "host_load",
}


# --- the trackers --------------------------------------------------------------------------


class Tracker:
    """Tracking is off: every call is a no-op. Base of the Comet tracker."""

    mode = "off"

    def __init__(self, reason: str = "") -> None:
        self.reason = reason

    def log_metrics(
        self, metrics: Mapping[str, float], *, step: int, epoch: int | None = None
    ) -> None:
        pass

    def log_result(self, record: Mapping[str, Any]) -> None:
        pass

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return None

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode}
        if self.reason:
            out["reason"] = self.reason
        return out

    def end(self) -> None:
        pass


class CometTracker(Tracker):
    """One comet_ml experiment (online or offline) owned by rank 0."""

    def __init__(
        self,
        experiment: Any,
        *,
        mode: str,
        reason: str,
        project: str,
        workspace: str | None,
        experiment_name: str,
        offline_dir: str,
        end_timeout_s: float,
        secrets: Iterable[str],
    ) -> None:
        super().__init__(reason)
        self.mode = mode
        self._exp: Any = experiment
        self._project = project
        self._workspace = workspace
        self._name = experiment_name
        self._offline_dir = offline_dir
        self._end_timeout_s = end_timeout_s
        self._secrets = [s for s in secrets if s]
        self._key = str(experiment.get_key())
        self._url: str | None = None
        self._error: str | None = None
        self._ended = False
        self._end_complete: bool | None = None
        if mode == "online":
            self._url = self._guard("url", lambda: str(experiment.url))

    # -- logging ----------------------------------------------------------------------------

    def log_metrics(
        self, metrics: Mapping[str, float], *, step: int, epoch: int | None = None
    ) -> None:
        values = {k: v for k, v in metrics.items() if v is not None}
        if values:
            self._guard(
                "log_metrics",
                lambda: self._exp.log_metrics(values, step=int(step), epoch=epoch),
            )

    def log_result(self, record: Mapping[str, Any]) -> None:
        metrics, others = result_to_comet(record)
        step = record.get("steps")
        epoch = record.get("epochs")
        self._guard(
            "log_result",
            lambda: self._exp.log_metrics(
                metrics,
                step=int(step) if isinstance(step, int) else None,
                epoch=int(epoch) if isinstance(epoch, int) else None,
            ),
        )
        self._guard("log_result", lambda: self._exp.log_others(_redact_values(others, self)))

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Any other comet_ml ``Experiment`` method (``log_table``, ``log_image``,
        ``log_asset``, ``log_others``...), guarded as every call is."""
        return self._guard(method, lambda: getattr(self._exp, method)(*args, **kwargs))

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def _guard(self, what: str, call: Callable[[], Any]) -> Any:
        """Run one comet call; the first failure turns tracking off with one warning line."""
        if self._exp is None:
            return None
        try:
            return call()
        except Exception as exc:
            self._error = self._redact(f"comet {what} failed: {described(exc)}")
            LOGGER.warning("tracking: %s; tracking is off for the rest of this run", self._error)
            experiment, self._exp = self._exp, None
            # Keep what was logged so far (an offline archive stays usable); bounded.
            run_bounded(quiet_end(experiment), self._end_timeout_s)
            return None

    # -- reporting and ending ---------------------------------------------------------------

    def archive_path(self) -> str | None:
        """The offline archive (offline mode), or comet's fallback archive if an online run
        lost its connection and comet kept one."""
        if self.mode == "offline":
            return os.path.join(self._offline_dir, f"{self._key}.zip")
        found = sorted(
            glob.glob(os.path.join(glob.escape(self._offline_dir), f"*{self._key}*.zip"))
        )
        return found[0] if found else None

    def info(self) -> dict[str, Any]:
        out = super().info()
        out.update(
            project=self._project,
            workspace=self._workspace,
            experiment_name=self._name,
            experiment_key=self._key,
        )
        if self._url:
            out["url"] = self._url
        archive = self.archive_path()
        if archive:
            out["archive"] = archive
            out["upload_command"] = f"comet upload {archive}"
        if self._ended:
            out["ended_cleanly"] = bool(self._end_complete)
        if self._error:
            out["error"] = self._error
        return out

    def end(self) -> None:
        """Finish the experiment within ``end_timeout_s``; offline: the archive is complete
        when this returns (unless the bound was hit, which is reported)."""
        if self._ended:
            return
        self._ended = True
        experiment, self._exp = self._exp, None
        if experiment is None:
            self._end_complete = self._error is None
            return
        finished = run_bounded(quiet_end(experiment), self._end_timeout_s)
        self._end_complete = finished
        if not finished:
            self._error = (
                f"comet end did not finish within {self._end_timeout_s:g} s "
                "(tracking.end_timeout_s); data may be incomplete"
            )
            LOGGER.warning("tracking: %s", self._error)
        elif self.mode == "offline":
            archive = self.archive_path()
            if archive and not _archive_complete(archive):
                self._end_complete = False
                self._error = f"offline archive {archive} is missing or incomplete"
                LOGGER.warning("tracking: %s", self._error)


def quiet_end(experiment: Any) -> Callable[[], None]:
    def call() -> None:
        try:
            experiment.end()
        except Exception as exc:  # end() of a broken experiment: nothing more to save
            LOGGER.debug("comet end failed: %r", exc)

    return call


def _archive_complete(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False
    return {"experiment.json", "messages.json"} <= names


# --- what a result record becomes ----------------------------------------------------------


def result_to_comet(record: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """Split a result record into Comet metrics (finite numbers, as ``result/<field>``; a
    per-rank list gives ``_max`` and ``_min``) and others (identity, job id, node list,
    versions as ``version.<name>``)."""
    metrics: dict[str, float] = {}
    others: dict[str, Any] = {}
    for key, value in record.items():
        if key in _RESULT_SKIP or value is None:
            continue
        if isinstance(value, bool) or (key.endswith("_unix") and isinstance(value, float)):
            others[key] = value  # a time of day is no measurement to chart
        elif isinstance(value, (int, float)):
            if math.isfinite(value):
                metrics[METRIC_PREFIX + key] = value
        elif isinstance(value, str):
            others[key] = value
        elif isinstance(value, Mapping):
            for sub, v in value.items():
                others[f"{key}.{sub}" if key != "versions" else f"version.{sub}"] = v
        elif isinstance(value, (list, tuple)):
            numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
            finite = [v for v in numbers if math.isfinite(v)]
            if numbers and len(numbers) == len(value):
                if finite:
                    metrics[f"{METRIC_PREFIX}{key}_max"] = max(finite)
                    metrics[f"{METRIC_PREFIX}{key}_min"] = min(finite)
            else:
                others[key] = ",".join(str(v) for v in value)
    share = other_cpu_share(record.get("host_load"))
    if share is not None and math.isfinite(share):  # the busiest machine's, as the summary's
        metrics[f"{METRIC_PREFIX}other_cpu_share"] = share
    diag_metrics, diag_others = diagnosis_to_comet(record.get("diagnosis"))
    metrics.update(diag_metrics)
    others.update(diag_others)
    return metrics, others


def diagnosis_to_comet(diagnosis: Any) -> tuple[dict[str, float], dict[str, Any]]:
    """The diagnosis' headline numbers for Comet: the typical rank's parts per step (its
    wait for others and the exposed all-reduce among them), the skew, the calibration's
    cross-check and overlap slowdown, the predicted all-reduce, busbw
    (``diagnosis/<name>``), and the
    slowest rank and node as others. Fields that were not measured are left out."""
    metrics: dict[str, float] = {}
    others: dict[str, Any] = {}
    if not isinstance(diagnosis, Mapping) or diagnosis.get("status") != "recorded":
        return metrics, others

    def put(name: str, value: Any) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value):
                metrics[f"diagnosis/{name}"] = value

    ranks = diagnosis.get("ranks") or []
    typical = diagnosis.get("typical_rank")
    if isinstance(typical, int) and 0 <= typical < len(ranks):
        for part in ("step_time_s", "input_wait_s", "compute_s", "comm_wait_s", "wait_s"):
            put(part, ranks[typical].get(part))
        # from every rank's steps; a record without them has only its calibration's
        put("exposed_comm_s", ranks[typical].get("exposed_comm_s"))
    put("rank_skew", diagnosis.get("rank_skew"))
    calibration = diagnosis.get("calibration") or {}
    put("calibration_exposed_comm_s", calibration.get("exposed_comm_s"))
    put("overlap_slowdown_s", calibration.get("overlap_slowdown_s"))
    allreduce = diagnosis.get("allreduce") or {}
    put("allreduce_predicted_step_s", allreduce.get("predicted_step_s"))
    put("allreduce_busbw_gbps", allreduce.get("busbw_gbps"))
    for gpu in (diagnosis.get("nvml") or {}).get("gpus") or []:
        put(f"gpu{gpu.get('index')}_util_mean_pct", gpu.get("util_mean_pct"))
    for key in ("slowest_rank", "slowest_node"):
        if diagnosis.get(key) is not None:
            others[f"diagnosis.{key}"] = diagnosis[key]
    return metrics, others


def _redact_values(values: Mapping[str, Any], tracker: CometTracker) -> dict[str, Any]:
    return {k: tracker._redact(v) if isinstance(v, str) else v for k, v in values.items()}


# --- what the trainer asked for, logged at start --------------------------------------------


@dataclass(frozen=True)
class Request:
    """What the trainer asked for, plus where archives go and what to redact."""

    cfg: TrackingConfig
    output_dir: str
    experiment_name: str
    tags: list[str]
    params: Mapping[str, Any]
    others: Mapping[str, Any]
    secrets: list[str]
    """Filled in as they are found (the API key): what to redact from every message."""

    @cached_property
    def offline_dir(self) -> str:
        """Where offline archives go (and comet's own fallback archive of an online run)."""
        return os.path.abspath(self.cfg.offline_dir or os.path.join(self.output_dir, "comet"))


def populate(experiment: Any, mode: str, reason: str, req: Request) -> CometTracker:
    tracker = CometTracker(
        experiment,
        mode=mode,
        reason=reason,
        project=req.cfg.project,
        workspace=req.cfg.workspace,
        experiment_name=req.experiment_name,
        offline_dir=req.offline_dir,
        end_timeout_s=req.cfg.end_timeout_s,
        secrets=req.secrets,
    )
    safe = tracker._redact
    tracker._guard("set_name", lambda: experiment.set_name(safe(req.experiment_name)))
    tracker._guard("add_tags", lambda: experiment.add_tags([safe(str(t)) for t in req.tags]))
    tracker._guard(
        "log_parameters",
        lambda: experiment.log_parameters(
            {k: safe(v) if isinstance(v, str) else v for k, v in req.params.items()}
        ),
    )
    start_others = {**req.others, "tracking_mode": mode, "tracking_reason": reason}
    tracker._guard(
        "log_others", lambda: experiment.log_others(_redact_values(start_others, tracker))
    )
    return tracker
