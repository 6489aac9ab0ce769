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
module stays cheap. Every call into comet_ml is guarded (:mod:`.comet_log`, which also holds
what is logged): an exception becomes one warning line and tracking turns off; training never
fails because of tracking.

The API key is read from the environment (or comet's own config file) only, never from the
scalescope config, and is redacted from everything comet_ml logs: comet deliberately prints
a *rejected* key in clear. That, and the bounds on every wait, are :mod:`.comet_guards`'.
"""

from __future__ import annotations

import json
import os
import threading
import time
import zipfile
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlparse

from ...config import TrackingConfig
from ...errors import ScalescopeError, described
from .comet_guards import (
    COMET_LOG_FILTER,
    check_reachable,
    comet_bounds,
    create_timeout_s,
    install_log_filter,
    redact,
    run_bounded,
)
from .comet_log import Request, Tracker, populate, quiet_end

KEY_ENV = "COMET_API_KEY"
_FALSEY = {"0", "false", "no", "off"}
_TRUTHY = {"1", "true", "yes", "on"}


class TrackingError(ScalescopeError):
    """The Comet server rejected the API key and ``tracking.on_rejected_key`` is ``stop``."""


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
    req = Request(
        cfg=cfg,
        output_dir=output_dir,
        experiment_name=experiment_name,
        tags=list(tags),
        params=params,
        others=others,
        secrets=[],
    )
    try:
        return _start(req)
    except TrackingError:
        raise
    except Exception as exc:
        why = redact(described(exc), req.secrets)
        return Tracker(f"failed to start: {why}"), f"tracking: off (could not start Comet: {why})"


def _start(req: Request) -> tuple[Tracker, str]:
    cfg = req.cfg
    rank = _global_rank()
    if rank:
        # Safety net: the trainer calls this on rank 0 only; a second experiment per job
        # would split one run in two.
        return Tracker(f"rank {rank}"), f"tracking: off on rank {rank} (rank 0 tracks the job)"
    key = _resolve_key()
    if key:
        req.secrets.append(key)
    planned, why = plan_mode(cfg.mode, key_set=bool(key), env_offline=env_requests_offline())
    if planned == "off":
        hint = (
            f"; set {KEY_ENV} for Comet, or tracking.mode=offline for an archive"
            if why.startswith(KEY_ENV)
            else ""
        )
        return Tracker(why), f"tracking: off ({why}{hint})"

    comet_ml = _import_comet(cfg, req.secrets)
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

    install_log_filter(secrets)
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


def _fallback(comet_ml: Any, req: Request, reason: str) -> tuple[Tracker, str]:
    """Online was asked for and cannot be had: an offline archive, if allowed."""
    if not req.cfg.fallback_offline:
        return Tracker(reason), f"tracking: off ({reason}; tracking.fallback_offline is false)"
    return _offline(comet_ml, req, f"{reason}; offline archive instead")


def _offline(comet_ml: Any, req: Request, reason: str) -> tuple[Tracker, str]:
    os.makedirs(req.offline_dir, exist_ok=True)
    experiment = comet_ml.OfflineExperiment(
        project_name=req.cfg.project,
        workspace=req.cfg.workspace,
        offline_directory=req.offline_dir,
        **_experiment_kwargs(),
    )
    tracker = populate(experiment, "offline", reason, req)
    return tracker, (
        f"tracking: comet offline ({reason}); experiment {req.experiment_name} in project "
        f"{req.cfg.project}; after the run: comet upload {tracker.archive_path()}"
    )


def _online(comet_ml: Any, req: Request, server: str) -> tuple[Tracker, str]:
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
            quiet_end(experiment)()

    COMET_LOG_FILTER.rejected = False
    bound = create_timeout_s(req.cfg)
    start = time.monotonic()
    finished = run_bounded(create, bound)
    spent = time.monotonic() - start
    if not finished:
        abandoned.set()
        return _fallback(
            comet_ml, req, f"Comet server {server} did not create the experiment within {bound:g} s"
        )
    if "error" in box:
        raise box["error"]
    experiment = box["experiment"]

    if COMET_LOG_FILTER.rejected:
        quiet_end(experiment)()
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
        quiet_end(experiment)()
        return _fallback(
            comet_ml,
            req,
            f"Comet server {server} did not create the experiment (after {spent:.1f} s)",
        )

    tracker = populate(experiment, "online", f"{KEY_ENV} set and {server} reachable", req)
    where = tracker.info().get("url") or server
    return tracker, (
        f"tracking: comet online, experiment {req.experiment_name} in project "
        f"{req.cfg.project}: {where}"
    )


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
