"""The example shop end to end: embedded Redis, migrations, worker, web server, HTTP."""

from __future__ import annotations

import fcntl
import json
import os
import runpy
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from functools import partial
from pathlib import Path
from typing import IO, Any

import pytest

from tests.helpers import wait_until
from tests.redis_server import free_port

pytestmark = pytest.mark.worker  # the example's own worker process, beside its web server
ROOT = Path(__file__).resolve().parents[1]


def test_example_shop_closes_an_unpaid_order(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DELAYQ_REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env["SHOP_DB"] = str(tmp_path / "shop.sqlite3")
    env["SHOP_REDIS_DIR"] = str(tmp_path / "redis")  # passes of the suite run side by side
    proc = subprocess.run(
        [sys.executable, str(ROOT / "example_project" / "run.py"), "--smoke",
         "--port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "smoke: the order was closed by the worker" in proc.stdout
    assert "embedded Redis: unix://" in proc.stdout


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DELAYQ_REDIS_URL", "DJANGO_SETTINGS_MODULE", "PORT")}
    env.update(SHOP_DB=str(tmp_path / "shop.sqlite3"), SHOP_REDIS_DIR=str(tmp_path / "redis"))
    env.update(extra)
    return env


def test_manage_py_without_a_redis_refuses_and_says_how(tmp_path: Path) -> None:
    """Not a silent fall-back to a Redis on localhost:6379 that the shop does not use."""
    proc = subprocess.run([sys.executable, str(ROOT / "example_project" / "manage.py"),
                           "delayq_status"], env=_env(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no Redis for the example shop" in proc.stderr
    assert "make example" in proc.stderr and "DELAYQ_REDIS_URL" in proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], list[str]]:
    """run.py in a session of its own (as ``make example`` in a terminal: the terminal's
    Ctrl-C reaches its process group), once the shop runs; its output keeps being read
    into the list returned."""
    shop = subprocess.Popen([sys.executable, str(ROOT / "example_project" / "run.py"),
                             "--port", str(free_port())], env=_env(tmp_path), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    lines: list[str] = []
    assert shop.stdout is not None
    for line in shop.stdout:  # ends when run.py exits
        lines.append(line)
        if "The shop is running" in line:
            break
    assert "The shop is running" in "".join(lines), "".join(lines)

    def read() -> None:
        assert shop.stdout is not None
        lines.extend(shop.stdout)

    threading.Thread(target=read, daemon=True).start()  # keep the pipe open
    return shop, lines


def _stop(shop: subprocess.Popen[str], lines: list[str] | None = None) -> None:
    """Ctrl-C, and a second one if the worker is still draining (the demo's slow job):
    after 30 s, or, given the shop's output ``lines``, as soon as the worker said it
    drains (the two would otherwise arrive as one signal)."""
    if shop.poll() is None:
        os.killpg(shop.pid, signal.SIGINT)
        if lines is not None:
            wait_until(lambda: shop.poll() is not None or "draining (a signal" in "".join(lines),
                       timeout=30)
        try:
            shop.wait(1 if lines is not None else 30)
        except subprocess.TimeoutExpired:
            os.killpg(shop.pid, signal.SIGINT)
            try:
                shop.wait(60)
            except subprocess.TimeoutExpired:  # a failing test leaves nothing behind
                shop.kill()  # its children go with it (PR_SET_PDEATHSIG)
                raise


def _manage(tmp_path: Path, code: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "example_project" / "manage.py"),
                           "shell", "-c", code], env=_env(tmp_path), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def _status(tmp_path: Path, job_id: str) -> str | None:
    with sqlite3.connect(tmp_path / "shop.sqlite3") as db:
        row = db.execute("SELECT status FROM django_delayq_job WHERE id = ?",
                         (job_id,)).fetchone()
    return row[0] if row else None


# A second example in the same checkout, with what it would share with the running one
# (and how refusals name it): the same settings; its own Redis directory (the lock guards
# the database, wherever the Redis directory is); its own database (the embedded Redis's
# directory is guarded too: two Redis servers would share its files).
SECOND_EXAMPLES = {"same": ({}, "the database"),
                   "other-redis-dir": ({"SHOP_REDIS_DIR": "redis-2"}, "the database"),
                   "other-database": ({"SHOP_DB": "other.sqlite3"}, "the Redis directory")}


def test_a_running_example_serves_manage_py_and_refuses_a_second(tmp_path: Path) -> None:
    """One running example (each start costs seconds): ``manage.py`` uses its embedded
    Redis; a second example in the same checkout is refused before it starts anything (it
    would share the database with a Redis of its own: both workers would run each job; or
    two Redis servers would share one directory); after Ctrl-C the Redis URL file and the
    locks are gone."""
    shop, lines = _start(tmp_path)
    try:
        url = (tmp_path / "redis" / "url").read_text().strip()
        assert url.startswith("unix://") and url in "".join(lines)

        def workers() -> list[str]:  # as delayq_status lists them, from the same registry
            return list(json.loads(_manage(tmp_path, (
                "import json; from django_delayq.core.connection import get_engine; "
                "print(json.dumps([w.id for w in get_engine().workers()]))"))))

        wait_until(lambda: len(workers()) == 1, timeout=60, step=0.5)  # run.py's worker
        for name, (other, shared) in SECOND_EXAMPLES.items():
            env = _env(tmp_path, **{k: str(tmp_path / v) for k, v in other.items()})
            proc = subprocess.run([sys.executable, str(ROOT / "example_project" / "run.py"),
                                   "--port", str(free_port())], env=env,
                                  capture_output=True, text=True, timeout=120)
            seen = "%s: %s" % (name, proc.stdout + proc.stderr)
            assert proc.returncode == 1, seen
            assert "another `make example` (pid %d, or a process it started) is using %s" \
                % (shop.pid, shared) in proc.stderr, seen
            assert "The shop is running" not in proc.stdout, seen
            assert "embedded Redis" not in proc.stdout, seen  # refused before anything started
            assert shop.poll() is None and (tmp_path / "redis" / "url").exists(), seen
    finally:
        _stop(shop, lines)
    assert not (tmp_path / "redis" / "url").exists()  # gone with the Redis it named

    for lock in (tmp_path / "shop.sqlite3.run.lock", tmp_path / "redis" / "run.lock"):
        with lock.open("a") as held:
            # free once they are gone (a multi-threaded process's leader shows "Z" while
            # its other threads, holding its files, are still ending)
            wait_until(partial(_locked, held), timeout=30)


def test_ctrl_c_drains_the_worker_and_a_second_stops_it(tmp_path: Path) -> None:
    """The terminal's Ctrl-C reaches run.py's whole process group: the worker gets one
    signal (it drains: a running job finishes), not two (it would stop hard)."""
    shop, lines = _start(tmp_path)
    try:
        job_id = _manage(tmp_path, "from django_delayq import schedule; print(schedule("
                         "'shop.tasks.rebuild_search_index', 4, max_attempts=1).id)")
        wait_until(lambda: _status(tmp_path, job_id) == "running", timeout=60, step=0.2)
        os.killpg(shop.pid, signal.SIGINT)
        wait_until(lambda: "stopping: the worker finishes" in "".join(lines), timeout=30)
        wait_until(lambda: _status(tmp_path, job_id) == "succeeded", timeout=60, step=0.2)
        assert shop.poll() is None  # still draining: the demo's two-minute job runs
        os.killpg(shop.pid, signal.SIGINT)  # the second: the worker stops at once
        shop.wait(60)
    finally:
        _stop(shop)
    out = "".join(lines)
    assert "stopping the worker at once" in out and "worker stopped (exit 3)" in out, out


def _children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG: Linux")
def test_a_killed_example_leaves_nothing_behind(tmp_path: Path) -> None:
    """``kill -9`` of run.py (an IDE's stop button): its worker, web server and Redis go
    with it (in sessions of their own, the group's kill does not reach them), and the
    next start is not refused."""
    shop, _ = _start(tmp_path)
    try:
        kids = _children_of(shop.pid)
        assert len(kids) == 3, kids  # Redis, the worker, the web server
        shop.kill()
        shop.wait(30)

        def alive(pid: int) -> bool:
            try:
                return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False

        wait_until(lambda: not any(alive(pid) for pid in kids), timeout=30)
    finally:
        _stop(shop)
    for lock in (tmp_path / "shop.sqlite3.run.lock", tmp_path / "redis" / "run.lock"):
        with lock.open("a") as held:
            # free once they are gone (a multi-threaded process's leader shows "Z" while
            # its other threads, holding its files, are still ending)
            wait_until(partial(_locked, held), timeout=30)


def _locked(held: IO[str]) -> bool:
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def test_example_on_a_port_in_use_fails_instead_of_claiming_to_run(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, str(ROOT / "example_project" / "run.py")],
                              env=_env(tmp_path, PORT=str(port)), capture_output=True,
                              text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "The shop is running" not in proc.stdout
    assert "port %d is in use" % port in proc.stderr and "PORT=" in proc.stderr
    assert not (tmp_path / "redis").exists()  # nothing was started


def _run_py(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """run.py's functions (it puts example_project/ first on ``sys.path``: restored)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    return runpy.run_path(str(ROOT / "example_project" / "run.py"))


def _tcp_states(port: int) -> list[str]:
    """The states (hex, as /proc/net/tcp writes them: 06 is TIME_WAIT, 0A LISTEN) of the
    IPv4 TCP sockets on local ``port``."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return [f[3] for f in (line.split() for line in lines)
            if int(f[1].rsplit(":", 1)[1], 16) == port]


def test_a_port_left_in_time_wait_is_free_and_a_listening_one_is_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A browser's keep-alive connection, closed by the web server as the example stops,
    leaves its port in TIME_WAIT for a minute: runserver binds it anyway (SO_REUSEADDR),
    so a restart at once is not refused; a server listening on it still is."""
    port_problem = _run_py(monkeypatch)["port_problem"]
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as runserver's
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            conn, _ = server.accept()
            conn.close()  # the server closes first: its end of it waits in TIME_WAIT
            assert client.recv(1) == b""  # its FIN
    if Path("/proc/net/tcp").exists():
        wait_until(lambda: "06" in _tcp_states(port), timeout=30)
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # not free for a bind without SO_REUSEADDR
    assert port_problem(port) is None
    with socket.socket() as listening:  # a server on it, as runserver would be
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(("127.0.0.1", port))
        listening.listen()
        assert "port %d is in use" % port in port_problem(port)
