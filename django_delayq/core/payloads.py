"""Job payloads come from the audit row, never from Redis (``docs/internals.md``).

The row is written, in the caller's transaction, before the id reaches Redis, and it
holds everything a job needs (callable, arguments, attempts, backoff). Redis holds ids
and due times; whoever can write to Redis can therefore make the worker look at an id,
but never choose what runs. ``read`` sorts a claimed batch by what the rows say:

* **run**: a live row (scheduled, retrying, running) with a usable payload;
* **broken**: a live row whose payload is unusable (args not a list, nesting deeper than
  ``validation.MAX_DEPTH``, a bad backoff, ...): the job ends ``dead``, the reason on the
  row, alone;
* **cancelled**: a live row whose cancel was asked while the job was claimed (a job a
  shutdown or a limit handed back to Redis keeps its cancel mark): it ends ``cancelled``
  without running;
* **aside**: no row, or a final one (succeeded, dead, cancelled): the job does not run
  and its row is not touched; ``set_aside`` takes it out of Redis (a job without a row
  goes to the dead set, where an operator can see it; one whose row is final is
  forgotten: the row already says how it ended).

An envelope a job may have in Redis (the bare engine's ``NewJob(envelope=...)``) is
ignored. Each row is parsed on its own, from the database's JSON text, with its
nesting measured before decoding: no row can fail the batch. Rows are read from the
database rows are written to (``db_for_write``): a replica that lags behind could miss
a row committed a millisecond ago. A database error fails the whole read (the caller
hands the batch back).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.db import connections, router
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_delayq.core import option_checks, validation
from django_delayq.engine.envelope import Envelope
from django_delayq.engine.logtext import text  # never raises; lone surrogates escaped
from django_delayq.engine.replies import chunks
from django_delayq.models import JOB_COLUMNS, LIVE_STATUSES, TICK_KEY_PREFIX, Job, JobStatus

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import ClaimedJob

_FIELDS = ("id", "status", "callable_path", "args", "kwargs", "max_attempts", "backoff",
           "queue", "priority", "timeout", "expires_at", "retry_on", "cancel_requested",
           "atomic", "attempts", "key")
OTHER_QUEUE = "other_queue"
NO_ROW = "no_row"
FINAL_ROW = "final_row"
# The row's JSON text may nest one level more than the value it holds (the args list).
_ROW_DEPTH = validation.MAX_DEPTH + 1
ASKED_CHUNK = 500  # ids per query of ``cancels_asked`` (SQLite's bound variables)


@dataclasses.dataclass(frozen=True, slots=True)
class Broken:
    job: ClaimedJob
    path: str
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Aside:
    job: ClaimedJob
    kind: str  # NO_ROW | FINAL_ROW | OTHER_QUEUE
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Loaded:
    run: list[ClaimedJob]  # payload set from a live row
    broken: list[Broken]
    aside: list[Aside]
    # live rows whose cancel was asked after the claim (a claimed job handed back to Redis
    # by a shutdown or a limit keeps its cancel mark): they end cancelled without running
    cancelled: list[ClaimedJob] = dataclasses.field(default_factory=list)


def read(jobs: Sequence[ClaimedJob], claimed: bool = False) -> Loaded:
    """Sort ``jobs`` by their rows (one query); see the module docstring. ``claimed``:
    the jobs were just claimed (none started yet): each one's attempt is at least its
    row's attempts + 1 (``_counted``)."""
    out = Loaded([], [], [], [])
    rows = {row[0]: row for row in _select([job.id for job in jobs])} if jobs else {}
    aside = out.aside
    for job in jobs:
        row = rows.get(job.id)
        if row is None:
            aside.append(Aside(job, NO_ROW, "no audit row with this id (never scheduled "
                                            "through django-delayq, or the row was deleted)"))
        elif (status := row[1]) == JobStatus.WAITING:  # its parents' end sends it
            aside.append(Aside(job, FINAL_ROW, "its audit row is waiting for its parents: it "
                                               "runs once they end, not from this delivery"))
        elif status not in LIVE_STATUSES:
            aside.append(Aside(job, FINAL_ROW, "its audit row is %s, not live: it does not run "
                                               "again" % text(status, 500)))
        elif row[7] != job.queue:  # an id copied into another queue's keys in Redis
            aside.append(Aside(job, OTHER_QUEUE, "its audit row belongs to queue %s, not %s: "
                               "it runs only where it was scheduled"
                               % (text(row[7], 500), text(job.queue, 500))))
        else:
            _sort_live(_counted(job, row[14]) if claimed else job, row, out)
    return out


def _counted(job: ClaimedJob, attempts: object) -> ClaimedJob:
    """``job`` as the attempt after the ``attempts`` its row counted. Redis's number is
    lower only when an earlier delivery under it started (its row said so) but its start
    mark never reached Redis (Redis stopped or paused before reading it, then that worker
    died): that run counts, and this one's start mark tells Redis the new number."""
    if isinstance(attempts, int) and attempts >= job.attempt:
        return dataclasses.replace(job, attempt=attempts + 1)
    return job


def _sort_live(job: ClaimedJob, row: tuple[Any, ...], out: Loaded) -> None:
    """Put ``job`` of live ``row`` in ``out``: cancelled, run (its payload), or broken."""
    if row[12]:  # cancel_requested
        out.cancelled.append(job)
    else:
        try:
            out.run.append(dataclasses.replace(job, payload=_payload(row)))
        except Exception as exc:  # noqa: BLE001 - one row never fails the batch
            path = row[2] if isinstance(row[2], str) else ""
            out.broken.append(Broken(job, path, "invalid row: %s" % text(exc, 500)))


def load(jobs: Sequence[ClaimedJob]) -> list[ClaimedJob]:
    """The jobs of ``jobs`` that may run, with their payload (for inspection and tests;
    a worker uses ``read`` and handles the others)."""
    return read(jobs).run


def _select(ids: list[str]) -> list[tuple[Any, ...]]:
    """The rows' columns as the database stores them: JSON as text, decoded per row."""
    conn = connections[router.db_for_write(Job)]  # never a lagging replica
    qn = conn.ops.quote_name
    columns = ", ".join(qn(JOB_COLUMNS[f]) for f in _FIELDS)
    sql = "SELECT %s FROM %s WHERE %s IN (%s)" % (
        columns, qn(Job._meta.db_table), qn("id"), ", ".join(["%s"] * len(ids)))
    with conn.cursor() as cursor:
        cursor.execute(sql, ids)
        return list(cursor.fetchall())


def _payload(row: tuple[Any, ...]) -> Envelope:
    (_, _, path, args, kwargs, max_attempts, backoff, _, priority, timeout, expires, retry_on,
     _, atomic, _, key) = row
    if not isinstance(path, str) or not path:
        raise ValueError("callable path %s is not a string" % validation.short(path, 80))
    args, kwargs = _json(args, "args"), _json(kwargs, "kwargs")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError("args/kwargs have the wrong types (args is %s, kwargs is %s; "
                         "expected a list and a dict)" % (type(args).__name__,
                                                          type(kwargs).__name__))
    # schedule()'s checks: their InvalidJob is a ValueError naming the value
    option_checks.check_max_attempts(max_attempts)
    backoff = _json(backoff, "backoff")
    option_checks.check_backoff(backoff)
    # the run-time options, checked as ``schedule()`` checks them
    priority = option_checks.check_priority(0 if priority is None else priority)
    retry_on = _json(retry_on, "retry_on")
    if retry_on is not None and (not isinstance(retry_on, list)
                                 or option_checks.retry_on_problem(retry_on)):
        raise ValueError("retry_on %s is not a list of exception class paths"
                         % validation.short(retry_on, 80))
    timeout = option_checks.timeout_seconds(timeout)
    return Envelope(path=path, args=args, kwargs=kwargs, max_attempts=max_attempts,
                    backoff=backoff, priority=priority, timeout=timeout,
                    expires_ms=_epoch_ms(expires), retry_on=None if retry_on is None
                    else tuple(retry_on), atomic=bool(atomic),
                    tick=isinstance(key, str) and key.startswith(TICK_KEY_PREFIX))


def _epoch_ms(moment: object) -> int | None:
    """A datetime column read by the raw cursor: aware (PostgreSQL), naive (SQLite: UTC with
    ``USE_TZ``, else the current time zone) or text."""
    if moment is None:
        return None
    if isinstance(moment, str):
        moment = parse_datetime(moment) or moment  # text that does not parse stays text
    if not isinstance(moment, datetime):
        raise ValueError("expires_at %s is not a date and time" % validation.short(moment, 80))
    if moment.tzinfo is None:
        zone = UTC if django_settings.USE_TZ else timezone.get_current_timezone()
        moment = moment.replace(tzinfo=zone)
    return int(moment.timestamp() * 1000)


def _json(value: object, name: str) -> Any:
    """A JSON column's value: text (SQLite; PostgreSQL with Django's loaders) is decoded
    here, after a non-recursive depth check, so no value raises ``RecursionError``."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = bytes(value).decode("utf-8", "replace")
    if not isinstance(value, str):
        return value
    if validation.too_deep(value, _ROW_DEPTH):
        raise ValueError("%s is nested more than %d levels deep" % (name, validation.MAX_DEPTH))
    return json.loads(value)


def cancels_asked(ids: Sequence[str]) -> set[str]:
    """The ids among ``ids`` whose row has ``cancel_requested`` (one query per
    ``ASKED_CHUNK`` ids; none for no ids), read where rows are written, as ``read``. A
    worker asks this of the jobs it holds for a thread (``worker/held_cancels.py``)."""
    using = router.db_for_write(Job)  # never a lagging replica
    return {pk for part in chunks(ids, ASKED_CHUNK) for pk in Job.objects.using(using).filter(
        pk__in=list(part), cancel_requested=True).values_list("pk", flat=True)}


def lease_rows(ids: Iterable[str]) -> dict[str, tuple[int, int, datetime | None, str, str]]:
    """For lease recovery, each job id that has a row: its ``max_attempts``, and the
    attempt its row last saw start (``attempts``), when (``started_at``) and on which
    worker (``worker_id``): the start a lost attempt's worker wrote; and its ``status``."""
    using = router.db_for_write(Job)  # never a lagging replica; no ids: no query
    return {row[0]: row[1:] for row in Job.objects.using(using).filter(pk__in=list(ids))
            .values_list("id", "max_attempts", "attempts", "started_at", "worker_id",
                         "status")}


def of(job: ClaimedJob) -> Envelope:
    """The job's payload, loaded from its row; ``ValueError`` when it has none (an
    envelope from Redis is never used)."""
    if job.payload is None:
        raise ValueError("no payload loaded from the job's audit row")
    return job.payload
