"""Comet scaling dashboards: one *scaling summary* experiment per series.

``python -m analysis.summarize RESULTS --comet [auto|online|offline]`` logs, after the summary
is written, one experiment per series (the jobs' tracking rules: online needs
``COMET_API_KEY`` and a reachable server, else an offline archive when allowed; the key is
read from the environment only and never written anywhere):

* metrics with **step = world size**: ``speedup``, ``efficiency`` (parallel efficiency under
  strong scaling, per-device throughput efficiency under weak) with ``efficiency_ci_low`` /
  ``_high``, ``throughput``, ``throughput_per_device`` and, where the waterfall has them,
  ``lost_pts`` and each part's points (``comm_pts``, ``input_pts``...): Comet's line chart of
  ``efficiency`` against step is the scaling curve, and two clusters' or two settings'
  summaries overlay in one project chart;
* the scaling table (``log_table``; the plan's too with ``--plan-work``), the charts as images
  (the plan's time to train vs node-hours among them), ``report.html`` as an asset;
* parameters: the series' keys; others: its sweeps, clusters and the experiment keys of the
  jobs behind it, to go from the curve to a job; tags ``scaling-summary``, the sweeps and
  the clusters.

``--comet-view`` also creates (or updates in place) the project view ``scalescope scaling``:
line panels of ``efficiency``, ``speedup``, ``throughput_per_device`` and the waterfall's
parts against step, built with ``comet_ml.views`` (the builder Comet documents) and saved
through the REST API. A comet_ml without that builder (3.58 and earlier) cannot describe a
panel (the layout is otherwise an undocumented format), so it copies instead: a view of that
name made by hand once in any project of the workspace is copied into this one with
comet_ml's documented ``View.as_portable``; with none to copy, the line says how to make it.

comet_ml is imported only here (and only with ``--comet``), through
``scalescope.job.tracking.comet``, which guards every call and redacts the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.compute.metrics import SERIES_KEYS, efficiency_column
from analysis.compute.stats import finite_number
from analysis.compute.waterfall import PARTS
from analysis.read.frame import named
from scalescope.errors import described

SUMMARY_TAG = "scaling-summary"
VIEW_NAME = "scalescope scaling"
# (section title, one line panel per tuple of metrics): every metric at step = world size
VIEW_LAYOUT: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("Scaling: step = world size", (("efficiency",), ("speedup",), ("throughput_per_device",))),
    ("Where the time went: points of the step", (("lost_pts", *(f"{p}_pts" for p in PARTS)),)),
)


def series_metrics(doc: Mapping[str, Any], series: str) -> list[tuple[int, dict[str, float]]]:
    """(world size, metrics) per scale of one series, from the summary document.

    A Comet step holds one value per metric, and two shapes can share a world size (1x2 and
    2x1): the shape with the fewest nodes keeps the plain names (the curve from one device
    through a full node to many nodes), the others log theirs suffixed with their shape
    (``efficiency@2x1``)."""
    rows = sorted(
        (r for r in doc["scaling"] if r["series"] == series),
        key=lambda r: (r["world_size"], r["nodes"]),
    )
    parts = {
        (r["world_size"], r["nodes"]): r for r in doc.get("diagnosis", []) if r["series"] == series
    }
    out = []
    eff = efficiency_column(r["scaling_mode"] for r in rows)
    for i, r in enumerate(rows):
        values: dict[str, Any] = {
            "speedup": r["speedup"],
            "efficiency": r[eff],
            "efficiency_ci_low": r[f"{eff}_ci_low"],
            "efficiency_ci_high": r[f"{eff}_ci_high"],
            "throughput": r["samples_per_s_mean"],
            "throughput_per_device": r["samples_per_s_per_device_mean"],
        }
        w = parts.get((r["world_size"], r["nodes"]))
        if w is not None and not w.get("is_baseline"):
            values["lost_pts"] = w.get("lost_pts_mean")
            for part in PARTS:
                values[f"{part}_pts"] = w.get(f"{part}_pts_mean")
        shared = i > 0 and rows[i - 1]["world_size"] == r["world_size"]
        suffix = f"@{r['nodes']}x{r['devices_per_node']}" if shared else ""
        clean = {
            k + suffix: v
            for k, v in ((k, finite_number(v)) for k, v in values.items())
            if v is not None
        }
        out.append((int(r["world_size"]), clean))
    return out


def log_scaling_summaries(
    doc: Mapping[str, Any],
    summary_dir: Path,
    runs: pd.DataFrame,
    *,
    mode: str,
    project: str,
    workspace: str | None = None,
) -> list[str]:
    """One experiment per series (see the module doc); returns the lines to print."""
    from scalescope.config import TrackingConfig
    from scalescope.job.tracking.comet import start_tracking

    lines: list[str] = []
    series_names = list(dict.fromkeys(r["series"] for r in doc["scaling"]))
    charts = sorted((summary_dir / "charts").glob("*.png"))
    for series in series_names:
        first = next(r for r in doc["scaling"] if r["series"] == series)
        mine = _runs_of(runs, first)
        sweeps, clusters = named(mine, "sweep_id"), named(mine, "cluster")
        keys = named(mine, "comet_experiment_key")
        cfg = TrackingConfig(
            mode=mode,  # type: ignore[arg-type]
            project=project,
            workspace=workspace,
            offline_dir=str(summary_dir.parent / "comet"),  # beside the jobs' archives
        )
        tracker, line = start_tracking(
            cfg,
            output_dir=str(summary_dir),
            experiment_name=f"scaling summary: {series}",
            tags=[
                SUMMARY_TAG,
                *(f"sweep:{s}" for s in sweeps),
                *(f"cluster:{c}" for c in clusters),
            ],
            params={k: first.get(k) for k in SERIES_KEYS if first.get(k) is not None},
            others={
                "series": series,
                "sweeps": ",".join(sweeps),
                "clusters": ",".join(clusters),
                "job_experiment_keys": ",".join(keys),
            },
        )
        lines.append(f"{series}: {line}")
        if tracker.mode == "off":
            continue
        for world, metrics in series_metrics(doc, series):
            tracker.log_metrics(metrics, step=world)
        table = pd.DataFrame([r for r in doc["scaling"] if r["series"] == series])
        tracker.call("log_table", "scaling.csv", tabular_data=table)
        planned = [r for r in doc.get("plan", []) if r["series"] == series]
        if planned:  # the plan's rows beside its chart (plan_<slug>.png, with the charts)
            tracker.call("log_table", "plan.csv", tabular_data=pd.DataFrame(planned))
        for png in charts:
            tracker.call("log_image", str(png), name=png.stem)
        report = summary_dir / "report.html"
        if report.exists():
            tracker.call("log_asset", str(report), file_name="report.html")
        tracker.end()
        info = tracker.info()
        where = info.get("url") or info.get("archive") or ""
        error = f"; {info['error']}" if info.get("error") else ""
        lines.append(f"{series}: {info['mode']} summary experiment {where}{error}")
    return lines


def _runs_of(runs: pd.DataFrame, first: Mapping[str, Any]) -> pd.DataFrame:
    """The runs of the series ``first`` (a scaling row) belongs to."""
    if runs.empty:
        return runs
    mask = pd.Series(True, index=runs.index)
    for key in SERIES_KEYS:
        if key in runs and first.get(key) is not None:
            mask &= runs[key].astype(str) == str(first[key])
    return runs[mask]


def build_scaling_view(name: str = VIEW_NAME) -> Any | None:
    """The project view (VIEW_LAYOUT) built with ``comet_ml.views``; None where the installed
    comet_ml has no such builder. Makes no network call."""
    try:
        from comet_ml import views  # type: ignore[attr-defined]
    except ImportError:
        return None
    sections = [
        views.Section(title, [views.line_panel(list(metrics)) for metrics in panels])
        for title, panels in VIEW_LAYOUT
    ]
    return views.build_view(name, sections=sections)


def _views_in(api: Any, workspace: str | None, project: str) -> tuple[str, list[Any]]:
    """(the workspace, the project's views): the workspace defaults to the key's; a project
    not on the server is a LookupError that says what to do."""
    workspace = workspace or api.get_default_workspace()
    if api.get_project(workspace, project) is None:
        raise LookupError(
            f"no project {workspace}/{project} on the server yet (summary experiments still in "
            "an offline archive? comet upload it, then run --comet-view again)"
        )
    return workspace, api.get_views(workspace, project)


def _saved(view: Any) -> None:
    if view is None:
        raise RuntimeError("the server returned no view")


def publish_view(api: Any, view: Any, *, workspace: str | None, project: str) -> tuple[bool, str]:
    """Save ``view`` in the project through comet_ml's REST client: updated in place where
    a view of that name exists, created otherwise. Returns (saved, the line to print); raises
    on a server that refuses."""
    workspace, views = _views_in(api, workspace, project)
    same = [v for v in views if v.name == view.name]
    if same and hasattr(api, "update_view"):
        view.template_id = same[0].template_id
        _saved(api.update_view(workspace, project, view))
        verb = "updated"
    elif same:
        return False, (
            f"view {view.name!r} exists in {workspace}/{project} and this comet_ml cannot "
            "update it in place: delete it in the UI to have it made again"
        )
    else:
        _saved(api.create_view(workspace, project, view))
        verb = "created"
    return True, f"view {view.name!r} {verb} in project {workspace}/{project}"


def copy_workspace_view(
    api: Any, *, workspace: str | None, project: str, name: str = VIEW_NAME
) -> tuple[bool, str]:
    """Where comet_ml cannot build the view: copy the view ``name`` that a project of the
    workspace already has (made by hand once) into ``project``, the most recently changed
    one where several have it, stripped of the source's identifiers (``View.as_portable``).
    Returns (the project has the view, the line to print); raises on a server that refuses."""
    import comet_ml

    workspace, views = _views_in(api, workspace, project)
    if any(v.name == name for v in views):
        return True, f"view {name!r} already in project {workspace}/{project}: kept as it is"
    # the project has none (above), so every one of that name is another project's
    others = [
        v for v in api.get_views(workspace, project, include_workspace_views=True) if v.name == name
    ]
    if not others:
        return False, (
            f"comet_ml {comet_ml.__version__} has no comet_ml.views (the view builder Comet "
            f"documents) and no project of workspace {workspace} has a view {name!r} to copy: "
            "make it by hand once (docs/comet.md) and --comet-view copies it to every project"
        )
    source = max(others, key=lambda v: v.last_update or 0)
    _saved(api.create_view(workspace, project, source.as_portable()))
    return True, f"view {name!r} copied into project {workspace}/{project} from its workspace"


def publish_scaling_view(*, project: str, workspace: str | None) -> tuple[bool, str]:
    """``--comet-view``: (made, the line to print). Never raises: a failure is a line."""
    from scalescope.config import TrackingConfig
    from scalescope.job.tracking.comet import KEY_ENV, redact, rest_api

    view = build_scaling_view()
    secrets = [os.environ.get(KEY_ENV, "")]
    try:
        api, why, found = rest_api(TrackingConfig(mode="online", project=project))
        secrets += found
        if api is None:
            return False, f"view not made: {why}"
        if view is None:
            made, line = copy_workspace_view(api, workspace=workspace, project=project)
            return made, line if made else f"view not made: {line}"
        return publish_view(api, view, workspace=workspace, project=project)
    except Exception as exc:  # the server or comet_ml: the summary stands
        return False, f"view not made: {redact(described(exc), secrets)}"
