"""Experiment tracking (Comet) from rank 0.

Interface used by the trainer (rank 0 only):

* :func:`start_tracking` decides the mode once at start-up and returns a tracker plus the one
  line to print about it;
* ``tracker.log_metrics(metrics, step=..., epoch=...)``, ``tracker.log_result(record_dict)``,
  ``tracker.info()`` (what goes into the result record's ``tracking`` field; never secrets)
  and ``tracker.end()``.

Modes (docs/comet.md, "Choose the mode", has the full table):

* ``online``  -- ``COMET_API_KEY`` is set and the server answered a pre-flight request within
  ``tracking.connect_timeout_s``;
* ``offline`` -- asked for (``tracking.mode=offline``, or ``COMET_START_ONLINE=false`` /
  ``COMET_OFFLINE=true`` in the environment), or online asked for but the server is
  unreachable and ``tracking.fallback_offline`` allows it: an archive for ``comet upload``;
* ``off``     -- nothing asked for and no key, or the server rejected the key.

comet_ml is used directly (``Experiment`` / ``OfflineExperiment``): Lightning 2.6.6's
CometLogger writes nothing offline. It is imported inside functions so that importing this
module stays cheap. Every call into comet_ml is guarded: an exception becomes one warning line
and tracking turns off; training never fails because of tracking.

The API key is read from the environment (or comet's own config file) only, never from the
scalescope config, and is redacted from everything comet_ml logs: comet deliberately prints
a *rejected* key in clear.
"""

from __future__ import annotations

import glob
import json
import logging
import math
import os
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from ..config import TrackingConfig
from ..errors import ScalescopeError

LOGGER = logging.getLogger(__name__)

KEY_ENV = "COMET_API_KEY"
REDACTED = "***"
METRIC_PREFIX = "result/"
"""Result-record scalars are logged as ``result/<field>`` so they never mix with the per-step
and per-epoch series of the same name (``samples_per_s`` is both)."""

# Result-record fields that are not logged as metrics or others: the resolved config is
# already in the parameters, ``tracking`` is what this module reports about itself.
_RESULT_SKIP = {"config", "tracking", "event", "schema_version", "epoch_times_s", "diagnosis"}
_FALSEY = {"0", "false", "no", "off"}
_TRUTHY = {"1", "true", "yes", "on"}


class TrackingError(ScalescopeError):
    """The Comet server rejected the API key and ``tracking.on_rejected_key`` is ``stop``."""


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
            self._error = self._redact(f"comet {what} failed: {type(exc).__name__}: {exc}")
            LOGGER.warning("tracking: %s; tracking is off for the rest of this run", self._error)
            experiment, self._exp = self._exp, None
            # Keep what was logged so far (an offline archive stays usable); bounded.
            _run_bounded(_quiet_end(experiment), self._end_timeout_s)
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
        finished = _run_bounded(_quiet_end(experiment), self._end_timeout_s)
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


def _quiet_end(experiment: Any) -> Callable[[], None]:
    def call() -> None:
        try:
            experiment.end()
        except Exception as exc:  # end() of a broken experiment: nothing more to save
            LOGGER.debug("comet end failed: %r", exc)

    return call


def _run_bounded(call: Callable[[], Any], timeout_s: float) -> bool:
    """Run ``call`` in a daemon thread; True when it finished within ``timeout_s``."""
    worker = threading.Thread(target=call, name="scalescope-comet", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return not worker.is_alive()


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
        if isinstance(value, bool):
            others[key] = value
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


# --- secrets -------------------------------------------------------------------------------


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


class _CometLogFilter(logging.Filter):
    """On comet_ml's own log handlers: redact the key (comet prints a rejected key in clear),
    drop known noise, and note whether the server rejected the key."""

    def __init__(self) -> None:
        super().__init__("scalescope-redact")
        self.secrets: set[str] = set()
        self.rejected = False
        self.noise: set[str] = set()
        self.rejected_template: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if self.rejected_template is not None and record.msg == self.rejected_template:
            # Our own start line says it once, without the key; comet's line would print it.
            self.rejected = True
            return False
        if isinstance(record.msg, str) and record.msg in self.noise:
            return False
        if not self.secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        trace = record.exc_text
        if record.exc_info and not trace:
            trace = logging.Formatter().formatException(record.exc_info)
        if any(s in message or (trace and s in trace) for s in self.secrets):
            record.msg = redact(message, self.secrets)
            record.args = None
            if trace:
                record.exc_info = None
                record.exc_text = redact(trace, self.secrets)
        return True


_FILTER = _CometLogFilter()


def _install_log_filter(secrets: Iterable[str]) -> None:
    """Attach the filter to every handler of the ``comet_ml`` logger (console and, if the
    user configured one, file). comet's logger does not propagate, so that is all of them."""
    import comet_ml.logging_messages as msgs

    _FILTER.secrets.update(s for s in secrets if s)
    _FILTER.rejected_template = msgs.INVALID_API_KEY
    _FILTER.noise.update(
        {
            # We import comet_ml after torch on purpose: the trainer logs explicitly.
            msgs.LATE_IMPORT_DEGRADED_MODE,
            # The name is set right after construction.
            msgs.OFFLINE_EXPERIMENT_NAME_ACCESS,
            # comet finds its "own IP" by a UDP connect towards the server; meaningless
            # offline and on nodes without a route out.
            "Failed to log ip",
        }
    )
    comet_logger = logging.getLogger("comet_ml")
    for handler in comet_logger.handlers:
        if _FILTER not in handler.filters:
            handler.addFilter(_FILTER)
        # Our start line says what comet's INFO lines would (URL, upload command).
        if (
            isinstance(handler, logging.StreamHandler)
            and not isinstance(handler, logging.FileHandler)
            and not os.environ.get("COMET_LOGGING_CONSOLE")
        ):
            handler.setLevel(max(handler.level, logging.WARNING))


# --- bounding every wait -------------------------------------------------------------------


def comet_bounds(cfg: TrackingConfig) -> dict[str, str]:
    """comet_ml settings (environment variables) that bound its network waits.

    Set with ``setdefault`` on rank 0 only, so an explicit user setting wins. comet reads its
    config from the environment on every use, so these hold for the whole run:

    * each HTTP request waits at most ``connect_timeout_s`` (COMET_TIMEOUT_HTTP);
    * experiment creation retries twice, with at most 4 s of back-off (by default it retries
      up to 10 times, with up to 12 s between tries);
    * other requests retry twice with a 1 s back-off factor (default: 3 tries, factor 2);
    * at the end, waiting for queued messages and uploads is bounded by ``end_timeout_s``
      (defaults: 1 hour and 3 hours);
    * comet's crash reporting to Sentry is off (an extra remote service, and it would see
      comet's unredacted error lines).
    """
    http = str(max(1, math.ceil(cfg.connect_timeout_s)))
    end = str(max(1, math.ceil(cfg.end_timeout_s)))
    return {
        "COMET_TIMEOUT_HTTP": http,
        "COMET_HTTP_SESSION_RETRY_TOTAL": "2",
        "COMET_HTTP_SESSION_RETRY_BACKOFF_FACTOR": "1",
        "COMET_GET_OR_ADD_EXPERIMENT_RETRY_TOTAL": "2",
        "COMET_GET_OR_ADD_EXPERIMENT_RETRY_CONNECT": "2",
        "COMET_GET_OR_ADD_EXPERIMENT_RETRY_READ": "2",
        "COMET_GET_OR_ADD_EXPERIMENT_RETRY_STATUS": "2",
        "COMET_GET_OR_ADD_EXPERIMENT_RETRY_BACKOFF_FACTOR": "1",
        "COMET_GET_OR_ADD_EXPERIMENT_RETRY_BACKOFF_MAX": "4",
        "COMET_TIMEOUT_CLEANING": end,
        "COMET_TIMEOUT_UPLOAD": end,
        "COMET_ERROR_TRACKING_ENABLE": "false",
        "COMET_DISABLE_ANNOUNCEMENT": "true",
    }


def create_timeout_s(cfg: TrackingConfig) -> float:
    """Hard bound on creating an online experiment once the pre-flight succeeded."""
    return 3 * cfg.connect_timeout_s + 5.0


def check_reachable(url: str, timeout_s: float) -> tuple[bool, str, float]:
    """Does anything answer HTTP at ``url`` within ``timeout_s``? Any HTTP status counts
    (even 404: the server is there). DNS, connect and read are all inside the bound: the
    request runs in a daemon thread that is abandoned when the bound passes.

    Returns (reachable, reason, seconds spent).
    """
    outcome: dict[str, Any] = {}

    def probe() -> None:
        import requests

        try:
            requests.get(url, timeout=(timeout_s, timeout_s), allow_redirects=False)
            outcome["ok"] = True
        except requests.exceptions.SSLError:
            # Something answered; whether comet's own TLS settings accept it is its call.
            outcome["ok"] = True
        except requests.exceptions.ConnectTimeout:
            outcome["why"] = "no answer"
        except requests.exceptions.ConnectionError as exc:
            text = str(exc)
            outcome["why"] = (
                "connection refused"
                if "refused" in text.lower()
                else "name not resolved"
                if "resolve" in text.lower() or "name or service" in text.lower()
                else "connection failed"
            )
        except requests.exceptions.Timeout:
            outcome["why"] = "no answer"
        except Exception as exc:
            outcome["why"] = type(exc).__name__

    start = time.monotonic()
    finished = _run_bounded(probe, timeout_s)
    spent = time.monotonic() - start
    if not finished:
        return False, "no answer", spent
    if outcome.get("ok"):
        return True, "", spent
    return False, str(outcome.get("why", "connection failed")), spent


# --- choosing the mode ---------------------------------------------------------------------


def env_requests_offline(environ: Mapping[str, str] | None = None) -> bool:
    """comet's own switches for offline runs: COMET_START_ONLINE=false or COMET_OFFLINE=true
    (what a cluster admin sets on compute nodes without internet)."""
    env = os.environ if environ is None else environ
    return (
        env.get("COMET_START_ONLINE", "").strip().lower() in _FALSEY
        and env.get("COMET_START_ONLINE", "").strip() != ""
    ) or env.get("COMET_OFFLINE", "").strip().lower() in _TRUTHY


def plan_mode(mode: str, *, key_set: bool, env_offline: bool) -> tuple[str, str]:
    """What to try before any network: ``online``, ``offline`` or ``off``, and why.

    ``online`` here still depends on the server (reachable, key accepted)."""
    if mode == "off":
        return "off", "tracking.mode=off"
    if mode == "offline":
        return "offline", "tracking.mode=offline"
    if env_offline:
        return "offline", "COMET_START_ONLINE=false / COMET_OFFLINE=true in the environment"
    if key_set:
        return "online", f"tracking.mode={mode} and {KEY_ENV} set"
    if mode == "auto":
        return "off", f"{KEY_ENV} is not set"
    return "no-key", f"tracking.mode=online but {KEY_ENV} is not set"


def _global_rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's global rank as srun or torchrun export it (0 when neither does)."""
    env = os.environ if environ is None else environ
    for name in ("RANK", "SLURM_PROCID"):
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def _resolve_key() -> str | None:
    """The key from COMET_API_KEY, else from comet's own config file (``comet login``)."""
    key = os.environ.get(KEY_ENV, "").strip()
    if key:
        return key
    for path in (os.environ.get("COMET_CONFIG"), "~/.comet.config", ".comet.config"):
        if path and os.path.isfile(os.path.expanduser(path)):
            break
    else:
        return None  # no file: skip importing comet_ml just to learn there is no key
    from comet_ml.config import get_config

    found = get_config()["comet.api_key"]
    return str(found) if found else None


def _server_probe_url() -> tuple[str, str]:
    """(url to probe, server to name in messages) from comet's own config."""
    from comet_ml.config import get_api_key, get_backend_address, get_config

    config = get_config()
    get_api_key(None, config)  # a key may carry its own server (self-hosted Comet)
    backend = get_backend_address(config)
    parts = urlparse(backend)
    root = f"{parts.scheme}://{parts.netloc}"
    return f"{root}/clientlib/isAlive/ver", root


def _experiment_kwargs() -> dict[str, Any]:
    """Nothing automatic except comet's system metrics (CPU/GPU utilisation and memory).

    Output capture, argv parsing, code, git and auto-logging stay off: the trainer logs
    explicitly, parameter keys stay identical across runs, and stdout stays untouched."""
    return {
        "auto_output_logging": False,
        "parse_args": False,
        "log_code": False,
        "log_graph": False,
        "log_git_metadata": False,
        "log_git_patch": False,
        "auto_param_logging": False,
        "auto_metric_logging": False,
        "auto_log_co2": False,
        "display_summary_level": 0,
        "log_env_details": True,
        "log_env_gpu": True,
        "log_env_cpu": True,
        "log_env_host": True,
    }


def start_tracking(
    cfg: TrackingConfig,
    *,
    output_dir: str,
    experiment_name: str,
    tags: list[str],
    params: Mapping[str, Any],
    others: Mapping[str, Any],
) -> tuple[Tracker, str]:
    """Decide the mode once (rank 0 only) and start the experiment.

    Returns the tracker and the one line to print. Never raises for tracking problems,
    except :class:`TrackingError` when the server rejects the key and
    ``tracking.on_rejected_key`` is ``stop``.
    """
    secrets: list[str] = []
    try:
        return _start(cfg, output_dir, experiment_name, tags, params, others, secrets)
    except TrackingError:
        raise
    except Exception as exc:
        why = redact(f"{type(exc).__name__}: {exc}", secrets)
        return Tracker(f"failed to start: {why}"), f"tracking: off (could not start Comet: {why})"


@dataclass(frozen=True)
class _Request:
    """What the trainer asked for, plus where archives go and what to redact."""

    cfg: TrackingConfig
    experiment_name: str
    tags: list[str]
    params: Mapping[str, Any]
    others: Mapping[str, Any]
    offline_dir: str
    secrets: list[str]


def _start(
    cfg: TrackingConfig,
    output_dir: str,
    experiment_name: str,
    tags: list[str],
    params: Mapping[str, Any],
    others: Mapping[str, Any],
    secrets: list[str],
) -> tuple[Tracker, str]:
    rank = _global_rank()
    if rank:
        # Safety net: the trainer calls this on rank 0 only; a second experiment per job
        # would split one run in two.
        return Tracker(f"rank {rank}"), f"tracking: off on rank {rank} (rank 0 tracks the job)"
    key = _resolve_key()
    if key:
        secrets.append(key)
    planned, why = plan_mode(cfg.mode, key_set=bool(key), env_offline=env_requests_offline())
    if planned == "off":
        hint = (
            f"; set {KEY_ENV} for Comet, or tracking.mode=offline for an archive"
            if why.startswith(KEY_ENV)
            else ""
        )
        return Tracker(why), f"tracking: off ({why}{hint})"

    req = _Request(
        cfg=cfg,
        experiment_name=experiment_name,
        tags=list(tags),
        params=params,
        others=others,
        offline_dir=os.path.abspath(cfg.offline_dir or os.path.join(output_dir, "comet")),
        secrets=secrets,
    )
    comet_ml = _import_comet(cfg, secrets)
    if planned == "offline":
        return _offline(comet_ml, req, why)
    if planned == "no-key":
        return _fallback(comet_ml, req, why)

    server, unreachable = _probe_server(cfg)
    if unreachable:
        return _fallback(comet_ml, req, unreachable)
    return _online(comet_ml, req, server)


def _import_comet(cfg: TrackingConfig, secrets: Iterable[str]) -> Any:
    """comet_ml, with its network waits bounded (:func:`comet_bounds`, where the user set
    nothing) and its log lines filtered of ``secrets`` and noise."""
    for name, value in comet_bounds(cfg).items():
        os.environ.setdefault(name, value)
    import comet_ml

    _install_log_filter(secrets)
    return comet_ml


def _probe_server(cfg: TrackingConfig) -> tuple[str, str]:
    """(the server comet's config names, why it cannot be used: '' when it answers within
    the connect timeout)."""
    url, server = _server_probe_url()
    reachable, failure, spent = check_reachable(url, cfg.connect_timeout_s)
    if reachable:
        return server, ""
    return server, f"Comet server {server} unreachable: {failure} after {spent:.1f} s"


def rest_api(cfg: TrackingConfig) -> tuple[Any, str, list[str]]:
    """comet_ml's REST client (``comet_ml.API``) under the jobs' rules, for what an experiment
    cannot do (a project view): the key from the environment or comet's config only, comet's
    waits bounded, its log lines filtered, and the server probed first.

    Returns (the API or None, the reason when None, the secrets to redact from any message)."""
    key = _resolve_key()
    if not key:
        return None, f"{KEY_ENV} is not set", []
    secrets = [key]
    if env_requests_offline():
        return None, "COMET_START_ONLINE=false / COMET_OFFLINE=true in the environment", secrets
    comet_ml = _import_comet(cfg, secrets)
    _server, unreachable = _probe_server(cfg)
    if unreachable:
        return None, unreachable, secrets
    return comet_ml.API(api_key=key), "", secrets


def _fallback(comet_ml: Any, req: _Request, reason: str) -> tuple[Tracker, str]:
    """Online was asked for and cannot be had: an offline archive, if allowed."""
    if not req.cfg.fallback_offline:
        return Tracker(reason), f"tracking: off ({reason}; tracking.fallback_offline is false)"
    return _offline(comet_ml, req, f"{reason}; offline archive instead")


def _offline(comet_ml: Any, req: _Request, reason: str) -> tuple[Tracker, str]:
    os.makedirs(req.offline_dir, exist_ok=True)
    experiment = comet_ml.OfflineExperiment(
        project_name=req.cfg.project,
        workspace=req.cfg.workspace,
        offline_directory=req.offline_dir,
        **_experiment_kwargs(),
    )
    tracker = _populate(experiment, "offline", reason, req)
    return tracker, (
        f"tracking: comet offline ({reason}); experiment {req.experiment_name} in project "
        f"{req.cfg.project}; after the run: comet upload {tracker.archive_path()}"
    )


def _online(comet_ml: Any, req: _Request, server: str) -> tuple[Tracker, str]:
    box: dict[str, Any] = {}
    abandoned = threading.Event()

    def create() -> None:
        try:
            experiment = comet_ml.Experiment(
                project_name=req.cfg.project,
                workspace=req.cfg.workspace,
                offline_directory=req.offline_dir,  # comet's own fallback archive goes here
                **_experiment_kwargs(),
            )
        except Exception as exc:
            box["error"] = exc
            return
        box["experiment"] = experiment
        if abandoned.is_set():
            # Too late: start-up went on without it. Do not leave it running.
            _quiet_end(experiment)()

    _FILTER.rejected = False
    bound = create_timeout_s(req.cfg)
    start = time.monotonic()
    finished = _run_bounded(create, bound)
    spent = time.monotonic() - start
    if not finished:
        abandoned.set()
        return _fallback(
            comet_ml, req, f"Comet server {server} did not create the experiment within {bound:g} s"
        )
    if "error" in box:
        raise box["error"]
    experiment = box["experiment"]

    if _FILTER.rejected:
        _quiet_end(experiment)()
        reason = f"the Comet server at {server} rejected the API key in {KEY_ENV}"
        if req.cfg.on_rejected_key == "stop":
            raise TrackingError(
                f"tracking: {reason}; stopping (tracking.on_rejected_key=stop); "
                "check the key, or set tracking.mode=offline"
            )
        return Tracker(reason), (
            f"tracking: error: {reason}; training continues untracked "
            "(tracking.on_rejected_key=stop stops the job instead)"
        )
    if not getattr(experiment, "alive", False):
        # Reachable a moment ago, then creation failed (comet logged why, redacted).
        _quiet_end(experiment)()
        return _fallback(
            comet_ml,
            req,
            f"Comet server {server} did not create the experiment (after {spent:.1f} s)",
        )

    tracker = _populate(experiment, "online", f"{KEY_ENV} set and {server} reachable", req)
    where = tracker.info().get("url") or server
    return tracker, (
        f"tracking: comet online, experiment {req.experiment_name} in project "
        f"{req.cfg.project}: {where}"
    )


def _populate(experiment: Any, mode: str, reason: str, req: _Request) -> CometTracker:
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


# --- reading an offline archive back -------------------------------------------------------


def read_offline_archive(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a comet offline archive (the zip ``OfflineExperiment`` writes).

    Returns ``project``, ``workspace``, ``tags``, ``name`` (the ``Name`` other),
    ``parameters`` (logged by hand, not comet's auto-logged ``curr_step``), ``metrics``
    (name -> list of ``{"step", "epoch", "value"}`` in logging order), ``others``,
    ``system_details``, ``message_counts`` (per message type) and ``problems`` (lines that
    could not be read: reported, not fatal).
    """
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        missing = {"experiment.json", "messages.json"} - names
        if missing:
            raise ValueError(f"{path}: not a comet offline archive (lacks {', '.join(missing)})")
        meta = json.loads(zf.read("experiment.json").decode("utf-8"))
        lines = zf.read("messages.json").decode("utf-8").splitlines()
    out: dict[str, Any] = {
        "experiment": meta,
        "project": meta.get("project_name"),
        "workspace": meta.get("workspace"),
        "tags": list(meta.get("tags") or []),
        "name": None,
        "parameters": {},
        "metrics": {},
        "others": {},
        "system_details": None,
        "message_counts": {},
        "problems": [],
    }
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            kind = message["type"]
            payload = message["payload"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            out["problems"].append(f"messages.json line {number}: {exc}")
            continue
        out["message_counts"][kind] = out["message_counts"].get(kind, 0) + 1
        if kind == "metric_msg":
            metric = payload.get("metric") or {}
            out["metrics"].setdefault(metric.get("metricName"), []).append(
                {
                    "step": metric.get("step"),
                    "epoch": metric.get("epoch"),
                    "value": metric.get("metricValue"),
                }
            )
        elif kind == "parameter_msg":
            # comet writes "param" for scalars and "params" for list values.
            param = payload.get("param") or payload.get("params") or {}
            if param.get("source", "manual") == "manual":
                out["parameters"][param.get("paramName")] = param.get("paramValue")
        elif kind == "log_other":
            out["others"][payload.get("key")] = payload.get("value")
            if payload.get("key") == "Name":
                out["name"] = payload.get("value")
        elif kind == "system_details":
            out["system_details"] = payload
    return out
