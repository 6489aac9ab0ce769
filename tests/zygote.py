"""A preloaded interpreter for the tests' training runs: ``python -m scalescope.train`` without
paying for Python's start and the imports of torch and Lightning (about 5 s of CPU) each time.

The server (this file run as a script) imports torch, Lightning and scalescope's training
modules once, then waits on a Unix socket. For each request it forks; the child takes the
request's working directory, environment, argv and output files, and runs
``scalescope.train`` as ``python -m`` does (``runpy``: ``__main__`` is that module, ``sys.argv[0]``
its file, the working directory first on ``sys.path``), then exits as that process would
(its exit code, atexit handlers, thread shutdown). The child is a real process: its other
ranks, the DDP process group, signals and files are those of a fresh run; only the
interpreter's start-up is shared.

The client (:func:`run`) is what ``core_helpers.run_train`` calls. It falls back to a fresh
interpreter where the server cannot serve the request exactly (a different ``PYTHONPATH``)
or is switched off (``SCALESCOPE_TEST_FRESH_PROCESSES=1``).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_FRESH = "SCALESCOPE_TEST_FRESH_PROCESSES"
_START_TIMEOUT_S = 180.0


# --- server -----------------------------------------------------------------------------------


def _preload() -> None:
    """What every training run imports before it does anything of its own."""
    import lightning.pytorch  # noqa: F401
    import torch  # noqa: F401

    import scalescope.cli
    import scalescope.job.diagnosis
    import scalescope.job.entry
    import scalescope.job.timing
    import scalescope.workloads.base  # noqa: F401


def _single_threaded() -> bool:
    """fork() copies only the calling thread: no Python thread may run beside it. (The BLAS
    libraries' idle worker pools, started when numpy and scipy load, are native threads that
    re-create themselves in a forked child, as in every DataLoader worker forked after
    ``import torch``.)"""
    return threading.active_count() == 1


def _serve(path: str) -> dict[str, Any]:
    """Serve requests until killed; returns (in a forked child only) the child's request."""
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    # Children are reaped by the kernel: the client waits on a pidfd, not on this process.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    ready = "ready" if _single_threaded() else "threaded"
    sys.stdout.write(f"{ready}\n")
    sys.stdout.flush()
    while True:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            if not data:
                continue
            request = json.loads(data)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                return dict(request)
            conn.sendall(f"{pid}\n".encode())


def _become(request: Mapping[str, Any]) -> None:
    """In the forked child: take the request's process state, then run the module."""
    import runpy

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    sys.path[0] = os.getcwd()  # as `python -m` puts the working directory first
    sys.argv = ["-m", *request["argv"]]
    code: Any = 1
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
        raise
    finally:
        rc = code if isinstance(code, int) else (0 if code is None else 1)
        Path(request["rc"]).write_text(str(rc))


# --- client -----------------------------------------------------------------------------------


class _Server:
    """One server per test session, started on first use, stopped at exit."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.path = ""
        self.pythonpath: str | None = None
        self.failed: str | None = None
        self.lock = threading.Lock()

    def address(self, env: Mapping[str, str], server_env: Mapping[str, str]) -> str | None:
        with self.lock:
            if self.failed is None and self.proc is None:
                self._start(server_env)
            if self.failed is not None or self.proc is None or self.proc.poll() is not None:
                return None
            if env.get("PYTHONPATH") != self.pythonpath:
                return None  # its imports came from another path: a fresh interpreter
            return self.path

    def _start(self, env: Mapping[str, str]) -> None:
        folder = tempfile.mkdtemp(prefix="scalescope-zygote-")
        self.path = os.path.join(folder, "socket")
        self.pythonpath = env.get("PYTHONPATH")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", __file__, self.path],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], _START_TIMEOUT_S)
        line = self.proc.stdout.readline().strip() if ready else ""
        if line != "ready":
            self.failed = line or "did not start"
            self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


_SERVER = _Server()
if __name__ != "__main__":
    atexit.register(_SERVER.stop)


def stop() -> None:
    _SERVER.stop()


def run(
    module: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    server_env: Mapping[str, str],
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <argv>`` in ``cwd`` with ``env``, its output captured: from the
    preloaded interpreter (started with ``server_env``) where it can, else a fresh one. Raises
    TimeoutExpired (the process killed) like :func:`subprocess.run`."""
    address = None if os.environ.get(_FRESH) == "1" else _SERVER.address(env, server_env)
    if address is None:
        return subprocess.run(
            [sys.executable, "-m", module, *argv],
            cwd=cwd,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    with tempfile.TemporaryDirectory(prefix="scalescope-run-") as folder:
        files = {k: os.path.join(folder, k) for k in ("stdout", "stderr", "rc")}
        request = {
            "module": module,
            "argv": list(argv),
            "cwd": str(cwd),
            "env": dict(env),
            **files,
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(address)
            conn.sendall(json.dumps(request).encode() + b"\n")
            pid = int(conn.makefile().readline())
        _wait(pid, timeout, argv)
        rc_text = Path(files["rc"]).read_text() if os.path.exists(files["rc"]) else ""
        return subprocess.CompletedProcess(
            [sys.executable, "-m", module, *argv],
            int(rc_text) if rc_text else -signal.SIGKILL,
            Path(files["stdout"]).read_text(errors="replace"),
            Path(files["stderr"]).read_text(errors="replace"),
        )


def _wait(pid: int, timeout: float, argv: Sequence[str]) -> None:
    """Until process ``pid`` (not a child of this one) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # already gone
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while not select.select([fd], [], [], 0.1)[0] and time.monotonic() < deadline:
                pass
            raise subprocess.TimeoutExpired(list(argv), timeout)
    finally:
        os.close(fd)


if __name__ == "__main__":
    _become(_serve(sys.argv[1]))
