"""``python -m analysis.summarize --comet``: one scaling-summary experiment per series, as
the real command writes it (a subprocess) and Comet's own ``comet offline`` reads it.

The records are tests/fixtures/projection (one series at 1, 2 and 3 devices): the archive
must hold ``efficiency`` and ``speedup`` at steps 1, 2 and 3 (step = world size) equal to
summary.json's, the scaling table, the charts and report.html; the API key, set in the
environment, must appear in no file and no output line."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from analysis_helpers import REPO, run_summarize
from tracking_helpers import LoopbackJson, serve_loopback

from analysis.present.report.comet import (
    VIEW_NAME,
    copy_workspace_view,
    publish_scaling_view,
    publish_view,
)
from scalescope.config import TrackingConfig
from scalescope.job.tracking.comet import read_offline_archive, rest_api

FIXTURE = REPO / "tests" / "fixtures" / "projection"
SECRET = "fake-comet-key-4711-never-printed"

pytestmark = pytest.mark.timeout(300)


def test_offline_summary_experiment_is_read_by_comet_offline(tmp_path: Path) -> None:
    out = tmp_path / "results" / "summary"
    proc = run_summarize(FIXTURE, "--out", out, "--comet", "offline", env={"COMET_API_KEY": SECRET})
    assert proc.returncode == 0, proc.stderr
    (archive,) = (tmp_path / "results" / "comet").glob("*.zip")
    assert f"offline summary experiment {archive}" in proc.stderr
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "comet"), "offline", "--csv", str(archive)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert '"metric","efficiency"' in shown.stdout and '"metric","speedup"' in shown.stdout

    data = read_offline_archive(archive)
    doc = json.loads((out / "summary.json").read_text())
    assert data["project"] == "scalescope-scaling"
    assert "scaling-summary" in data["tags"]
    assert data["name"] == "scaling summary: spiral · weak · fp32"
    assert data["parameters"]["scaling_mode"] == "weak"
    effs = {m["step"]: m["value"] for m in data["metrics"]["efficiency"]}
    speedups = {m["step"]: m["value"] for m in data["metrics"]["speedup"]}
    assert sorted(effs) == [1, 2, 3]
    for r in doc["scaling"]:
        assert effs[r["world_size"]] == pytest.approx(r["per_device_throughput_efficiency"])
        assert speedups[r["world_size"]] == pytest.approx(r["speedup"])
    assert {m["step"] for m in data["metrics"]["comm_pts"]} == {2, 3}  # the waterfall's parts
    counts = data["message_counts"]
    assert counts.get("log_other", 0) >= 4, counts
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        assert len(names) >= 3 + 8, names  # metadata, the table, the charts, report.html
        blob = b"".join(zf.read(n) for n in names)
    assert b"Scaling report" in blob  # report.html is in it

    # the key: nowhere
    assert SECRET not in proc.stdout + proc.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET.encode() not in blob


def test_without_a_key_auto_logs_nothing_and_the_summary_stands(tmp_path: Path) -> None:
    out = tmp_path / "summary"
    proc = run_summarize(FIXTURE, "--out", out, "--comet", env={"COMET_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr
    assert "comet: spiral · weak · fp32: tracking: off" in proc.stderr
    assert (out / "report.html").exists() and not list(tmp_path.rglob("*.zip"))


def test_comet_with_no_write_is_one_line(tmp_path: Path) -> None:
    proc = run_summarize(FIXTURE, "--no-write", "--comet", "offline")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "python -m analysis.summarize: error: --comet logs the written summary: drop --no-write"
    )


# --- the project view (--comet-view) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        (["--comet-view"], "--comet-view needs --comet auto or online"),
        (
            ["--comet", "offline", "--comet-view"],
            "--comet-view needs --comet auto or online "
            "(an offline archive has no server to hold a view)",
        ),
    ],
)
def test_comet_view_without_a_server_mode_is_one_line(
    tmp_path: Path, flags: list[str], why: str
) -> None:
    out = tmp_path / "summary"
    proc = run_summarize(FIXTURE, "--out", out, *flags)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"python -m analysis.summarize: error: {why}"
    assert not out.exists()


def test_comet_view_that_cannot_be_made_is_a_warning_and_the_summary_stands(
    tmp_path: Path,
) -> None:
    """The real command: COMET_START_ONLINE=false keeps the view off the network (built or
    copied, a view needs the server), so the line says why. Exit 0, the summary and the
    offline archive written, the key nowhere."""
    out = tmp_path / "results" / "summary"
    env = {"COMET_API_KEY": SECRET, "COMET_START_ONLINE": "false"}
    proc = run_summarize(FIXTURE, "--out", out, "--comet", "--comet-view", env=env)
    assert proc.returncode == 0, proc.stderr
    assert (out / "summary.json").exists() and (out / "report.html").exists()
    assert list((tmp_path / "results" / "comet").glob("*.zip"))
    (line,) = [ln for ln in proc.stderr.splitlines() if "comet: view" in ln]
    assert line.startswith("python -m analysis.summarize: warning: comet: view not made: ")
    assert "COMET_START_ONLINE=false" in line
    assert SECRET not in proc.stdout + proc.stderr


# A view made by hand in another project of the workspace (p-0), as views/get-all lists it
# with includeWorkspaceViews: its layout names the scaling metrics, and an older one of the
# same name that must not be the one copied.
HAND_MADE = {
    "templateId": "t-5",
    "templateName": VIEW_NAME,
    "projectId": "p-0",
    "experimentKey": "e-src",
    "lastUpdate": 1_790_000_000_000,
    "v3": {"experimentKey": "e-src", "sections": [{"panels": ["efficiency", "speedup"]}]},
}
OLDER = {**HAND_MADE, "templateId": "t-4", "lastUpdate": 1_700_000_000_000, "v3": {"old": 1}}


class _ViewServer(LoopbackJson):
    """Comet's REST endpoints a project view needs, on loopback: the project (p-1), its
    views, the upsert. ``behaviour``: ok, no-project, exists (a view of that name is in the
    project), workspace (only other projects of the workspace have one: HAND_MADE, OLDER) or
    refuse (the upsert answers 500)."""

    behaviour = "ok"
    seen: list[tuple[str, str, Any]] = []  # noqa: RUF012 - one list per server

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, None))
        if self.path.endswith("isAlive/ver"):
            self.reply(200, {"version": "3.50.0"})
        elif "/project?" in self.path and self.behaviour != "no-project":
            self.reply(200, {"projectId": "p-1", "projectName": "scalescope-scaling"})
        elif "/views/get-all" in self.path:
            there = [{"templateId": "t-9", "templateName": VIEW_NAME, "projectId": "p-1"}]
            views = there if self.behaviour == "exists" else []
            if self.behaviour == "workspace" and "includeWorkspaceViews=true" in self.path:
                views = [OLDER, HAND_MADE, {**HAND_MADE, "templateName": "other"}]
            self.reply(200, {"views": views})
        else:
            self.reply(404, {"msg": "not here"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.seen.append(("POST", self.path, body))
        if self.path.endswith("write/views/upsert") and self.behaviour != "refuse":
            self.reply(200, {**body, "templateId": "t-1"})
        else:
            self.reply(500, {"msg": "views are down"})


@contextlib.contextmanager
def view_server(behaviour: str) -> Iterator[tuple[int, list[tuple[str, str, Any]]]]:
    handler = type("Handler", (_ViewServer,), {"behaviour": behaviour, "seen": []})
    url = "http://127.0.0.1:{}/clientlib/"
    with (
        serve_loopback(handler) as port,
        mock.patch.dict(
            os.environ, {"COMET_API_KEY": SECRET, "COMET_URL_OVERRIDE": url.format(port)}
        ),
    ):
        os.environ.pop("COMET_START_ONLINE", None)
        os.environ.pop("COMET_OFFLINE", None)
        yield port, handler.seen


def _rest_api() -> Any:
    api, why, secrets = rest_api(TrackingConfig(mode="online", project="scalescope-scaling"))
    assert api is not None, why
    assert secrets == [SECRET]
    return api


def test_a_view_is_sent_to_the_server_as_comet_ml_upserts_it() -> None:
    """comet_ml's REST client, for real, against the stand-in: the project looked up, its
    views listed, the view upserted under its name."""
    from comet_ml.api_objects.view import View

    with view_server("ok") as (_port, seen):
        saved, line = publish_view(
            _rest_api(), View(name=VIEW_NAME), workspace="lab", project="scalescope-scaling"
        )
    assert saved and line == "view 'scalescope scaling' created in project lab/scalescope-scaling"
    paths = [(verb, path.split("?")[0].rsplit("/v2/", 1)[-1]) for verb, path, _ in seen]
    assert ("GET", "project") in paths and ("GET", "views/get-all") in paths
    (posted,) = [body for verb, path, body in seen if path.endswith("write/views/upsert")]
    assert posted["projectId"] == "p-1" and posted["templateName"] == VIEW_NAME
    assert all(SECRET not in json.dumps(body or {}) for _, _, body in seen)


def test_a_view_of_that_name_is_not_duplicated() -> None:
    from comet_ml.api_objects.view import View

    with view_server("exists") as (_port, seen):
        api = _rest_api()
        saved, line = publish_view(
            api, View(name=VIEW_NAME), workspace="lab", project="scalescope-scaling"
        )
    posts = [body for verb, _path, body in seen if verb == "POST"]
    if hasattr(api, "update_view"):  # comet_ml with update_view: in place, same template
        assert saved and line.startswith("view 'scalescope scaling' updated")
        assert posts and all(p.get("templateId") == "t-9" for p in posts)
    else:  # not saved: a warning line, and nothing sent
        assert not saved and "cannot update it in place" in line
        assert posts == []


@pytest.mark.parametrize(
    ("behaviour", "error", "message"),
    [
        ("no-project", "LookupError", "no project lab/scalescope-scaling on the server yet"),
        ("refuse", "CometRestApiException", "status code 500: views are down"),
    ],
)
def test_a_server_that_refuses_raises_and_says_why(
    behaviour: str, error: str, message: str
) -> None:
    from comet_ml.api_objects.view import View

    with view_server(behaviour), pytest.raises(Exception) as caught:
        publish_view(
            _rest_api(), View(name=VIEW_NAME), workspace="lab", project="scalescope-scaling"
        )
    assert type(caught.value).__name__ == error
    assert message in str(caught.value) and SECRET not in str(caught.value)


def test_a_view_made_by_hand_in_the_workspace_is_copied_into_the_project() -> None:
    """comet_ml's REST client, for real: the newest view of that name in another project of
    the workspace is upserted into this one, its layout whole, the source's ids stripped."""
    with view_server("workspace") as (_port, seen):
        made, line = copy_workspace_view(_rest_api(), workspace="lab", project="scalescope-scaling")
    assert made, line
    assert line == (
        "view 'scalescope scaling' copied into project lab/scalescope-scaling from its workspace"
    )
    (posted,) = [body for verb, path, body in seen if path.endswith("write/views/upsert")]
    assert posted["projectId"] == "p-1" and posted["templateName"] == VIEW_NAME
    assert posted["v3"] == {"sections": [{"panels": ["efficiency", "speedup"]}]}
    assert "templateId" not in posted and "experimentKey" not in posted
    assert all(SECRET not in json.dumps(body or {}) for _, _, body in seen)


@pytest.mark.parametrize(
    ("behaviour", "made", "words"),
    [
        ("exists", True, "view 'scalescope scaling' already in project lab/scalescope-scaling"),
        ("ok", False, "no project of workspace lab has a view 'scalescope scaling' to copy"),
    ],
)
def test_nothing_is_copied_where_the_project_has_the_view_or_nothing_has_it(
    behaviour: str, made: bool, words: str
) -> None:
    with view_server(behaviour) as (_port, seen):
        got, line = copy_workspace_view(_rest_api(), workspace="lab", project="scalescope-scaling")
    assert got is made and words in line, line
    assert [path for verb, path, _ in seen if verb == "POST"] == []


def test_comet_view_sends_the_scaling_panels() -> None:
    """``--comet-view``'s own path with the installed comet_ml: with comet_ml.views the
    upsert carries the panels it built; without it (comet_ml 3.58) the view made by hand in
    the workspace, copied. Either way the efficiency and speedup panels reach the server."""
    with view_server("workspace") as (_port, seen):
        made, line = publish_scaling_view(project="scalescope-scaling", workspace="lab")
    assert made, line
    (body,) = [body for _verb, path, body in seen if path.endswith("write/views/upsert")]
    assert body["templateName"] == VIEW_NAME
    assert '"efficiency"' in json.dumps(body) and '"speedup"' in json.dumps(body)
    if importlib.util.find_spec("comet_ml.views") is None:
        assert line.startswith("view 'scalescope scaling' copied into project lab/")


def test_comet_view_without_a_view_to_copy_says_how_to_make_one() -> None:
    if importlib.util.find_spec("comet_ml.views") is not None:
        pytest.skip("this comet_ml builds the view: nothing is copied")
    with view_server("ok") as (_port, seen):
        made, line = publish_scaling_view(project="scalescope-scaling", workspace="lab")
    assert not made
    assert line.startswith("view not made: comet_ml ") and "no comet_ml.views" in line
    assert "make it by hand once (docs/comet.md)" in line
    assert [path for verb, path, _ in seen if verb == "POST"] == []


def test_an_unreachable_server_is_a_reason_not_a_wait() -> None:
    with view_server("ok") as (port, _seen):
        pass  # closed again: nothing listens on the port now
    with mock.patch.dict(
        os.environ,
        {"COMET_API_KEY": SECRET, "COMET_URL_OVERRIDE": f"http://127.0.0.1:{port}/clientlib/"},
    ):
        api, why, _ = rest_api(TrackingConfig(mode="online", project="p", connect_timeout_s=2))
    assert api is None
    assert "unreachable: connection refused" in why and SECRET not in why


def test_the_plan_goes_to_the_scaling_summary_experiment(tmp_path: Path) -> None:
    """With --plan-work the experiment holds the plan's table and its time to train vs
    node-hours chart."""
    out = tmp_path / "results" / "summary"
    argv = ["--plan-work", "1e6", "--comet", "offline"]
    proc = run_summarize(FIXTURE, "--out", out, *argv, env={"COMET_API_KEY": SECRET})
    assert proc.returncode == 0, proc.stderr
    (archive,) = (tmp_path / "results" / "comet").glob("*.zip")
    (chart,) = (out / "charts").glob("plan_*.png")
    with zipfile.ZipFile(archive) as zf:
        blob = b"".join(zf.read(n) for n in zf.namelist())
    assert chart.read_bytes() in blob  # the chart, as an image
    assert b"node_hours_high" in blob  # the plan's table
