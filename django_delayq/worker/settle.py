"""Settling outcomes in Redis (batched ack/nack) and recording them in the audit.

Redis decides first; the audit row follows what Redis accepted. A settlement that
Redis refuses (the lease was lost and the job redelivered) is logged and leaves the
row to the redelivered copy.

A failed attempt is recorded as ``error_type`` (the exception's dotted path), ``error``
(its message) and ``traceback``, on the row (``last_error`` holds the message) and on its
``JobAttempt``. Leases that expired are taken back by ``recovery.py``; this worker's
heartbeat is ``liveness.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django_delayq import signals
from django_delayq.core import payloads, periodic
from django_delayq.core.conf import Settings
from django_delayq.core.reconcile import SETTLED_KEEP_MS
from django_delayq.engine import ClaimedJob, Engine, NackOutcome
from django_delayq.engine.acks import AckReply
from django_delayq.models import JobStatus
from django_delayq.worker import joblog
from django_delayq.worker.audit import AuditWriter, OutageLog
from django_delayq.worker.ledger import Ledger
from django_delayq.worker.limits import release_groups
from django_delayq.worker.queue_backoff import ERRORS, QueueBackoff
from django_delayq.worker.runner import Kind, Outcome, ms_to_dt

logger = logging.getLogger(__name__)


class Settler:
    def __init__(self, engine: Engine, settings: Settings, audit: AuditWriter, worker_id: str,
                 release: Callable[[Sequence[Outcome]], None] | None = None) -> None:
        self.engine = engine
        # frees the callable-limit slots of settled attempts (the worker's StartGate)
        self.release = release or (lambda outcomes: release_groups(engine, outcomes))
        self.settings = settings
        self.audit = audit
        self.worker_id = worker_id
        self.processed = 0  # outcomes settled, published by the heartbeat
        self.lags: deque[float] = deque(maxlen=100_000)  # ms from a job's end to its ack
        # Jobs whose settled record Redis keeps until their audit row lands: id -> queue
        self._records: dict[str, str] = {}
        self._landed: dict[str, list[str]] = {}  # queue -> ids whose rows were written
        self._records_lock = threading.Lock()
        self.schedules = periodic.Keeper()  # the keeper thread's pass (core/periodic.py)

    def started(self, job: ClaimedJob, keep_due: bool = False) -> None:
        """The row is ``running``, due at the time Redis held it, unless ``keep_due``: a
        job of a limited callable keeps its row's due time (a deferral moved its due time
        in Redis only), so its lateness counts from when it was first due."""
        now = datetime.now(UTC)
        due = {} if keep_due else {"run_at": ms_to_dt(job.due_ms)}
        self.audit.update(job.id, status=JobStatus.RUNNING, started_at=now, finished_at=None,
                          attempts=job.token, worker_id=self.worker_id, updated_at=now, **due)
        signalled = signals.wanted(signals.job_started)
        path = _path_of(job) if signalled or self.settings.log_jobs else ""
        joblog.started(self.settings, job, path)
        if job.id[0] == "k" and periodic.Keeper.active:  # a tick's job: create the next
            periodic.tick_started(job.id)
        if signalled:
            signals.send(signals.job_started, job_id=job.id, queue=job.queue, callable_path=path,
                         attempt=job.token, worker_id=self.worker_id,
                         due_at=ms_to_dt(job.due_ms), started_at=now)

    def settle(self, outcomes: list[Outcome]) -> None:
        """Settle ``outcomes`` in Redis, then record them (``send`` and ``record``)."""
        self.record(self.send(outcomes))

    def send(self, outcomes: list[Outcome]) -> Sent:
        """Settle ``outcomes`` in Redis (ack, defer, nack: one call each per queue); what
        each became, for ``record``. Raises on a Redis error (nothing to record then)."""
        sent: Sent = []
        by_queue: dict[str, list[Outcome]] = {}
        for o in outcomes:
            by_queue.setdefault(o.job.queue, []).append(o)
        for queue, items in by_queue.items():
            wins = [o for o in items if o.kind in (Kind.SUCCESS, Kind.EXPIRED)]
            fails = [o for o in items if o.kind in (Kind.RETRY, Kind.DEAD)]
            self.note_sent(items)
            acked = self.engine.ack(queue, [(o.job.id, o.job.token) for o in wins],
                                    holder=self.worker_id,
                                    codes=["x" if o.kind is Kind.EXPIRED else "s" for o in wins])
            self._defer(queue, [o for o in items if o.kind is Kind.DEFER])
            nacked = self.engine.nack(
                queue, [(o.job.id, o.job.token, o.retry_delay_ms) for o in fails],
                dead_max=self.settings.dead_max, holder=self.worker_id)
            # A refused ack of a job Redis no longer holds: ours ran but its reply was lost
            # (the retry was refused), or Redis lost the job: nobody else owns it. The
            # audit guard on attempts keeps this from overwriting a later attempt's record.
            sent += self.acked(queue, wins, acked)
            sent += [(o, STATUS_OF.get(res)) for o, res in zip(fails, nacked)]
            sent += [(o, None) for o in items if o.kind is Kind.DEFER]
        return sent

    def note_sent(self, outcomes: list[Outcome]) -> None:
        """Outcomes whose ack leaves now (finish -> ack sent, for bench/settle_lag.py)."""
        at = datetime.now(UTC)
        self.lags.extend((at - o.finished_at).total_seconds() * 1000 for o in outcomes)

    def acked(self, queue: str, wins: list[Outcome], acked: list[bool]) -> Sent:
        """What an ack of ``wins`` made of them (``acked``: one bool each), for
        ``record``; a refused one that Redis no longer holds was ours (its reply was lost
        before, or Redis lost the job), as in ``send``."""
        sent: Sent = []
        for o, ok in zip(wins, acked):
            if not ok and self.engine.inspect(queue, o.job.id).place == "":
                ok = True
            sent.append((o, STATUS_OF[o.kind] if ok else None))
        return sent

    def record(self, sent: Sent) -> None:
        """Record what ``send`` settled (audit rows, signals, logs) and free the callable
        limit slots of the settled attempts."""
        for o, status in sent:
            if o.kind is not Kind.DEFER:
                self._record(o, status)
        self.release([o for o, _ in sent])  # settled: their callable-limit slots are free
        self.processed += sum(o.kind is not Kind.DEFER for o, _ in sent)

    def _defer(self, queue: str, outcomes: list[Outcome]) -> None:
        """Jobs a callable limit refused: back to pending, due at their retry time, the
        attempt given back. Their rows are untouched (never marked running)."""
        if not outcomes:
            return
        leases = [(o.job.id, o.job.token, o.retry_at_ms or o.job.due_ms) for o in outcomes]
        for o, ok in zip(outcomes, self.engine.defer(queue, leases)):
            if not ok:
                logger.warning("job %s (attempt %d): lease lost before it was deferred; the "
                               "redelivered copy owns it now", o.job.id, o.job.token)

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
                logger.debug("could not forget %d settled record(s): %s", len(ids), exc)

    def _record(self, o: Outcome, status: JobStatus | None) -> None:
        job = o.job
        if status is None:
            logger.warning("job %s (attempt %d): lease lost before it was settled; the "
                           "redelivered copy owns it now", job.id, job.token)
            return
        if status in _RECORDED:  # Redis keeps a settled record until the row lands
            with self._records_lock:
                self._records[job.id] = job.queue
        fields: dict[str, Any] = dict(
            status=status, started_at=o.started_at, finished_at=o.finished_at,
            attempts=job.token, worker_id=self.worker_id, updated_at=o.finished_at)
        base = dict(job_id=job.id, queue=job.queue, callable_path=o.path)
        if status is JobStatus.EXPIRED:  # never ran: the attempt claimed is not counted
            del fields["started_at"]
            fields.update(attempts=job.token - 1, error_type="", last_error=o.error)
            self.audit.update(job.id, **fields)
            logger.info("job %s %s: %s", job.id, o.path, o.error)
            return
        if status is JobStatus.SUCCEEDED:
            self.audit.update(job.id, result=o.result, **fields)
            joblog.succeeded(self.settings, o)
            signals.send(signals.job_succeeded, attempt=job.token, worker_id=self.worker_id,
                         result=o.result, duration=o.duration_s, **base)
            return
        if status is JobStatus.RETRYING:
            fields["run_at"] = o.finished_at + timedelta(milliseconds=o.retry_delay_ms or 0)
            fields["finished_at"] = None
        self.audit.update(job.id, error_type=o.error_type, last_error=o.error,
                          traceback=o.traceback, **fields)
        self.audit.attempt(job_id=job.id, number=job.token, outcome=status,
                           started_at=o.started_at, finished_at=o.finished_at,
                           error_type=o.error_type, error=o.error, traceback=o.traceback,
                           worker_id=self.worker_id)
        if status is JobStatus.RETRYING:
            joblog.retrying(self.settings, o, fields["run_at"])
            signals.send(signals.job_retrying, attempt=job.token, worker_id=self.worker_id,
                         error=o.error, error_type=o.error_type, retry_at=fields["run_at"],
                         **base)
        elif status is JobStatus.DEAD:
            logger.error("job %s %s is dead after %d attempt(s): %s: %s", job.id, o.path,
                         job.token, o.error_type, o.error)
            signals.send(signals.job_dead, attempt=job.token, worker_id=self.worker_id,
                         error=o.error, error_type=o.error_type, **base)
        else:
            signals.send(signals.job_cancelled, running=True, **base)


def _path_of(job: ClaimedJob) -> str:
    try:
        return payloads.of(job).path
    except ValueError:
        return ""


MAX_STREAMED = 250  # leases per streamed ack (scripts.MAX_ACK)
SEND_EVERY = 0.001  # seconds: a job thread sends the acks done at most this often
_RECORDED = (JobStatus.SUCCEEDED, JobStatus.EXPIRED, JobStatus.CANCELLED)

Sent = list[tuple[Outcome, "JobStatus | None"]]  # what ``Settler.send`` made of each

STATUS_OF: dict[object, JobStatus] = {  # what an ack or a nack made of the job
    Kind.SUCCESS: JobStatus.SUCCEEDED,
    Kind.EXPIRED: JobStatus.EXPIRED,
    NackOutcome.RETRYING: JobStatus.RETRYING,
    NackOutcome.DEAD: JobStatus.DEAD,
    NackOutcome.CANCELLED: JobStatus.CANCELLED,
}


class SettleThread:
    """Settles finished jobs as they finish, never waiting for the claim loop (whose
    rounds read rows from the database): job threads send successes through the ack
    stream, a reader thread records the replies, a settling thread takes the rest and
    retries failures (a queue whose Redis fails backs off alone). Jobs stay held until
    Redis took them. ``on_settled(outcomes)`` runs after each settlement."""

    IDLE_SECONDS = 0.25  # also how often landed rows' records are forgotten when idle
    READ_SECONDS = 0.05  # the reader's wait for a reply; then it records what is pending

    def __init__(self, ledger: Ledger, settler: Settler,
                 on_settled: Callable[[list[Outcome]], None]) -> None:
        self.ledger = ledger
        self.settler = settler
        self.on_settled = on_settled
        # successes are acked from the job thread as it finishes, replies read here
        self.stream = settler.engine.ack_stream(settler.worker_id)
        ledger.notify_done = self.stream is None  # else finished() wakes it for leftovers
        self._reader: threading.Thread | None = None
        self.backoff = QueueBackoff()
        self._stop = threading.Event()
        self._leading = threading.Lock()  # a job thread settling (``finished``)
        self._last_send = 0.0  # monotonic: the last streamed send of a job thread
        self._to_record: deque[Sent] = deque()  # settled in Redis, recorded by this thread
        self._unrecorded: set[str] = set()  # ids being settled by a round, not recorded yet
        self._recording = threading.Condition()
        self._thread: threading.Thread | None = None
        self._outage = OutageLog(logger, "settling finished jobs", quiet=ERRORS)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="delayq-settle", daemon=True)
        self._thread.start()
        if self.stream is not None:
            self._reader = threading.Thread(target=self._read, name="delayq-acks", daemon=True)
            self._reader.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Settle what is done (the replies of acks in flight first), then end."""
        self._stop.set()
        if self._reader is not None:
            self._reader.join(timeout)
        self.ledger.wake_settling()
        if self._thread is not None:
            self._thread.join(timeout)
        if self.stream is not None:
            self.stream.close()

    def _read(self) -> None:
        """The ack stream's replies, in order: record what they settled; an ack whose
        fate is unknown goes back to the settling thread (``Engine.ack`` again)."""
        assert self.stream is not None
        while not (self._stop.is_set() and self.stream.in_flight() == 0):
            for reply in self.stream.read(self.READ_SECONDS):
                self._replied(reply)
            self.record_pending()

    def _replied(self, reply: AckReply) -> None:
        """One reply of the stream: record what it settled; an error (or a failure here)
        hands its outcomes back to be settled through ``Engine.ack``."""
        queue, wins = reply.tag
        try:
            if reply.error is not None:
                raise reply.error
            sent = self.settler.acked(queue, wins, reply.acked)
        except Exception as exc:  # noqa: BLE001 - never the reader thread
            logger.debug("ack stream: %s; settling %d job(s) again", exc, len(wins))
            self.ledger.keep_unsettled(wins, wins)
            self.ledger.wake_settling()
            return
        self._to_record.append(sent)
        self.ledger.keep_unsettled([], wins)
        self.on_settled(wins)

    def _run(self) -> None:
        pause = 0.0
        while True:
            stopping = self._stop.is_set()
            if not stopping and (self.stream is not None or not self._to_record):
                if self.ledger.wait_done(self._wait_seconds()) and self.stream is not None:
                    self._stop.wait(SEND_EVERY)  # a job thread may send them meanwhile
            try:
                self.settle_once()
            except Exception as exc:  # noqa: BLE001 - kept for the next round; never the thread
                pause = min(max(pause * 2, 0.1), 5.0)
                self._outage.failed(exc, pause)
                if self._stop.wait(pause) and stopping:
                    self.record_pending()
                    return
                continue
            finally:
                if self.stream is None or stopping:  # else the stream's reader records
                    self.record_pending()
            pause = 0.0
            self._outage.ok()
            if stopping:
                return

    def record_pending(self) -> None:
        """Record what the rounds settled (on this thread: off the job threads' path)."""
        while self._to_record:
            try:
                sent = self._to_record.popleft()
            except IndexError:
                return
            try:
                self.settler.record(sent)
            except Exception:  # noqa: BLE001 - a receiver's error must not stop the rest
                logger.exception("recording %d settled job(s) failed", len(sent))

    def _wait_seconds(self) -> float:
        wait_ms = self.IDLE_SECONDS * 1000
        for queue in self.ledger.unsettled_queues():  # settled once their delay ends
            wait_ms = min(wait_ms, self.backoff.remaining_ms(queue))
        return max(wait_ms, 1.0) / 1000

    def settle_once(self) -> None:
        """One round: forget the records of landed rows, then settle what is done: the
        successes through the ack stream (sent, not waited for: the reader records them),
        the rest with one call per queue, recorded at once. Safe on several threads at
        once: each outcome is taken by one round."""
        self.settler.forget_landed()
        outcomes = self.ledger.take_done()
        if self.stream is not None and outcomes:
            outcomes = self._stream(outcomes)
        if not outcomes:
            return
        by_queue: dict[str, list[Outcome]] = {}
        for o in outcomes:
            by_queue.setdefault(o.job.queue, []).append(o)
        sent: Sent = []
        ids = {o.job.id for o in outcomes}
        with self._recording:  # a retry of one of them waits until it is recorded
            self._unrecorded |= ids
        try:
            left = self.backoff.each(list(by_queue),
                                     lambda q: sent.extend(self.settler.send(by_queue[q])))
        except BaseException:
            self.ledger.keep_unsettled(outcomes, outcomes)
            raise
        finally:
            try:
                if sent:
                    self.settler.record(sent)
            finally:
                with self._recording:
                    self._unrecorded -= ids
                    self._recording.notify_all()
        self.ledger.keep_unsettled([o for q in left for o in by_queue[q]], outcomes)
        self.on_settled(outcomes)

    def wait_recorded(self, job_id: str, timeout: float = 10.0) -> None:
        """Before a job starts: wait while its previous attempt's outcome is being
        settled and recorded (a retry due at once must see its previous error)."""
        if job_id not in self._unrecorded:  # the usual case: no lock taken
            return
        with self._recording:
            self._recording.wait_for(lambda: job_id not in self._unrecorded, timeout)

    def finished(self) -> None:
        """A job thread's outcome is done. With an ack stream, the thread sends the
        successes done so far at once unless a send left less than ``SEND_EVERY`` ago
        (then the next one takes them: a job thread's send costs it a wait for the
        interpreter, so a busy worker's acks leave at most that often, batched, and an
        idle worker's at once); the settling thread sends what no job thread did and
        settles the rest. Without one (a cluster) it is settled now, on this thread,
        unless a round is under way on another one (that round's thread takes it next)."""
        if self.stream is not None:
            if time.monotonic() - self._last_send < SEND_EVERY:
                self.ledger.wake_settling()  # it sends what is left within SEND_EVERY
                return
            self._last_send = time.monotonic()
            rest = self._stream(self.ledger.take_done())
            if rest:
                self.ledger.keep_unsettled(rest, rest)
                self.ledger.wake_settling()
            return
        while self._leading.acquire(blocking=False):
            try:
                self.settle_once()
            except Exception as exc:  # noqa: BLE001 - kept for the settling thread
                logger.debug("settling on a job thread failed; the settling thread retries: "
                             "%s", exc)
                self.ledger.wake_settling()
                return
            finally:
                self._leading.release()
            if not self.ledger.has_done():  # done while this round ran: settle them too
                return

    def _stream(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Send the successes among ``outcomes`` through the stream; returns the rest (all
        of them when something failed here: settled the usual way)."""
        sent: set[int] = set()  # id() of the outcomes sent
        try:
            return self._stream_some(outcomes, sent)
        except Exception as exc:  # noqa: BLE001 - what was sent is answered by the reader
            logger.debug("ack stream send failed: %s", exc)
            return [o for o in outcomes if id(o) not in sent]

    def _stream_some(self, outcomes: list[Outcome], sent: set[int]) -> list[Outcome]:
        assert self.stream is not None
        rest: list[Outcome] = []
        by_queue: dict[str, list[Outcome]] = {}
        for o in outcomes:
            if o.kind in (Kind.SUCCESS, Kind.EXPIRED) and self.stream.covers(o.job.queue) \
                    and not self.backoff.waiting(o.job.queue):
                by_queue.setdefault(o.job.queue, []).append(o)
            else:
                rest.append(o)
        for queue, wins in by_queue.items():
            for part in [wins[i:i + MAX_STREAMED] for i in range(0, len(wins), MAX_STREAMED)]:
                self.settler.note_sent(part)
                codes = ["x" if o.kind is Kind.EXPIRED else "s" for o in part]
                if self.stream.send(queue, [(o.job.id, o.job.token) for o in part],
                                    codes, (queue, part)):
                    sent.update(id(o) for o in part)
                else:
                    rest += part
        return rest
