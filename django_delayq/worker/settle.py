"""Settling outcomes in Redis (batched ack/nack) and recording them in the audit.

Redis decides first; the audit row follows what Redis accepted. A settlement Redis refuses
because its lease was lost (the job redelivered) is logged and changes nothing: no row
change, attempt row or signal (a started run's attempt is the lease recovery's). Not every
refusal is a lost lease (``Settler.refused``; docs/internals.md, "Settlement": a refused
ack): an earlier send's reply was lost, Redis lost the job, or a stale copy's settlement
took the lease (a failover to a lagging replica). A nack sent again after its reply was
lost is answered from this worker's nack record (lua/nack.lua), recorded as usual.

A failed attempt is recorded as ``error_type`` (the exception's dotted path), ``error``
(its message) and ``traceback``, on the row (``last_error`` holds the message) and on its
``JobAttempt``. While Redis cannot be reached, the final rows go first (``early_rows.py``).

A sharded queue is settled shard by shard (``Settler.send``, calls of their own): the
outcomes of a shard whose node fails (or that ``ShardHealth`` sets aside) are kept for a
later round, still held (their leases extended like a running job's), while the other
shards' are settled and recorded now. Only when every shard fails is the error raised,
and the queue backs off as a whole (``queue_backoff.py``), as a plain queue does. The
settling thread waits for the set-aside shard's delay (``Settlement._wait_seconds``).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections, router

from django_delayq import signals
from django_delayq.core.reconcile_state import FROM_RECORD, SETTLED_KEEP_MS, SUCCEEDED_IN_REDIS
from django_delayq.engine.logtext import logged, shown
from django_delayq.engine.outcomes import NackOutcome, lease_clock
from django_delayq.engine.replies import grouped
from django_delayq.engine.shard_health import ERRORS
from django_delayq.models import FINAL_STATUSES, Job, JobAttempt, JobStatus
from django_delayq.worker import attempt_signals, joblog
from django_delayq.worker.attempt_signals import signal_failed, signal_started, signal_succeeded
from django_delayq.worker.gates import release_callable_slots
from django_delayq.worker.outcome import STATUS_OF, Kind, Outcome, ms_to_dt, row_fields

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.engine.acks import AckStream
    from django_delayq.engine.outbox import Presence, Settled
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.audit import AuditWriter

logger = logging.getLogger(__name__)


class Settler:
    def __init__(self, engine: Engine, settings: Settings, audit: AuditWriter, worker_id: str,
                 release: Callable[[Sequence[Outcome]], None] | None = None,
                 on_start: Callable[[str], object] | None = None,
                 stream: AckStream | None = None) -> None:
        self.engine = engine
        self.stream = stream  # start marks go through it (Settlement's), else calls
        # told the id of each tick's job that starts: the schedule's next tick
        # (core/periodic.py's ``tick_started``, which the worker passes in); None: not told
        self.on_start = on_start
        # frees the callable-limit slots of settled attempts (the worker's StartGate)
        self.release = release or (lambda outcomes: release_callable_slots(engine, outcomes))
        self.settings = settings
        self.audit = audit
        self.worker_id = worker_id
        self.processed = 0  # outcomes settled, published by the heartbeat
        self.lags: deque[float] | None = None  # job end to ack write, ms (bench/settle_lag.py)
        # Jobs whose settled record Redis keeps until their audit row lands: id -> queue
        self._records: dict[str, str] = {}
        self._landed: dict[str, list[str]] = {}  # queue -> ids whose rows were written
        self._records_lock = threading.Lock()
        # seconds left of a job's lease as this worker last extended it (the ledger's
        # ``lease_left``, which Settlement sets; else from its claim): not above 0 once it
        # may have passed
        self.lease_left: Callable[[ClaimedJob], float] = lambda job: (
            job.lease_until - lease_clock())
        # a nack sent again is answered from this worker's nack record; not for nacks of
        # another worker's jobs under its id (the --processes supervisor's take-back)
        self.answer_nacks = True

    def mark(self, job: ClaimedJob) -> None:
        """A start mark through the stream (not waited for), else a call. Any job's: a mark
        names the keys of the data set that holds the job (``Engine.start_mark``: its
        shard's), all on the stream's one server."""
        if self.stream is None or not self.stream.mark(*self.engine.start_mark(job)):
            self.engine.mark_started([job])

    def renewed(self, job: ClaimedJob) -> bool:
        """Whether Redis accepts one extend of ``job``'s lease now, asked before a held job
        whose lease may have passed starts (``Ledger.lease_left`` below the runner's
        margin); refused (another delivery may have taken it back and run it) or not
        answered: logged, and the job is not to start."""
        why = "another delivery holds it now"
        try:
            [ok] = self.engine.extend(job.queue, [(job.id, job.token)], self.settings.lease_ms)
        except Exception as exc:  # noqa: BLE001 - unknown: not started, handed back
            ok, why = False, "Redis cannot say (%s)" % shown(exc)
        if not ok:
            logger.warning("job %s (attempt %d): not started: its lease may have passed; %s",
                           shown(job.id), job.attempt, why)
        return ok

    def started(self, job: ClaimedJob, keep_due: bool = False,
                at: datetime | None = None) -> datetime | None:
        """The start mark in Redis (before the function is called), then the row ``running``,
        due at the time Redis held it unless ``keep_due`` (a limited callable's job keeps its
        row's due time: a deferral moved it in Redis only, so lateness counts from the first).
        Returns the attempt's start instant (``at``, else now: its row and signals carry it);
        None, nothing else done, when the mark could not be written (Redis unreachable): the
        job must not start, or a kill would make its run look unstarted (re-run, same attempt)."""
        try:
            self.mark(job)
        except Exception as exc:  # noqa: BLE001 - the caller defers the job
            logger.warning("job %s: start mark not written (%s): not started, deferred",
                           shown(job.id), shown(exc))
            return None
        now, due_at = at or datetime.now(UTC), ms_to_dt(job.due_ms)  # its one start instant
        due = {} if keep_due else {"run_at": due_at}
        self.audit.update(job.id, status=JobStatus.RUNNING, started_at=now, finished_at=None,
                          attempts=job.attempt, worker_id=self.worker_id,
                          updated_at=datetime.now(UTC), **due)  # changed now (reconciler)
        signalled = signals.wanted(signals.job_started)
        path = job.payload.path if job.payload is not None else ""
        joblog.started(self.settings, job, path)
        if self.on_start is not None and job.payload is not None and job.payload.tick:
            self.on_start(job.id)  # a tick's job: its schedule's next tick is created
        if signalled:
            signal_started({"job_id": job.id, "queue": job.queue, "callable_path": path},
                           job.attempt, self.worker_id, due_at, now)
        return now

    def settle(self, outcomes: list[Outcome]) -> None:
        """Settle ``outcomes`` in Redis, then record them (``send`` and ``record``)."""
        self.record(self.send(outcomes))

    def send(self, outcomes: list[Outcome], kept: list[Outcome] | None = None) -> Sent:
        """Settle ``outcomes`` in Redis (ack, defer, nack: one call each per queue, or per
        shard); what each became, for ``record``. Raises on a Redis error (nothing to
        record then). Given ``kept``, a sharded queue is settled shard by shard, and the
        outcomes of a shard whose node fails go there (settled later, still held)."""
        sent: Sent = []
        for queue, items in grouped(outcomes, lambda o: o.job.queue).items():
            if kept is not None and len(names := self.engine.data_sets(queue)) > 1:
                sent += self._send_shards(queue, names, items, kept)
            else:
                sent += self._send(queue, items)
        return sent

    def _send(self, queue: str, items: list[Outcome]) -> Sent:
        """Settle the outcomes of one queue (or one shard of it)."""
        wins = [o for o in items if o.kind in ACKED]
        fails = [o for o in items if o.kind in (Kind.RETRY, Kind.DEAD)]
        self.note_sent(items)
        leases, codes = acks(wins)
        acked = self.engine.ack(queue, leases, holder=self.worker_id, codes=codes)
        self._defer(queue, [o for o in items if o.kind is Kind.DEFER])
        now_ms = self._retry_times(fails)
        try:
            nacked = self.engine.nack(
                queue, [(o.job.id, o.job.token, o.retry_delay_ms) for o in fails],
                dead_max=self.settings.dead_max, holder=self.worker_id, now_ms=now_ms,
                record=self.answer_nacks)
            ours = self.refused(queue, [o for o, res in zip(fails, nacked) if not res])
        except BaseException:
            for o in fails:  # its reply lost, it may have run: sent again, it is answered
                o.nack_sent = True  # from this worker's nack record (lua/nack.lua)
            raise
        if doubtful := [o.job for o, res in zip(fails, nacked) if o.nack_sent and res
                        and self.lease_left(o.job) <= 0]:  # recorded since by a reconciler?
            gone = attempted_elsewhere(doubtful)
            nacked = [NackOutcome.LEASE_LOST if o.job.id in gone else res
                      for o, res in zip(fails, nacked)]
        return (self.acked(queue, wins, acked)
                + [(o, STATUS_OF.get(res) or ours.get(o.job.id)) for o, res in zip(fails, nacked)]
                + [(o, None) for o in items if o.kind is Kind.DEFER])

    def _send_shards(self, queue: str, names: list[str], items: list[Outcome],
                     kept_out: list[Outcome]) -> Sent:
        sent: Sent = []
        kept: list[Outcome] = []
        errors: list[BaseException] = []
        for part in grouped(items, lambda o: self.engine.home_of(queue, o.job.id)).values():
            try:
                sent += self._send(queue, part)
            except ERRORS as exc:
                kept += part
                errors.append(exc)
        if kept and not sent and all(self.engine.health.down(n) for n in names):
            raise errors[0]  # every shard fails: the queue backs off as a whole
        kept_out.extend(kept)
        return sent

    def note_sent(self, outcomes: Sequence[Outcome]) -> None:
        """Outcomes whose ack leaves now (finish -> ack sent, for bench/settle_lag.py)."""
        if self.lags is None:
            return
        at = datetime.now(UTC)
        self.lags.extend((at - o.finished_at).total_seconds() * 1000 for o in outcomes)

    def acked(self, queue: str, wins: list[Outcome], acked: list[bool]) -> Sent:
        """What an ack of ``wins`` made of them (``acked``: one bool each), for ``record``."""
        ours = self.refused(queue, [o for o, ok in zip(wins, acked) if not ok])
        return [(o, STATUS_OF[o.kind] if ok else ours.get(o.job.id)) for o, ok in zip(wins, acked)]

    def refused(self, queue: str, refused: list[Outcome]) -> dict[str, JobStatus]:
        """Which of ``refused`` (settlements Redis refused) are this run's outcome, each with
        the status it records. A success's (or expiry's) when Redis holds the job nowhere and
        nothing says another delivery settled it: no settled record (and, this lease maybe
        passed, ``lease_left``, a row not final: another's record may be gone, its row
        landed), or one of this lease (``_took``). A failure's only with a record of an
        earlier attempt under this lease's token: the job ends as that record says, not
        retried (a nack whose reply was lost is answered from the nack record)."""
        if not refused:
            return {}
        where = dict(zip([o.job.id for o in refused],
                         self.engine.presence(queue, [o.job.id for o in refused])))
        ours = {o.job.id: o for o in refused if self._mine(o, where[o.job.id])}
        if doubtful := [o.job for o in ours.values()
                        if where[o.job.id].settled is None and self.lease_left(o.job) <= 0]:
            for job_id in settled_elsewhere(doubtful, self.worker_id):
                del ours[job_id]
        return {i: STATUS_OF[o.kind] if o.kind in ACKED else failed_late(o, where[i])
                for i, o in ours.items()}

    def _mine(self, o: Outcome, where: Presence) -> bool:
        """Whether nothing Redis holds says another delivery has ``o``'s job (``refused``)."""
        if where.queued or where.dead:
            return False
        if where.settled is None:
            return o.kind in ACKED
        return self._took(o, where.settled)

    def _took(self, o: Outcome, settled: Settled) -> bool:
        """Whether ``settled`` is of ``o``'s lease: its token (a requeue restarts attempt
        numbers, never tokens), and an earlier attempt (a stale copy's settlement took it:
        a failover to a lagging replica hands a token out again; an expired delivery never
        ran: its end is the earlier run's) or, for a success, this worker's of this attempt
        (its reply lost; that alone in a record without token)."""
        job = o.job
        own = o.kind in ACKED and (settled.holder, settled.attempt) == (self.worker_id, job.attempt)
        return own if settled.token is None else settled.token == job.token and (own or (
            settled.attempt < job.attempt and o.kind is not Kind.EXPIRED))

    def record(self, sent: Sent) -> None:
        """Record what ``send`` settled (audit rows, signals, logs), free the callable limit
        slots of the settled attempts. A job's failure here is logged; the others go on."""
        for o, status in sent:
            try:
                if o.kind is not Kind.DEFER:
                    self._record(o, status)
            except BaseException:  # noqa: BLE001 - never the settling thread, SystemExit too
                logged(logger.exception, "recording settled job %s failed", shown(o.job.id))
        if limited := [o for o, _ in sent if o.callable_limit is not None]:
            try:
                self.release(limited)  # settled: their callable-limit slots are free
            except Exception:  # noqa: BLE001 - never the settling thread (a cluster error
                logger.exception("freeing %d callable-limit slot(s) failed: their leases "
                                 "free them", len(limited))  # is no RedisError)
        self.processed += sum(o.kind is not Kind.DEFER for o, _ in sent)

    def _defer(self, queue: str, outcomes: list[Outcome]) -> None:
        """Jobs a callable limit refused: back to pending, due at their retry time, the
        attempt and their claims' rate-window entries given back (they never started).
        Their rows are untouched (never marked running)."""
        if not outcomes:
            return
        leases = [(o.job.id, o.job.token, o.retry_at_ms or o.job.due_ms, o.job.claimed_ms)
                  for o in outcomes]
        for o, ok in zip(outcomes, self.engine.defer(queue, leases)):
            if not ok:
                logger.warning("job %s (attempt %d): lease lost before it was deferred; the "
                               "redelivered copy owns it now", shown(o.job.id), o.job.attempt)

    def landed(self, job_ids: Sequence[str]) -> None:
        """The audit rows of ``job_ids`` are written (the audit writer's hook, on its
        thread: no Redis call here): their settled records may go, at the next
        ``forget_landed``."""
        with self._records_lock:
            for job_id in job_ids:
                queue = self._records.pop(job_id, None)
                if queue is not None:
                    self._landed.setdefault(queue, []).append(job_id)

    def forget_landed(self) -> None:
        """Drop the settled records of rows that landed. A failure leaves them to the keep
        time (the reconciler never reads a final row's record)."""
        with self._records_lock:
            landed, self._landed = self._landed, {}
        for queue, ids in landed.items():
            try:
                self.engine.forget_settled(queue, ids, keep_ms=SETTLED_KEEP_MS)
            except Exception as exc:  # noqa: BLE001 - Redis down: the keep time drops them
                logger.debug("could not forget %d settled record(s): %s", len(ids), shown(exc))

    def _retry_times(self, fails: list[Outcome]) -> int | None:
        """With an engine clock (``django_delayq.testing``'s ``now=`` or test clock): one
        instant of it for the nack, each retry's due time on it (``retry_at_ms``), so the
        row is due when Redis holds it. Else None: Redis's time, the row due from the
        attempt's end."""
        if self.engine.clock is None or not fails:
            return None
        now_ms = int(self.engine.clock())
        for o in fails:
            if o.kind is Kind.RETRY:
                o.retry_at_ms = now_ms + (o.retry_delay_ms or 0)
        return now_ms

    def _record(self, o: Outcome, status: JobStatus | None) -> None:
        job = o.job
        if status is None:
            logger.warning("job %s (attempt %d): lease lost before it was settled; the "
                           "redelivered copy owns it now", shown(job.id), job.attempt)
            return
        if status in _RECORDED:  # Redis keeps a settled record until the row lands
            with self._records_lock:
                self._records[job.id] = job.queue
        fields = row_fields(o, status, self.worker_id)
        base = {"job_id": job.id, "queue": job.queue, "callable_path": o.path}
        if o.kind is Kind.EXPIRED:  # never ran: the attempt claimed is not counted
            del fields["started_at"]
            fields.update(attempts=job.attempt - 1, error_type="", last_error=o.error)
            self.audit.update(job.id, **fields)
            if logger.isEnabledFor(logging.INFO):  # not the texts of a line not written
                logger.info("job %s %s: %s", shown(job.id), shown(o.path), shown(o.error, 2000))
            attempt_signals.signal_expired(base, o, self.worker_id)  # it never started
            return
        if o.kind is Kind.SUCCESS:
            fields["attempts"] *= o.ran  # 0 when not run (an atomic commit read): row kept
            self.audit.update(job.id, result=o.result, **fields)
            joblog.succeeded(self.settings, o)
            signal_succeeded(base, job.attempt, self.worker_id, o.result, o.duration_s)
            return
        if status is JobStatus.RETRYING:
            fields["run_at"] = (o.finished_at + timedelta(milliseconds=o.retry_delay_ms or 0)
                                if o.retry_at_ms is None else ms_to_dt(o.retry_at_ms))
            fields["finished_at"] = None
        record_failure(self.audit, base, status, fields, traceback=o.traceback,
                       error_type=o.error_type, error=o.error, worker_id=self.worker_id,
                       tried=o.row_final,  # its JobAttempt written with its early row
                       signal=not o.settled_late)
        if status is JobStatus.RETRYING:  # after its row: a project's log handler may raise
            joblog.retrying(self.settings, o, fields["run_at"])
        elif status is JobStatus.DEAD:
            logger.error("job %s %s is dead after %d attempt(s): %s: %s", shown(job.id),
                         shown(o.path), job.attempt, shown(o.error_type), shown(o.error, 2000))


def record_failure(audit: AuditWriter, base: dict[str, Any], status: JobStatus,
                   fields: dict[str, Any], *, traceback: str, error_type: str, error: str,
                   worker_id: str, ran_on: str | None = None, tried: bool = False,
                   signal: bool = True) -> None:
    """A failed attempt of job ``base`` (``job_id``, ``queue``, ``callable_path``) settled
    as ``status`` by ``worker_id``: its row changes (``fields`` and the error), its
    ``JobAttempt`` (the attempt's worker: ``ran_on``, default ``worker_id``; its start:
    ``fields["started_at"]``, none when absent; not when ``tried``: written already),
    its signal (with that start; none unless ``signal``). Settlements and lease recovery
    record them so."""
    job_id, attempt, started_at = base["job_id"], fields["attempts"], fields.get("started_at")
    audit.update(job_id, error_type=error_type, last_error=error, traceback=traceback, **fields)
    if not tried:
        audit.attempt(job_id=job_id, number=attempt, outcome=status,
                      started_at=started_at, finished_at=fields["updated_at"],
                      error_type=error_type, error=error, traceback=traceback,
                      worker_id=worker_id if ran_on is None else ran_on)
    if signal:
        signal_failed(base, status, attempt, worker_id, error=error, error_type=error_type,
                      started_at=started_at, retry_at=fields.get("run_at"))


def failed_late(o: Outcome, where: Presence) -> JobStatus:
    """A failed run's status, when a stale copy's settlement took its lease (``refused``):
    the job's, as that copy's settled record says. Its record sends no lifecycle signal
    (``settled_late``): that copy's run sent the job's."""
    assert where.settled is not None
    o.settled_late = True
    logger.warning("job %s (attempt %d) failed, but Redis holds it settled by attempt %d (its "
                   "late settlement took this lease): recorded, not retried", shown(o.job.id),
                   o.job.attempt, where.settled.attempt)
    return FROM_RECORD[where.settled.code][0]


def _rows_say(jobs: list[ClaimedJob], what: str,
              read: Callable[[str, dict[str, int]], set[str]]) -> set[str]:
    """``read(database, {job id: attempt})`` where the audit writes (never a lagging
    replica); none when the database cannot say (logged, as ``what``). A connection that
    failed is closed first: on the settling threads nothing else renews it."""
    using = router.db_for_write(Job)
    try:
        connections[using].close_if_unusable_or_obsolete()
        return read(using, {job.id: job.attempt for job in jobs})
    except DatabaseError as exc:
        logger.warning("could not read %d row(s) of %s: %s", len(jobs), what, shown(exc))
        return set()


def settled_elsewhere(jobs: list[ClaimedJob], worker_id: str) -> set[str]:
    """The ids of ``jobs`` whose rows another delivery made final: final, and not this
    worker's attempt's own commit (``_own_commit``). None when the database cannot say (as
    before this check: the audit's guard keeps final rows)."""
    def read(using: str, attempt: dict[str, int]) -> set[str]:
        rows = Job.objects.using(using).filter(pk__in=list(attempt), status__in=FINAL_STATUSES)
        return {pk for pk, status, by, n, why in rows.values_list(
                    "pk", "status", "worker_id", "attempts", "last_error")
                if not _own_commit(status, by, n, why, worker_id, attempt[pk])}
    return _rows_say(jobs, "refused acks", read)


def _own_commit(status: str, by: str, number: int, why: str, worker_id: str,
                attempt: int) -> bool:
    """Whether a final row is this worker's attempt's own success, committed by an atomic
    job before its ack: not a lease recovery's end (cancelled, dead: it keeps the row's
    worker and attempt) nor a reconciler's from this worker's settled record."""
    return (status == JobStatus.SUCCEEDED and (by, number) == (worker_id, attempt)
            and why != SUCCEEDED_IN_REDIS)


def attempted_elsewhere(jobs: list[ClaimedJob]) -> set[str]:
    """The ids of ``jobs`` (failed attempts whose nack, sent again, was answered from the
    first send's record while this worker's lease may have passed) whose attempt was
    recorded meanwhile by another (a reconciler's, the worker silent past two leases): an
    attempt row of that number, a later attempt, or a final row. None when the database
    cannot say (then the answer stands)."""
    def read(using: str, attempt: dict[str, int]) -> set[str]:
        rows = Job.objects.using(using).filter(pk__in=list(attempt))
        tried = JobAttempt.objects.using(using).filter(job_id__in=list(attempt))
        return {pk for pk, status, n in rows.values_list("pk", "status", "attempts")
                if status in FINAL_STATUSES or n > attempt[pk]} | {
                pk for pk, n in tried.values_list("job_id", "number") if n == attempt[pk]}
    return _rows_say(jobs, "nacks sent again", read)


def acks(wins: Sequence[Outcome]) -> tuple[list[tuple[str, int]], list[str]]:
    """The leases of ``wins`` (successes and expired jobs) to ack, and each one's code in
    its settled record (``s`` succeeded, ``x`` expired)."""
    return ([(o.job.id, o.job.token) for o in wins],
            ["x" if o.kind is Kind.EXPIRED else "s" for o in wins])


SEND_EVERY = 0.002  # seconds: a job thread sends the acks done at most this often,
SEND_AT = 5  # unless this many wait (a kill re-runs them: finished, not yet acked)
_RECORDED = (JobStatus.SUCCEEDED, JobStatus.EXPIRED, JobStatus.CANCELLED)
ACKED = (Kind.SUCCESS, Kind.EXPIRED)  # settled with an ack (``acks``); the rest nacked

Sent = list[tuple[Outcome, "JobStatus | None"]]  # what ``Settler.send`` made of each
