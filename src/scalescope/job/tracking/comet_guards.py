"""What keeps Comet from leaking the API key or holding up the job (rank 0's tracking).

* **Secrets**: the key is redacted from everything comet_ml logs (:data:`COMET_LOG_FILTER`
  on its own log handlers): comet deliberately prints a *rejected* key in clear.
* **Bounds**: every network wait comet_ml makes is bounded (:func:`comet_bounds`), the
  server is probed within ``tracking.connect_timeout_s`` before any experiment is made
  (:func:`check_reachable`), and calls that may still hang run in a daemon thread with a
  time limit (:func:`run_bounded`).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ...config import TrackingConfig

REDACTED = "***"


# --- secrets -------------------------------------------------------------------------------


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


class CometLogFilter(logging.Filter):
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


COMET_LOG_FILTER = CometLogFilter()


def install_log_filter(secrets: Iterable[str]) -> None:
    """Attach the filter to every handler of the ``comet_ml`` logger (console and, if the
    user configured one, file). comet's logger does not propagate, so that is all of them."""
    import comet_ml.logging_messages as msgs

    COMET_LOG_FILTER.secrets.update(s for s in secrets if s)
    COMET_LOG_FILTER.rejected_template = msgs.INVALID_API_KEY
    COMET_LOG_FILTER.noise.update(
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
        if COMET_LOG_FILTER not in handler.filters:
            handler.addFilter(COMET_LOG_FILTER)
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
    finished = run_bounded(probe, timeout_s)
    spent = time.monotonic() - start
    if not finished:
        return False, "no answer", spent
    if outcome.get("ok"):
        return True, "", spent
    return False, str(outcome.get("why", "connection failed")), spent


def run_bounded(call: Callable[[], Any], timeout_s: float) -> bool:
    """Run ``call`` in a daemon thread; True when it finished within ``timeout_s``."""
    worker = threading.Thread(target=call, name="scalescope-comet", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return not worker.is_alive()
