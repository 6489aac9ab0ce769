"""A preloaded interpreter for the tests' training runs: ``python -m scalescope.train`` without
paying for Python's start and the imports of torch and Lightning (about 5 s of CPU) each time.

The server (this file run as a script) imports torch, Lightning and scalescope's training
modules once, then waits on a Unix socket. For each request it forks; the child takes the
request's working directory, environment, argv and descriptors (stdin, stdout, stderr, passed
over the socket), and runs ``scalescope.train`` as ``python -m`` does (``runpy``: ``__main__`` is
that module, ``sys.argv[0]`` its file, the working directory first on ``sys.path``), then exits
as that process would (its exit code, atexit handlers, thread shutdown).

The other ranks a run starts (``python -m scalescope.train`` with LOCAL_RANK set) are forked
the same way: in a forked process ``sys.executable`` is a shim (:func:`shim`) that asks the
server for the fork with its own working directory, environment and descriptors, passes
SIGTERM, SIGINT and SIGHUP on, returns the rank's exit code, and takes the rank with it when
it is killed. Rank 0 adopts, watches and ends it exactly as it would a fresh interpreter.
Every process is real (the DDP process group, signals, files); only the interpreter's
start-up is shared.

The client (:func:`run`) is what ``core_helpers.run_train`` calls. It falls back to a fresh
interpreter where the server cannot serve the request exactly (a different ``PYTHONPATH``)
or is switched off (``SCALESCOPE_TEST_FRESH_PROCESSES=1``).
"""

from __future__ import annotations

import atexit
import contextlib
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
    import scalescope.job.clocks.timing
    import scalescope.job.diagnosis.section
    import scalescope.job.diagnosis.step_breakdown
    import scalescope.job.run.entry
    import scalescope.workloads.base  # noqa: F401


def _single_threaded() -> bool:
    """fork() copies only the calling thread: no Python thread may run beside it. (The BLAS
    libraries' idle worker pools, started when numpy and scipy load, are native threads that
    re-create themselves in a forked child, as in every DataLoader worker forked after
    ``import torch``.)"""
    return threading.active_count() == 1


def _serve(path: str) -> tuple[dict[str, Any], list[int]]:
    """Serve requests until killed; returns (in a forked child only) the child's request and
    the descriptors that came with it (its stdin, stdout and stderr)."""
    _preload()
    shim = _write_shim(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    # Children are reaped by the kernel: clients wait on a pidfd, not on this process.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    ready = "ready" if _single_threaded() else "threaded"
    sys.stdout.write(f"{ready}\n")
    sys.stdout.flush()
    while True:
        conn, _ = listener.accept()
        with conn:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            while data and not data.endswith(b"\n"):  # the rest of a long request
                more = conn.recv(1 << 20)
                if not more:
                    break
                data += more
            if not data.endswith(b"\n") or len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                continue
            request = json.loads(data)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                request["shim"] = shim
                return dict(request), list(fds)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}\n".encode())


def _write_shim(path: str) -> str:
    """An executable that stands for ``python`` in the forked processes (``sys.executable``):
    a rank they start (``python -m scalescope.train ...``) is forked from this server too."""
    shim = os.path.join(os.path.dirname(path), "python")
    here = os.path.dirname(os.path.abspath(__file__))
    Path(shim).write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {here!r})\n"
        "import zygote\n"
        f"sys.exit(zygote.shim({path!r}, {sys.executable!r}))\n"
    )
    os.chmod(shim, 0o755)
    return shim


def _become(request: Mapping[str, Any], fds: Sequence[int]) -> None:
    """In the forked child: take the request's process state, then run the module."""
    import runpy

    for fd, target in zip(fds, (0, 1, 2), strict=True):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if request.get("watch") is not None:
        _die_with(int(request["watch"]))
    sys.executable = request["shim"]  # the ranks this one starts are forked here too
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


def _die_with(pid: int) -> None:
    """End this process (SIGKILL) when process ``pid`` ends: a rank forked for a shim goes
    with it, as the real process the shim stands for would."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGKILL)
        return

    def watch() -> None:
        select.select([fd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="zygote-watch", daemon=True).start()


def shim(path: str, python: str) -> int:
    """``python -m <module> ...`` started by a forked process: forked from the server at
    ``path`` with this process's working directory, environment and descriptors; its exit
    code returned, SIGTERM, SIGINT and SIGHUP passed on, and it dies with this process.
    Anything else (or a server gone) runs the real ``python``."""
    args = sys.argv[1:]
    if len(args) < 2 or args[0] != "-m":
        os.execv(python, [python, *args])
    with tempfile.TemporaryDirectory(prefix="scalescope-rank-") as folder:
        rc_file = os.path.join(folder, "rc")
        request = {
            "module": args[1],
            "argv": args[2:],
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "rc": rc_file,
            "watch": os.getpid(),
        }
        try:
            pid = _request(path, request, [0, 1, 2])
        except OSError:
            os.execv(python, [python, *args])
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda signum, _frame: _signal(pid, signum))
        _wait(pid, None, args)
        text = Path(rc_file).read_text() if os.path.exists(rc_file) else ""
        return int(text) if text else 128 + signal.SIGKILL


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _request(path: str, request: Mapping[str, Any], fds: Sequence[int]) -> int:
    """Send one request and its descriptors; the forked process's pid."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], list(fds))
        return int(conn.makefile().readline())


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
        request = {"module": module, "argv": list(argv), "cwd": str(cwd), "env": dict(env)}
        request["rc"] = files["rc"]
        fds = [
            os.open(os.devnull, os.O_RDONLY),
            os.open(files["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
            os.open(files["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        ]
        try:
            pid = _request(address, request, fds)
        finally:
            for fd in fds:
                os.close(fd)
        _wait(pid, timeout, argv)
        rc_text = Path(files["rc"]).read_text() if os.path.exists(files["rc"]) else ""
        return subprocess.CompletedProcess(
            [sys.executable, "-m", module, *argv],
            int(rc_text) if rc_text else -signal.SIGKILL,
            Path(files["stdout"]).read_text(errors="replace"),
            Path(files["stderr"]).read_text(errors="replace"),
        )


def _wait(pid: int, timeout: float | None, argv: Sequence[str]) -> None:
    """Until process ``pid`` (not a child of this one) has exited; TimeoutExpired (and the
    process killed) after ``timeout`` seconds."""
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
    _become(*_serve(sys.argv[1]))
