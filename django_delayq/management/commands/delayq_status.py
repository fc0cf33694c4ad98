"""``manage.py delayq_status``: queue counts, due times, paused queues, limits, workers
with their processes and running jobs; ``--watch``, ``--json``, ``--follow`` (tail the
event stream of every worker).

Reads only, through the engine: the queues' counts, paused state and limits and the
workers registry (heartbeat and JSON info of each, with the jobs each runs) as
``observe.redis_state`` reads them, ``Engine.oldest_pending`` (the head of the queue's
pending ZSET: the oldest overdue job), ``Engine.limit_state`` for each callable of
``DELAYQ['CALLABLE_LIMITS']`` and the event streams (``Engine.event_tail``, then
``Engine.read_events`` with a cursor per stream).

Whatever it prints came from Redis, where any process with access can write anything:
an entry that is not what a worker writes (invalid JSON, a list, a number where a list
is expected, bytes that are not UTF-8) is shown as malformed, never a crash; and every
text from Redis is printed with its control characters escaped (ESC becomes the four
characters ``\\x1b``), so a job's error text cannot move the cursor, recolour or retitle
the terminal of whoever runs ``--follow``. ``--json`` output is escaped by JSON itself.

What it counts in the database (rows waiting for their parents, the pauses the rows hold,
the groups, the schedules) is unknown while the database cannot be read: said so (JSON:
``database_unavailable`` and those fields null), never shown as none, and the command
exits ``EXIT_DATABASE`` once it has shown what Redis holds. ``--follow`` reads no database.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, close_old_connections
from django.db.models import Count
from redis.exceptions import RedisError

from django_delayq.core import periodic, progress
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine import logtext
from django_delayq.engine.replies import envelope_text as _s  # bytes: U+FFFD for non-UTF-8
from django_delayq.engine.shard_health import ERRORS
from django_delayq.management.command_options import parse_queues
from django_delayq.models import Job, JobStatus
from django_delayq.observe import redis_state
from django_delayq.observe.redis_state import describe_limit

if TYPE_CHECKING:
    from django_delayq.engine import Engine

CLEAR = "\x1b[H\x1b[2J"
QUEUE_KEYS = ("scheduled", "ready", "inflight", "dead", "expired_leases", "next_due",
              "next_due_in_s", "oldest_overdue_id", "oldest_overdue_s", "limit",
              "paused_shards", "shards", "pause")
FIELD_CHARS = 200  # of one worker info field in the text output
INTERVAL = 2.0  # seconds between --watch refreshes, by default
UNITS = (("s", 1, 120), ("m", 60, 7200))  # unit, its seconds, used below; else hours
EXIT_DATABASE = 3  # the database could not be read: Redis's figures shown, its own unknown
DB_UNKNOWN = "unknown (database unavailable)"


def printable(value: object) -> str:
    """``value`` as text safe for a terminal: every non-printable character (escape,
    carriage return, newline, bidirectional overrides, ...) becomes its Python escape."""
    return logtext.shown(_s(value), sys.maxsize)


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def queue_data(engine: Engine, q: redis_state.QueueRow, waiting: int | None = 0
               ) -> dict[str, Any]:
    """A queue as shown: its row, its oldest overdue job (``Engine.oldest_pending``) and
    its rows ``waiting`` for their parents (after=...: not in Redis yet; None: unknown)."""
    if q.unavailable:  # its node is down (a Redis Cluster): no figure
        return {**dict.fromkeys(QUEUE_KEYS), "queue": q.queue, "paused": None,
                "pause_kept": q.pause_kept, "waiting": waiting, "unavailable": q.unavailable}
    head = engine.oldest_pending(q.queue) if q.ready else None  # (job id, due ms)
    limit = q.limit  # {"rate": [starts, per_ms] | None, "concurrency"}
    return {"queue": q.queue, "scheduled": q.scheduled, "ready": q.ready,
            "inflight": q.inflight, "dead": q.dead, "expired_leases": q.expired_leases,
            "next_due": _iso(q.next_due_ms), "next_due_in_s": None if q.next_due_ms is None
            else (q.next_due_ms - q.now_ms) / 1000,
            "oldest_overdue_id": head[0] if head else None,
            "oldest_overdue_s": max(0.0, (q.now_ms - head[1]) / 1000) if head else None,
            "paused": q.paused, "paused_shards": q.paused_shards, "shards": q.shards,
            "pause": q.pause_text, "pause_kept": q.pause_kept, "limit": None if limit is None else {
                "rate": None if limit.rate is None else list(limit.rate),
                "concurrency": limit.concurrency}, "waiting": waiting, "unavailable": None}


def worker_data(w: redis_state.WorkerRow) -> dict[str, Any]:
    """A worker as shown; ``info_error`` says why its info entry was ignored."""
    return {"id": w.id, "heartbeat_age_s": w.heartbeat_age_s, "stale": w.stale, "info": w.info,
            "info_error": w.error, "processes": w.processes,
            "jobs": [asdict(job) for job in w.jobs]}


def waiting_counts(queues: list[str]) -> dict[str, int]:
    """Rows ``waiting`` for their parents, per queue (from the database: Redis does not
    hold them); ``DatabaseError`` when the database cannot be read."""
    return dict(Job.objects.filter(status=JobStatus.WAITING, queue__in=queues).values(
        "queue").annotate(n=Count("id")).values_list("queue", "n"))


def from_database(engine: Engine, queues: list[str], states: list[redis_state.QueueRow]
                  ) -> dict[str, Any]:
    """What the status counts in the database: ``waiting`` (per queue), ``groups`` and
    ``schedules``, each None and ``database_unavailable`` the error when it cannot be read
    (also when the queues' pauses could not be: a ``pause_kept`` None); the error on one
    line (PostgreSQL's has a second, a hint)."""
    try:
        return {"waiting": waiting_counts(queues), "schedules": periodic.status_rows(),
                "groups": [asdict(u) for u in redis_state.busiest(  # docs/groups.md
                    engine, [q.queue for q in states if not q.unavailable], strict=True)],
                "database_unavailable": None if all(q.pause_kept is not None for q in states)
                else "the paused queues could not be read"}
    except DatabaseError as exc:
        return {"waiting": None, "schedules": None, "groups": None,
                "database_unavailable": " ".join(str(exc).split()) or type(exc).__name__}


def collect(engine: Engine, settings: Settings, queues: list[str]) -> dict[str, Any]:
    """The status as ``--json`` prints it; the text output renders the same."""
    states = redis_state.queues(engine, queues, partial=True)
    db = from_database(engine, queues, states)
    waiting = db["waiting"]
    try:
        workers, registry = redis_state.with_progress(redis_state.workers(engine)), None
    except ERRORS as exc:  # the registry's cluster node is down: the rest is shown
        workers, registry = [], redis_state.unreadable(engine, exc)
    return {"now": _iso(engine.time_ms()) or "", "prefix": settings.prefix,
            "database_unavailable": db["database_unavailable"],
            "queues": [queue_data(engine, q, None if waiting is None else
                                  waiting.get(q.queue, 0)) for q in states],
            "workers": [worker_data(w) for w in workers], "workers_unavailable": registry,
            "paused": [q.queue for q in states if q.paused],  # on every shard that answers
            # paused on some shards only, or by the database only (Redis lost it)
            "partly_paused": [q.queue for q in states if not q.paused and (
                q.paused_shards or q.pause_kept)],
            # each callable of DELAYQ['CALLABLE_LIMITS'] (its rate a [starts, per_ms] list)
            "callable_limits": [asdict(c) for c in redis_state.callable_limits(
                engine, settings, partial=True)],
            "groups": db["groups"], "schedules": db["schedules"],  # None: unknown
            # in flight = running + prefetched + settling
            "holding": asdict(redis_state.held(states, workers))}


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    unit, per = next(((u, p) for u, p, below in UNITS if seconds < below), ("h", 3600))
    return "%.1f%s" % (seconds / per, unit)


def render_text(status: dict[str, Any]) -> str:
    lines = ["delayq status at %s (prefix %r)" % (status["now"], status["prefix"])]
    if status["database_unavailable"]:  # its figures unknown, not 0
        lines.append("! database unavailable: %s (rows waiting for their parents, pauses "
                     "kept in the database, groups and schedules unknown)"
                     % printable(status["database_unavailable"]))
    lines += ["",
             "%-16s %10s %8s %9s %8s  %-29s %s" % ("QUEUE", "SCHEDULED", "DUE NOW", "IN FLIGHT",
                                                   "DEAD", "NEXT DUE", "OLDEST OVERDUE")]
    for q in status["queues"]:
        if q["unavailable"]:
            lines.append("%-16s unavailable: %s" % (q["queue"], printable(q["unavailable"])))
            continue
        nxt = "-" if q["next_due"] is None else "%s (in %s)" % (q["next_due"][11:23],
                                                                _fmt_s(q["next_due_in_s"]))
        old = "-" if q["oldest_overdue_id"] is None else "%s late %s" % (
            printable(q["oldest_overdue_id"]), _fmt_s(q["oldest_overdue_s"]))
        lines.append("%-16s %10d %8d %9d %8d  %-29s %s" % (
            q["queue"], q["scheduled"], q["ready"], q["inflight"], q["dead"], nxt, old))
        if q["expired_leases"]:
            lines.append("  ! %d expired lease(s) waiting for recovery" % q["expired_leases"])
        if q["waiting"]:
            lines.append("  waiting for their parents (not in Redis yet): %d" % q["waiting"])
        if (limit := q["limit"]) is not None:
            lines.append("  limit: %s" % describe_limit(limit["rate"], limit["concurrency"],
                                                        "none"))
    lines += ["IN FLIGHT %(in_flight)d = %(running)d running + %(prefetched)d prefetched + "
              "%(settling)d settling" % status["holding"],
              "", "PAUSED: %s" % (", ".join(status["paused"] + [
                  "%s (%s)" % (q["queue"], q["pause"]) for q in status["queues"]
                  if q["queue"] in status["partly_paused"] and not q["unavailable"]]) or "none")]
    if unknown := [q["queue"] for q in status["queues"] if q["unavailable"]]:
        lines[-1] += " (unknown: %s)" % ", ".join(unknown)  # their node is down
    if status["callable_limits"]:
        lines += ["", "CALLABLE LIMITS"] + [
            "  %-40s %-24s %s" % (
                c["callable"], describe_limit(c["rate"], c["concurrency"], "none"),
                "unavailable: %s" % printable(c["unavailable"]) if c["unavailable"] else
                "running %d, started in window %d" % (c["running"], c["started_in_window"]))
            for c in status["callable_limits"]]
    lines += _group_lines(status["groups"])
    lines += (["", "SCHEDULES " + DB_UNKNOWN] if status["schedules"] is None
              else periodic.status_lines(status["schedules"]))
    lines += ["", "WORKERS (%d)" % len(status["workers"])]
    if status["workers_unavailable"]:
        lines.append("  registry unavailable: %s" % printable(status["workers_unavailable"]))
    elif not status["workers"]:
        lines.append("  none registered")
    for w in status["workers"]:
        lines += _worker_lines(w)
    return "\n".join(lines) + "\n"


def _worker_lines(w: dict[str, Any]) -> list[str]:
    info = w["info"]
    detail = ("info malformed (%s)" % w["info_error"] if w["info_error"] else
              "queues=%s running=%s prefetched=%s processed=%s processes=%s" % (
                  _info_field(info, "queues"), _info_field(info, redis_state.RUNNING_FIELD),
                  _info_field(info, redis_state.PREFETCHED_FIELD), _info_field(info, "processed"),
                  "-" if w["processes"] is None else w["processes"]))
    lines = ["  %-40s heartbeat %s ago%s  %s" % (
        printable(w["id"][:FIELD_CHARS]), _fmt_s(w["heartbeat_age_s"]),
        " (STALE)" if w["stale"] else "", detail)]
    lines += ["    running %s %s (%s) for %s%s" % (
        printable(job["id"][:FIELD_CHARS]), printable(job["callable"][:FIELD_CHARS]),
        printable(job["queue"][:FIELD_CHARS]),
        _fmt_s(job["age_s"]), "" if job["progress"] is None else
        ", progress %s" % printable(progress.compact(job["progress"], 60)))
        for job in w["jobs"]]
    return lines


def _group_lines(groups: list[dict[str, Any]] | None) -> list[str]:
    """The busiest groups (none without groups); a group id is escaped (from the rows)."""
    if groups is None:
        return ["", "GROUPS " + DB_UNKNOWN]
    if not groups:
        return []
    return ["", "GROUPS (most due jobs)"] + [
        "  %-16s %-32s due %d, running %d%s%s%s" % (
            u["queue"], printable(u["group"]), u["due"], u["running"],
            ", limit %s" % u["limit"] if u["limit"] else "", ", paused" if u["paused"] else "",
            ", held by its limit" if u["held"] else "")
        for u in groups]


def _info_field(info: dict[str, Any], key: str) -> str:
    """One field of a worker's info for the text output, whatever its JSON type."""
    value = info.get(key)
    if value is None or value == []:
        return "-"
    text = ",".join(map(_s, value)) if isinstance(value, list) else _s(value)
    return logtext.shown(text, FIELD_CHARS)


def _event_time(entry_id: str, ts: str | None) -> str:
    """The time of an event: its ``ts_ms`` field, else the stream entry id's milliseconds."""
    for candidate in (ts, entry_id.split("-", 1)[0]):
        if candidate and candidate.isdigit():
            try:
                return _iso(int(candidate)) or ""
            except (OverflowError, OSError, ValueError):  # a year past 9999
                continue
    return ""


def format_event(entry_id: str, fields: dict[str, str]) -> str:
    """One line for ``--follow``; every value is escaped (see the module docstring)."""
    when = _event_time(entry_id, fields.get("ts_ms"))
    extra = ["%s=%s" % (key, printable(fields[key]))
             for key in ("attempt", "attempts", "worker", "run_at", "retry_at", "expires_at",
                         "lateness_ms", "duration_ms", "running", "error_type", "error")
             if key in fields]
    return "%s %-9s %-12s %-26s %s %s" % (
        when[11:23], printable(fields.get("event", "?")), printable(fields.get("queue", "")),
        printable(fields.get("job", "")), printable(fields.get("callable", "")),
        " ".join(extra))


def check_options(options: dict[str, Any]) -> None:
    """Each option with a value it can take, where it means something: a ``CommandError``
    naming it otherwise (nothing shown), never an option silently ignored."""
    count, interval, last = options["count"], options["interval"], options["last"]
    if count is not None and count < 1:
        raise CommandError("--count must be >= 1, not %d" % count)
    if interval is not None and not (interval > 0 and math.isfinite(interval)):
        raise CommandError("--interval must be > 0, not %r" % interval)
    if last is not None and last < 0:
        raise CommandError("--last must be >= 0, not %d" % last)
    mode = "--follow" if options["follow"] else "--watch" if options["watch"] else None
    for name, value, modes in (("--count", count, ("--watch", "--follow")),
                               ("--interval", interval, ("--watch",)),
                               ("--last", last, ("--follow",))):
        if value is not None and mode not in modes:
            raise CommandError("%s %s goes with %s%s" % (
                name, value, " or ".join(modes), "" if mode is None else ", not " + mode))


class Command(BaseCommand):
    help = ("Show per queue the scheduled, due-now, in-flight and dead counts, the next due "
            "time, the oldest overdue job and the live workers; or tail the event stream.")
    # A diagnosis runs when something is down: Django 6's model checks open a database
    # connection (a traceback with the database down); a bad DELAYQ is get_settings()'s.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", "-q", default=None,
                            help="Comma-separated queues (default: all of DELAYQ['QUEUES']).")
        parser.add_argument("--json", action="store_true", help="Print one JSON document.")
        parser.add_argument("--watch", "-w", action="store_true",
                            help="Refresh in place until interrupted.")
        parser.add_argument("--interval", type=float, default=None,
                            help="Seconds between --watch refreshes (default 2).")
        parser.add_argument("--follow", "-f", action="store_true",
                            help="Tail the event stream of every worker.")
        parser.add_argument("--last", type=int, default=None,
                            help="With --follow: first print this many past events.")
        parser.add_argument("--count", type=int, default=None,
                            help="Stop after this many refreshes (--watch) or events (--follow).")

    def handle(self, *args: object, **options: Any) -> None:
        try:
            settings = get_settings()
        except ImproperlyConfigured as exc:
            raise CommandError("DELAYQ is not valid: %s" % exc) from exc
        check_options(options)
        queues = list(parse_queues(options["queues"], settings))
        engine = get_engine()
        database = None  # the database's error, as the (last) status shown said it
        try:
            if options["follow"]:  # Redis's streams only: no database read
                self.follow(engine, options["last"] or 0, options["count"],
                            json_lines=options["json"])
            elif options["watch"]:
                database = self.watch(engine, settings, queues, options["interval"] or INTERVAL,
                                      options["count"], as_json=options["json"])
            else:
                text, database = self.render(engine, settings, queues, options["json"])
                self.stdout.write(text, ending="")
        except RedisError as exc:
            raise CommandError("Redis is unavailable: %s" % exc) from exc
        except KeyboardInterrupt:
            self.stdout.write("")
        if database is not None:  # shown on stdout too: its figures were unknown, not 0
            raise CommandError("The database is unavailable: %s" % printable(database),
                               returncode=EXIT_DATABASE)

    def render(self, engine: Engine, settings: Settings, queues: list[str], as_json: bool,
               indent: int | None = 2) -> tuple[str, str | None]:
        """The status as shown, and why the database could not be read (None if it was)."""
        status = collect(engine, settings, queues)
        return (json.dumps(status, indent=indent) + "\n" if as_json else render_text(status),
                status["database_unavailable"])

    def watch(self, engine: Engine, settings: Settings, queues: list[str], interval: float,
              count: int | None, *, as_json: bool) -> str | None:
        """Refreshes until ``count`` (or Ctrl-C); the database's error at the last one. Each
        refresh closes a connection the database dropped (or past ``CONN_MAX_AGE``), as
        a request does: the next reads connect again."""
        tty = not as_json and hasattr(self.stdout, "isatty") and self.stdout.isatty()
        database = None
        for shown in itertools.count() if count is None else range(count):
            if shown:
                time.sleep(interval)
                close_old_connections()
            text, database = self.render(engine, settings, queues, as_json,
                                         indent=None)  # JSON: a line each
            self.stdout.write((CLEAR if tty else ("" if as_json or not shown else "\n"))
                              + text, ending="")
            self.stdout.flush()
        return database

    def follow(self, engine: Engine, last: int, count: int | None,
               *, json_lines: bool) -> None:
        # a cursor per stream (their ids are in no one order), each at its last entry:
        # not "$", no gap between two XREADs
        past, cursors = engine.event_tail(last)
        shown = past[-last:] if last > 0 else []
        for entry_id, fields in shown:
            self._emit(entry_id, fields, json_lines)
        seen = len(shown)
        while count is None or seen < count:
            for stream, entry_id, fields in engine.read_events(cursors, block_ms=1000,
                                                               count=100):
                cursors[stream] = _s(entry_id)
                self._emit(entry_id, fields, json_lines)
                seen += 1
                if count is not None and seen >= count:
                    return

    def _emit(self, entry_id: object, raw: dict[Any, Any], json_lines: bool) -> None:
        entry, fields = _s(entry_id), {_s(k): _s(v) for k, v in raw.items()}
        self.stdout.write(json.dumps({"id": entry, **fields}) if json_lines
                          else format_event(entry, fields))
        self.stdout.flush()
