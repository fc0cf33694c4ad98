"""Job functions of the reliability tests and the chaos run (allow-listed there only).

``record`` writes one row per execution into the ``chaos_exec`` table (created by the
test or by ``bench/chaos.py``): the database, not a file, is the record of what ran.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from django.db import connection

from django_delayq import current_job

TABLE = "chaos_exec"
CREATE_SQL = ("CREATE TABLE IF NOT EXISTS chaos_exec (job_id VARCHAR(26) NOT NULL, "
              "attempt INTEGER NOT NULL, pid INTEGER NOT NULL, ts DOUBLE PRECISION NOT NULL, "
              "tag VARCHAR(100) NOT NULL)")

_release = threading.Event()


def create_table() -> None:
    with connection.cursor() as cursor:
        cursor.execute(CREATE_SQL)


def executions(job_id: str | None = None) -> list[tuple[str, int, int, float, str]]:
    sql = "SELECT job_id, attempt, pid, ts, tag FROM chaos_exec"
    params: list[Any] = []
    if job_id is not None:
        sql, params = sql + " WHERE job_id = %s", [job_id]
    with connection.cursor() as cursor:
        cursor.execute(sql + " ORDER BY ts", params)
        return [tuple(r) for r in cursor.fetchall()]  # type: ignore[misc]


def record(tag: str = "") -> str:
    """One row per execution: (job id, attempt, pid, time)."""
    ctx = current_job()
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO chaos_exec (job_id, attempt, pid, ts, tag) "
                       "VALUES (%s, %s, %s, %s, %s)",
                       [ctx.id if ctx else "-", ctx.attempt if ctx else 0, os.getpid(),
                        time.time(), tag])
    return tag


def sleep_record(seconds: float, tag: str = "") -> str:
    """Record, then take ``seconds`` (a long job: its worker must heartbeat it)."""
    record(tag)
    time.sleep(seconds)
    return tag


def hang(seconds: float) -> None:
    """Hang (no heartbeat of its own) until ``release_hung()`` or ``seconds`` pass."""
    record("hang")
    _release.wait(seconds)


def hang_then_raise(seconds: float) -> None:
    """``hang``, then raise: a failure at the moment the test releases it."""
    hang(seconds)
    raise ValueError("released")


def release_hung() -> None:
    _release.set()


def reset_hung() -> None:
    _release.clear()


def always_raises(message: str = "always") -> None:
    record("raise")
    raise ValueError(message)


def size_of(*args: Any) -> int:
    record("big")
    return sum(len(a) for a in args)


def raise_text(escaped: str) -> None:
    """Record, then raise ``ValueError`` with ``escaped``'s backslash escapes decoded: text
    ``schedule()`` would refuse as an argument (``"\\ud800"``: a lone surrogate, ``"\\x00"``)."""
    record("raise_text")
    raise ValueError(escaped.encode("ascii").decode("unicode_escape"))


def retry_with(delay: Any) -> None:
    """Record, then ask for a retry after ``delay`` (whatever a job may pass)."""
    from django_delayq.exceptions import Retry

    record("retry_with")
    raise Retry(delay=delay)


def runs_key(prefix: str) -> str:
    return "{%s}:chaos:runs" % prefix


def record_in_redis(tag: str = "") -> str:
    """A cheap ``record``: one HINCRBY of ``job id:attempt`` in Redis, so that a worker
    drains as fast as it can (``runs`` reads the counts back)."""
    from django_delayq.core.conf import get_settings
    from django_delayq.core.connection import get_engine

    ctx = current_job()
    get_engine().client.hincrby(runs_key(get_settings().prefix),
                                "%s:%d" % (ctx.id, ctx.attempt) if ctx else "-", 1)
    return tag


def runs(prefix: str) -> dict[str, list[int]]:
    """Attempts (lease tokens) that ran, per job id, as recorded by ``record_in_redis``."""
    from django_delayq.core.connection import get_engine

    out: dict[str, list[int]] = {}
    for key, count in get_engine().client.hgetall(runs_key(prefix)).items():
        job_id, _, attempt = (key.decode() if isinstance(key, bytes) else key).rpartition(":")
        out.setdefault(job_id, []).extend([int(attempt)] * int(count))
    return out


def mark_run(directory: str, seconds: float = 0.0) -> None:
    """Take ``seconds``, then append this completed run (job id, attempt, pid) to the file
    ``runs`` of ``directory``: a record needing neither the database nor Redis, so a stall
    of either cannot touch it (``marked_runs`` reads it back)."""
    time.sleep(seconds)
    ctx = current_job()
    with open(os.path.join(directory, "runs"), "a") as out:
        out.write("%s %d %d\n" % (ctx.id if ctx else "-", ctx.attempt if ctx else 0,
                                  os.getpid()))


def slow_first(directory: str, seconds: float) -> None:
    """Its first attempt notes its start (the file ``started``), then takes ``seconds``;
    every attempt ends as ``mark_run``."""
    ctx = current_job()
    if ctx is not None and ctx.attempt == 1:
        with open(os.path.join(directory, "started"), "a") as out:
            out.write("%s\n" % ctx.id)
        time.sleep(seconds)
    mark_run(directory)


def gated(directory: str, fail_first: int = 0) -> str:
    """Note its start (the file ``started``: job id and attempt), wait for the file ``go``
    of ``directory`` (at most 120 s), end as ``mark_run``; then raise in its first
    ``fail_first`` attempts. A run the test lets end at a moment of its choosing (Redis
    cut, say)."""
    ctx = current_job()
    attempt = ctx.attempt if ctx else 0
    with open(os.path.join(directory, "started"), "a") as out:
        out.write("%s %d\n" % (ctx.id if ctx else "-", attempt))
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(directory, "go")) and time.monotonic() < deadline:
        time.sleep(0.01)
    mark_run(directory)
    if attempt <= fail_first:
        raise RuntimeError("gated run %d fails" % attempt)
    return "done %d" % attempt


def marked_runs(directory: str) -> dict[str, list[int]]:
    """Attempts that completed, per job id, as ``mark_run`` wrote them."""
    out: dict[str, list[int]] = {}
    path = os.path.join(directory, "runs")
    if not os.path.exists(path):
        return out
    with open(path) as lines:
        for line in lines:
            parts = line.split()
            if len(parts) == 3:
                out.setdefault(parts[0], []).append(int(parts[1]))
    return out


STAMPS = "stamps"


def _stamp(directory: str, line: str) -> None:
    fd = os.open(os.path.join(directory, STAMPS), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one short write with O_APPEND: never interleaved
    finally:
        os.close(fd)


def _who() -> str:
    ctx = current_job()
    return "%s %d %d %s" % (ctx.id if ctx else "-", ctx.attempt if ctx else 0, os.getpid(),
                            "".join((ctx.worker_id if ctx else "-").split()) or "-")


def stamp(directory: str, seconds: float = 0.0) -> None:
    """Append ``S <job> <attempt> <pid> <worker> <time>`` to the file ``stamps`` of
    ``directory``, take ``seconds`` (at most 120), append the same line with ``E`` when
    done: a record of every run's start and completion needing neither the database nor
    Redis (``stamped_runs`` reads it back)."""
    who = _who()
    _stamp(directory, "S %s %.6f\n" % (who, time.time()))
    time.sleep(min(max(0.0, seconds), 120.0))
    _stamp(directory, "E %s %.6f\n" % (who, time.time()))


def stamp_tick(directory: str) -> None:
    """A periodic tick: ``T <job> <attempt> <pid> <worker> <time> <due time>``."""
    ctx = current_job()
    due = ctx.due_at.timestamp() if ctx else 0.0
    _stamp(directory, "T %s %.6f %.6f\n" % (_who(), time.time(), due))


def stamped_runs(directory: str) -> list[dict[str, Any]]:
    """Every run ``stamp`` and ``stamp_tick`` recorded, in start order: job, attempt, pid,
    worker, start, end (``None``: it never completed), due (ticks only)."""
    path = os.path.join(directory, STAMPS)
    if not os.path.exists(path):
        return []
    runs: list[dict[str, Any]] = []
    open_: dict[tuple[str, int, int], dict[str, Any]] = {}
    with open(path) as lines:
        for line in lines:
            f = line.split()
            if len(f) < 6 or f[0] not in ("S", "E", "T"):
                continue  # a line cut short by a kill mid-write
            key = (f[1], int(f[2]), int(f[3]))
            if f[0] == "E":
                if key in open_:
                    open_.pop(key)["end"] = float(f[5])
                continue
            run = {"job": f[1], "attempt": key[1], "pid": key[2], "worker": f[4],
                   "start": float(f[5]), "end": None, "due": None}
            if f[0] == "T" and len(f) >= 7:
                run["end"], run["due"] = run["start"], float(f[6])
            else:
                open_[key] = run
            runs.append(run)
    runs.sort(key=lambda r: r["start"])
    return runs
