"""``manage.py delayq_status`` while the database cannot be read: what it counts there (rows
waiting for their parents, pauses the rows hold, groups, schedules) is unknown, said so,
never shown as a zero; the command exits ``EXIT_DATABASE`` (3) after showing what Redis
holds. The database is really unreachable: SQLite at a path in a directory that does not
exist, PostgreSQL on a port where nothing listens."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from django_delayq import pause_queue, schedule
from django_delayq.core import events
from django_delayq.core.conf import get_settings
from django_delayq.management.commands.delayq_status import collect, render_text
from tests.helpers import wait_until
from tests.redis_server import free_port
from tests.worker.conftest import ROOT, worker_env

pytestmark = pytest.mark.django_db(transaction=True)

EXIT_DATABASE = 3  # docs/status.md: the database could not be read


@contextmanager
def database_down(tmp_path: Path) -> Iterator[None]:
    """The default connection pointed at a database nothing serves, then back."""
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = str(tmp_path / "missing" / "db.sqlite3")
    else:
        connection.settings_dict["PORT"] = str(free_port())
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def _workflow_and_a_pause() -> None:
    """A child waiting for its parent (a row, not in Redis yet) in ``default``, ``emails``
    paused (its row and Redis)."""
    parent = schedule("tests.jobs.noop", delay=3600)
    schedule("tests.jobs.noop", after=[parent])
    pause_queue("emails")


def _down_status(tmp_path: Path, *args: str) -> tuple[str, CommandError]:
    out = StringIO()
    with database_down(tmp_path), pytest.raises(CommandError) as failed:
        call_command("delayq_status", *args, stdout=out)
    return out.getvalue(), failed.value


def test_json_says_the_database_is_unavailable_and_counts_nothing_from_it(
        delayq_engine, tmp_path):  # type: ignore[no-untyped-def]
    _workflow_and_a_pause()
    out = StringIO()
    call_command("delayq_status", "--json", stdout=out)
    up = json.loads(out.getvalue())
    queues = {q["queue"]: q for q in up["queues"]}
    assert queues["default"]["waiting"] == 1 and queues["emails"]["pause_kept"] is True
    assert up["database_unavailable"] is None and up["schedules"] == []
    text, failed = _down_status(tmp_path, "--json")
    assert failed.returncode == EXIT_DATABASE
    assert str(failed).startswith("The database is unavailable: ")
    doc = json.loads(text)  # the whole document was printed first
    assert doc["database_unavailable"] and doc["database_unavailable"] in str(failed)
    queues = {q["queue"]: q for q in doc["queues"]}
    assert queues["default"]["waiting"] is None and queues["emails"]["pause_kept"] is None
    assert queues["default"]["scheduled"] == 1  # Redis's figures as before
    assert doc["paused"] == ["emails"] and queues["emails"]["paused"] is True
    assert doc["groups"] is None and doc["schedules"] is None


def test_text_names_the_database_error_instead_of_a_zero(delayq_engine, tmp_path):  # type: ignore[no-untyped-def]
    _workflow_and_a_pause()
    out = StringIO()
    call_command("delayq_status", stdout=out)
    assert "waiting for their parents (not in Redis yet): 1" in out.getvalue()
    text, failed = _down_status(tmp_path)
    assert failed.returncode == EXIT_DATABASE
    [said] = [line for line in text.splitlines() if line.startswith("! database unavailable")]
    assert str(failed).split(": ", 1)[1] in said  # the same error, once on stdout
    assert "waiting for their parents (not in Redis yet)" not in text
    assert "SCHEDULES unknown" in text and "GROUPS unknown" in text
    assert "PAUSED: emails" in text  # Redis says so


def test_the_database_error_is_escaped(delayq_engine, tmp_path):  # type: ignore[no-untyped-def]
    """The error may name what the settings give (PostgreSQL's host): escaped as all else
    in the text, on stdout and stderr."""
    hostile = "\x1b]0;owned\x07\x1b[2J"
    with database_down(tmp_path):
        status = collect(delayq_engine, get_settings(), ["default"])
    assert status["database_unavailable"]
    text = render_text({**status, "database_unavailable": hostile})
    assert "! database unavailable: \\x1b]0;owned\\x07\\x1b[2J (" in text
    if connection.vendor == "sqlite":
        return  # its errors name no setting
    out = StringIO()
    with database_down(tmp_path), pytest.raises(CommandError) as failed:
        connection.settings_dict["HOST"] = "h" + hostile
        call_command("delayq_status", stdout=out)
    assert failed.value.returncode == EXIT_DATABASE
    assert "owned" in out.getvalue() and "owned" in str(failed.value)
    assert "\x1b" not in out.getvalue() + str(failed.value)


def test_watch_keeps_refreshing_and_says_it_each_time(delayq_engine, tmp_path):  # type: ignore[no-untyped-def]
    _workflow_and_a_pause()
    text, failed = _down_status(tmp_path, "--watch", "--interval", "0.05", "--count", "3")
    assert failed.returncode == EXIT_DATABASE
    assert text.count("delayq status at") == 3 == text.count("! database unavailable")
    lines, failed = _down_status(tmp_path, "--watch", "--json", "--interval", "0.05",
                                 "--count", "2")
    assert [json.loads(line)["database_unavailable"] is not None
            for line in lines.splitlines()] == [True, True]


def test_follow_reads_no_database(delayq_engine, tmp_path):  # type: ignore[no-untyped-def]
    """The event stream is Redis's alone: it is shown, and the command exits 0."""
    schedule("tests.jobs.noop")
    events.flush()
    out = StringIO()
    with database_down(tmp_path):
        call_command("delayq_status", "--follow", "--last", "1", "--count", "1", stdout=out)
    assert "scheduled" in out.getvalue()


def test_manage_py_exits_3_with_the_error_on_stderr(delayq_settings, delayq_engine, tmp_path):  # type: ignore[no-untyped-def]
    _workflow_and_a_pause()
    env = worker_env(delayq_settings)
    env["DELAYQ_TEST_SQLITE"] = str(tmp_path / "missing" / "db.sqlite3")
    env["PGPORT"] = str(free_port())
    proc = subprocess.run([sys.executable, "-m", "django", "delayq_status", "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_DATABASE, proc.stdout + proc.stderr
    assert "The database is unavailable" in proc.stderr and "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["database_unavailable"]
    assert {q["queue"]: q["waiting"] for q in doc["queues"]}["default"] is None


@pytest.mark.skipif(connection.vendor != "postgresql", reason=(
    "SQLite has no server to drop the connection; the PostgreSQL pass runs this test"))
def test_watch_reads_the_database_again_once_it_is_back(delayq_engine):  # type: ignore[no-untyped-def]
    """A connection the server dropped (a restart, a failover) under a long ``--watch``:
    a later refresh connects again, not "unavailable" for ever."""
    _workflow_and_a_pause()
    out, ended = StringIO(), []

    def watch() -> None:
        try:
            call_command("delayq_status", "--watch", "--json", "--interval", "0.2",
                         "--count", "15", stdout=out)
        except CommandError as exc:
            ended.append(exc)
        finally:
            connection.close()

    def refreshes() -> list[dict]:  # type: ignore[type-arg]
        return [json.loads(line) for line in out.getvalue().splitlines()]

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    wait_until(lambda: len(refreshes()) >= 1, timeout=30)
    with connection.cursor() as cursor:  # the watcher's session: the only other one
        cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                       "datname = current_database() AND pid <> pg_backend_pid()")
    watcher.join(timeout=60)
    assert not watcher.is_alive()
    seen = refreshes()
    assert len(seen) == 15 and not ended, ended
    assert seen[-1]["database_unavailable"] is None
    assert {q["queue"]: q["waiting"] for q in seen[-1]["queues"]}["default"] == 1
