"""What Redis holds of the queues and the workers, read in one place and as one row type
each for every surface that shows it (the admin's queues page and live dashboard,
``manage.py delayq_status``, ``delayq_queue list``, the Prometheus gauges): each surface
renders these rows its own way (its field names, texts and JSON), reading nothing else
of Redis for them.

* ``queues(engine, names)``: a ``QueueRow`` per queue: its counts and next due time
  (``Engine.stats``, one atomic script each), whether it is paused (``Engine.pause_counts``,
  one round trip for all: on how many of its shards; and whether the database holds it
  paused, ``core/pauses.py``) and its limit (``Engine.queue_limit``: what the workers wrote).
  ``names`` defaults to the known queues (``QUEUES`` and ``QUEUE_OPTIONS``). With
  ``partial`` (``delayq_status``, the metrics), a queue whose Redis Cluster node is down
  gets a row with counts of 0 and ``unavailable`` (its error) instead of failing the
  read, while Redis answers at all (a sharded queue counts the shards that answer:
  engine/sharded.py); so does a callable's ``callable_limits`` row (its counts None).
  Only a node that does not answer is unavailable (``unreadable``): an error it answers
  (WRONGTYPE, NOPERM, a script's), or any error of one Redis (not a cluster), fails the
  read as before.
* ``workers(engine)``: a ``WorkerRow`` per worker of the registry (``Engine.workers``,
  oldest heartbeat first), with its heartbeat's age on the Redis clock, whether it is
  ``stale`` (its heartbeat older than ``LEASE_SECONDS``: killed, or its host is gone), its
  info entry and the jobs it runs (``RunningJob``: from the entry the worker wrote, any JSON value
  of a job's ``queue`` and ``callable`` as its text). An entry that is not a worker's
  JSON, or that is over the registry's read limit, has its ``error`` and an empty
  ``info``. ``with_progress`` gives each running job its row's progress.
* ``held(queues, workers)``: the queues' jobs in flight split into running, prefetched
  and settling, the same way wherever it is shown:

A queue's ``in flight`` count (its ``inflight`` set in Redis: every job under a lease) is
the sum of three figures, each with one name:

* **running**: a thread (or child process) runs it now;
* **prefetched**: claimed by a worker, no thread has started it yet;
* **settling**: finished, its acknowledgement not yet recorded in Redis.

Each worker publishes ``running`` and ``prefetched`` (its registry info's ``running``
and ``waiting`` fields) at every heartbeat; ``settling`` is what is left of ``in flight``
once both are taken away. A stale worker counts in neither: it runs nothing any more, and
its last report would count jobs that recovery took back (and another worker may have
finished); until recovery takes them back, its jobs are in the rest, ``settling``. The
workers' figures are as of their last heartbeat, the ``in flight`` count as of now: when
the two disagree (a worker's info is older than a claim or an acknowledgement),
``running`` is capped at ``in flight`` and ``prefetched`` at what is left, so the three
always add up to ``in flight``, none negative.

A worker's info entry is JSON any process with access to Redis could have written
(``parse_info``): each field is used only when it has the expected type.

And the limits, each written one way (``describe_limit``): the callable limits of
``DELAYQ['CALLABLE_LIMITS']`` with what each runs now (``callable_limits``), read
through the engine (``Engine.limit_state``: the grants of the window and the slots held,
on the Redis clock): one reading for the admin's queues page (``admin/queue_page.py``) and
``manage.py delayq_status``, each of which only formats it.

The limits of the groups of some queues (docs/groups.md, "Limits"): each queue's
defaults and the groups' own, read once and named one way (``group_limit_text``) for the
queues page and ``manage.py delayq_queue list``.

And the busiest groups of some queues (``busiest``), as ``delayq_status``, the dashboard
and the metrics show them (docs/groups.md): the groups with the most due jobs, how many
of their jobs run, their limits (their own, else their queue's) and whether they are
paused or held back by them (docs/groups.md, "Limits per group").

Due and running counts come from the rows (one ``GROUP BY`` over the partial index of
the rows that have a group, one for the running ones of those groups), so they lag Redis
by the audit writer's flush; limits from the ``GroupLimit`` rows and the settings; paused
and held groups from Redis (``Engine.paused_groups``, ``Engine.held_groups``).
A database that cannot be read shows no groups (``strict``: its error, for
``delayq_status`` to say they are unknown); nor does it hold a queue paused
(``QueueRow.pause_kept`` None: unknown).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError
from django.db.models import Count
from django.utils import timezone
from django.utils.translation import gettext

from django_delayq.core import group_limits, pauses, stored
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.limits import Rate, parse_rate, rate_text
from django_delayq.core.queues import known_queues
from django_delayq.engine.logtext import shown
from django_delayq.engine.shard_health import ERRORS, UNREACHABLE, ShardDown
from django_delayq.models import GroupLimit, Job, JobStatus

if TYPE_CHECKING:
    from django_delayq.engine import Engine
    from django_delayq.engine.outcomes import QueueLimit

logger = logging.getLogger(__name__)

#: A worker's registry info field for each figure.
RUNNING_FIELD = "running"
PREFETCHED_FIELD = "waiting"
JOBS_SHOWN = 50  # of one worker's info (a worker lists at most 50)
MAX_PROGRESS_IDS = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueRow:
    queue: str  # the rest as read; the defaults are an unavailable queue's
    scheduled: int = 0
    ready: int = 0  # due now
    inflight: int = 0
    dead: int = 0
    expired_leases: int = 0
    now_ms: int = 0  # the Redis clock when the counts were read
    next_due_ms: int | None = None
    oldest_ready_ms: int | None = None
    paused: bool = False  # on every shard that answered (``paused_shards == shards``)
    paused_shards: int = 0  # of ``shards``: those that answered holding it paused
    shards: int = 1  # its shards that answered (1 unless sharded)
    pause_kept: bool | None = False  # the database holds it paused (a ``QueuePause`` row);
    # None: unknown, the database could not be read
    limit: QueueLimit | None = None  # None when the queue has none
    unavailable: str | None = None  # why it could not be read (its node is down: counts 0)

    @property
    def pause_text(self) -> str:
        """``"paused"``, ``"active"`` or ``"partly paused: 2 of 3 shards"``, and
        ``"; paused in the database"`` when the row says paused but Redis does not (on
        every shard): Redis lost it, or a pause failed part-way; the reconciler pauses it
        again."""
        text = "paused" if self.paused else "active" if not self.paused_shards else (
            "partly paused: %d of %d shards" % (self.paused_shards, self.shards))
        return text + ("; paused in the database" if self.pause_kept and not self.paused
                       else "")

    @property
    def next_due(self) -> datetime | None:
        ms = self.next_due_ms
        return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)

    @property
    def limit_text(self) -> str:
        """``"100/m, 5 at once"``; "" when the queue has none."""
        limit = self.limit
        return "" if limit is None else describe_limit(limit.rate, limit.concurrency)


@dataclass(slots=True, kw_only=True)
class RunningJob:
    id: str
    queue: str
    callable: str
    age_s: float | None  # None when the worker gave no start time
    progress: Any = None  # its row's Job.progress (``with_progress``), None without one


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRow:
    id: str
    heartbeat_age_s: float
    stale: bool = False  # its heartbeat is older than LEASE_SECONDS: in no split (held)
    info: dict[str, Any]  # {} when the entry is absent or ``error`` says why it was not used
    error: str | None
    processes: int | None  # each figure None when the info has no such count
    running: int | None  # jobs a thread runs now (see above)
    prefetched: int | None  # claimed, no thread yet
    jobs: list[RunningJob]


@dataclass(frozen=True, slots=True, kw_only=True)
class Holding:
    in_flight: int
    running: int
    prefetched: int
    settling: int


def queues(engine: Engine, names: Sequence[str] | None = None, *,
           partial: bool = False) -> list[QueueRow]:
    names = known_queues() if names is None else names
    try:
        paused: dict[str, tuple[int, int]] | None = engine.pause_counts(names)
    except ERRORS as exc:
        unreadable(engine, exc, partial)
        engine.time_ms()  # does Redis answer at all? (else its error, at once)
        paused = None  # a node is down: each queue read on its own
    try:
        kept: set[str] | None = pauses.kept(names)
    except DatabaseError:
        kept = None  # the intent unknown (pause_kept None): Redis's state alone
    rows = []
    for queue in names:
        try:
            n, of = (paused if paused is not None else engine.pause_counts([queue]))[queue]
            rows.append(QueueRow(queue=queue, paused=0 < n == of, paused_shards=n, shards=of,
                                 pause_kept=None if kept is None else queue in kept,
                                 limit=engine.queue_limit(queue),
                                 **asdict(engine.stats(queue))))
        except ERRORS as exc:
            rows.append(QueueRow(queue=queue, unavailable=unreadable(engine, exc, partial)))
    return rows


def unreadable(engine: Engine, exc: BaseException, partial: bool = True) -> str:
    """Why a read of one Redis Cluster node's data failed while the others may answer:
    its node does not (``UNREACHABLE``; a shard set aside after failing gives that
    failure's error). ``exc`` is raised again without ``partial`` (the caller wants every
    node read), when it is another error (the node answered it), or when the client is
    one Redis' (then Redis is unavailable)."""
    if not partial or not engine.nodes_fail_alone or not isinstance(exc, UNREACHABLE):
        raise exc
    return exc.reason if isinstance(exc, ShardDown) else str(exc) or type(exc).__name__


def workers(engine: Engine) -> list[WorkerRow]:
    now_ms, stale_after_s = engine.time_ms(), get_settings().lease_seconds
    out = []
    for entry in engine.workers():
        info, error = parse_info(entry.info)  # absent or not read: {}
        if entry.info_bytes_unread:
            error = "%d bytes, over the registry's read limit: not read" % (
                entry.info_bytes_unread)
        age_s = round(max(0.0, (now_ms - entry.beat_ms) / 1000), 3)
        out.append(WorkerRow(
            id=entry.id, heartbeat_age_s=age_s, stale=age_s > stale_after_s, info=info,
            error=error, processes=integer(info.get("processes")),
            running=count(info, RUNNING_FIELD), prefetched=count(info, PREFETCHED_FIELD),
            jobs=_jobs(info.get("jobs"), now_ms)))
    return out


def with_progress(rows: list[WorkerRow]) -> list[WorkerRow]:
    """Each running job's progress from its row (one query); none when the database
    cannot be read."""
    jobs = [job for w in rows for job in w.jobs]
    try:
        found = progress_of(job.id for job in jobs)
    except DatabaseError as exc:
        logger.warning("cannot read the running jobs' progress: %s", shown(exc))
        found = {}
    for job in jobs:
        job.progress = found.get(job.id)
    return rows


def held(queue_rows: Sequence[QueueRow], worker_rows: Sequence[WorkerRow]) -> Holding:
    """The queues' jobs in flight, split into running, prefetched and settling by the
    workers that are not stale."""
    return split(sum(q.inflight for q in queue_rows),
                 ((w.running, w.prefetched) for w in worker_rows if not w.stale))


def integer(value: object) -> int | None:
    """``value`` when it is an int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def count(info: Mapping[str, Any], field: str) -> int | None:
    """``info[field]`` when it is a count (an int, not a bool, not negative), else None."""
    value = integer(info.get(field))
    return value if value is not None and value >= 0 else None


def parse_info(raw: str | None) -> tuple[dict[str, Any], str | None]:
    """A worker's info entry as a dict, or ``({}, why)`` when it is not a JSON object."""
    if raw is None:
        return {}, None
    try:
        info = json.loads(raw)
    except (ValueError, RecursionError):
        return {}, "not JSON"
    if not isinstance(info, dict):
        return {}, "not a JSON object but %s" % type(info).__name__
    return info, None


def _jobs(raw: object, now_ms: float) -> list[RunningJob]:
    """The entries of a worker's ``jobs`` info that are objects with a text ``id`` (at
    most ``JOBS_SHOWN``), any JSON value of their ``queue`` and ``callable`` as its text."""
    items = raw[:JOBS_SHOWN] if isinstance(raw, list) else []
    return [RunningJob(id=item["id"], queue=str(item.get("queue", "")),
                       callable=str(item.get("callable", "")),
                       age_s=_age(item.get("started_ms"), now_ms))
            for item in items if isinstance(item, dict) and isinstance(item.get("id"), str)]


def _age(started_ms: object, now_ms: float) -> float | None:
    """Seconds since ``started_ms`` (None when it is not a number)."""
    if isinstance(started_ms, bool) or not isinstance(started_ms, int | float):
        return None
    return round(max(0.0, (now_ms - started_ms) / 1000), 3)


def progress_of(ids: Iterable[str]) -> dict[str, Any]:
    """The progress of each job of ``ids`` (at most ``MAX_PROGRESS_IDS``) that has one,
    from its row in one query: any row however deep (``core.stored``), as its text then."""
    wanted = list(dict.fromkeys(ids))[:MAX_PROGRESS_IDS]
    rows = Job.objects.filter(pk__in=wanted).values_list("id", stored.as_text("progress"))
    found = {pk: stored.parse(text) for pk, text in rows} if wanted else {}
    return {pk: v.text if isinstance(v, stored.Raw) else v for pk, v in found.items()}


def split(in_flight: int, workers: Iterable[tuple[int | None, int | None]]) -> Holding:
    """The split of ``in flight`` (summed over the queues shown) by the workers'
    ``(running, prefetched)`` counts (``None`` for a count a worker's info lacks): running
    at most ``in flight``, prefetched at most what is left, settling the rest."""
    pairs = list(workers)
    running = min(in_flight, sum(r or 0 for r, _ in pairs))
    prefetched = min(in_flight - running, sum(w or 0 for _, w in pairs))
    return Holding(in_flight=in_flight, running=running, prefetched=prefetched,
                   settling=in_flight - running - prefetched)


# -- limits and groups --------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class CallableLimitState:
    callable: str  # the dotted path
    rate: Rate | None  # (starts, per_ms)
    concurrency: int | None
    running: int | None = None  # slots held now (None: ``unavailable``)
    started_in_window: int | None = None  # grants within the rate's window (ditto)
    unavailable: str | None = None  # why they could not be read (its node is down)

    @property
    def limit(self) -> str:
        """``"100/m, 5 at once"`` (the admin's queues page)."""
        return describe_limit(self.rate, self.concurrency)


def callable_limits(engine: Engine, settings: Settings,
                    partial: bool = False) -> list[CallableLimitState]:
    """Each callable of ``DELAYQ['CALLABLE_LIMITS']`` (sorted by path): its limit and what
    it runs now; with ``partial``, one whose Redis Cluster node is down is ``unavailable``
    instead of failing the read."""
    out = []
    for path, e in sorted(settings.callable_limits.items()):
        row = functools.partial(CallableLimitState, callable=path, rate=e.rate,
                                concurrency=e.concurrency)
        try:
            s = engine.limit_state(path, rate=e.rate, concurrency=e.concurrency)
        except ERRORS as exc:
            out.append(row(unavailable=unreadable(engine, exc, partial)))
        else:
            out.append(row(running=s.running, started_in_window=s.started_in_window))
    return out


def describe_limit(rate: Sequence[int] | None, concurrency: int | None,
                   none: str = "") -> str:
    """``"100/m, 5 at once"``: the rate as the settings and ``delayq_queue`` spell it
    (``rate_text``); ``none`` without either."""
    parts = [] if rate is None else [rate_text((rate[0], rate[1]))]
    parts += [] if concurrency is None else ["%d at once" % concurrency]
    return ", ".join(parts) or none


def group_limit_text(concurrency: int | None, rate: str | None, missing: str = "-") -> str:
    """``"concurrency 3, rate 10/s"``: a group's limits; ``missing`` names one not set
    (``"default"`` in an override: its queue's then)."""
    return gettext("concurrency %(c)s, rate %(r)s") % {
        "c": missing if concurrency is None else concurrency, "r": rate or missing}


def queue_group_limits(settings: Settings, queues: Sequence[str]
                       ) -> dict[str, tuple[str, list[group_limits.GroupOverride]]]:
    """The queues of ``queues`` whose groups have limits: each one's defaults for its
    groups (``group_limit_text``; "" without any) and the groups' own (in one query)."""
    overrides = group_limits.by_queue(q for q in queues if q not in settings.queue_shards)
    out = {}
    for queue in queues:
        rate, concurrency = settings.group_limit(queue)
        defaults = "" if rate is None and concurrency is None else group_limit_text(
            concurrency, rate_text(rate))
        if defaults or overrides.get(queue):
            out[queue] = (defaults, overrides.get(queue, []))
    return out


SHOWN = 10  # groups shown


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupUsage:
    queue: str
    group: str
    due: int  # rows scheduled or retrying whose due time has come
    running: int
    paused: bool
    held: bool = False  # a limit of its own holds it out of the rotation (Redis)
    limit: str = ""  # "10/s, 2 at once": its own limits, else its queue's; "": none


def busiest(engine: Engine, queues: Sequence[str], shown: int = SHOWN, *,
            strict: bool = False) -> list[GroupUsage]:
    """The ``shown`` groups of ``queues`` with the most due jobs, most first; none when
    the database cannot be read, or with ``strict`` its ``DatabaseError``."""
    rows = Job.objects.filter(queue__in=list(queues)).exclude(group="")
    try:
        due = list(rows.filter(status__in=(JobStatus.SCHEDULED, JobStatus.RETRYING),
                               run_at__lte=timezone.now())
                   .values("queue", "group").annotate(n=Count("pk"))
                   .order_by("-n", "queue", "group").values_list("queue", "group", "n")[:shown])
        running = {(q, g): n for q, g, n in rows.filter(
            status=JobStatus.RUNNING, group__in={g for _, g, _ in due})
            .values("queue", "group").annotate(n=Count("pk")).values_list("queue", "group", "n")}
        own = {(r.queue, r.group): r for r in GroupLimit.objects.filter(
            queue__in={q for q, _, _ in due}, group__in={g for _, g, _ in due})}
    except DatabaseError:
        if strict:  # delayq_status: unknown, not none
            raise
        return []
    settings = get_settings()

    def limit(q: str, g: str) -> str:
        rate, concurrency = settings.group_limit(q)
        if (row := own.get((q, g))) is not None:
            rate = parse_rate(row.rate_limit) if row.rate_limit else rate
            concurrency = row.concurrency if row.concurrency is not None else concurrency
        return describe_limit(rate, concurrency)

    queues_shown = {q for q, _, _ in due}
    paused = {q: set(engine.paused_groups(q)) for q in queues_shown}
    held = {q: set(engine.held_groups(q, [g for q2, g, _ in due if q2 == q]))
            for q in queues_shown}
    return [GroupUsage(queue=q, group=g, due=n, running=running.get((q, g), 0),
                       paused=g in paused[q], held=g in held[q], limit=limit(q, g))
            for q, g, n in due]

