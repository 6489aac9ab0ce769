"""Shared by the tracking tests of the unit and integration tiers."""

from __future__ import annotations

import contextlib
import glob
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scalescope.record import read_result_json

FAKE_KEY = "FAKEKEY-scalescope-0123456789abcdef"

NAME = "spiral-1n2d-4242"

RECORD: dict[str, Any] = {
    "event": "result",
    "schema_version": 1,
    "job_id": "4242",
    "run_id": "4242.r0",
    "steps": 62,
    "epochs": 2,
    "setup_time_s": 7.5,
    "train_time_s": 0.3,
    "mean_epoch_time_s": 0.15,
    "mean_epoch_time_excl_first_s": 0.14,
    "samples_per_s": 52000.0,
    "samples_per_s_per_device": 26000.0,
    "step_time_s": None,
    "mfu": None,
    "peak_mem_gib": None,
    "peak_host_rss_gib": [0.43, 0.41],
    "epoch_times_s": [0.16, 0.14],
    "node_names": ["node1", "node2"],
    "versions": {"torch": "2.13.0", "lightning": "2.6.6"},
    "config": {"tracking": {"mode": "auto"}},
    "tracking": {},
}


def archives(directory: Path) -> list[Path]:
    """Every Comet offline archive under directory, sorted."""
    return sorted(directory.rglob("*.zip"))


def one_result(out: Path) -> Any:
    """The result.json of the one run under out (fails when there is not exactly one)."""
    found = glob.glob(str(out / "runs" / "*" / "*" / "result.json"))
    assert len(found) == 1, found
    return read_result_json(found[0])


class LoopbackJson(http.server.BaseHTTPRequestHandler):
    """A stand-in for a server's JSON endpoints (Comet's, here): subclasses answer with
    ``reply``; nothing is logged to stderr."""

    def reply(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve_loopback(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` served on 127.0.0.1 in a thread; yields the port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
