"""Settlement: finished jobs settled as they finish, never waiting for the claim loop.

``Settlement`` is the worker's component: the settler (``settle.py``: acks, nacks and
defers in Redis, then the rows, signals and log lines; shard by shard for a sharded
queue) and its threads: the settling thread ``delayq-settle``, the ack stream's reader
``delayq-acks``, and the writer of the final rows Redis could not take,
``delayq-early-rows`` (``early_rows.py``). See docs/internals.md, "Settlement"."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django_delayq.engine.logtext import shown
from django_delayq.engine.replies import chunks, grouped
from django_delayq.engine.scripts import MAX_ACK
from django_delayq.engine.shard_health import OUTAGES
from django_delayq.worker.audit import AuditWriter, OutageLog
from django_delayq.worker.early_rows import EarlyRows
from django_delayq.worker.queue_backoff import QueueBackoff
from django_delayq.worker.settle import ACKED, SEND_AT, SEND_EVERY, Sent, Settler, acks

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.engine.acks import AckReply
    from django_delayq.worker.ledger import Ledger
    from django_delayq.worker.outcome import Outcome

logger = logging.getLogger(__name__)


class Settlement:
    """Who settles: the settler (``settle.py``; a sharded queue shard by shard: a node
    down holds back its shard only) and the settling threads, which settle finished
    jobs as they finish, never waiting for the claim loop (whose rounds read rows from
    the database): job threads send successes through the ack stream, a reader thread
    records the replies, a settling thread takes the rest and retries failures (a queue
    whose Redis fails backs off alone). Jobs stay held until Redis took them.
    ``start``; ``stop`` settles what is done first. ``release`` frees the callable-limit
    slots of settled attempts; ``on_settled(outcomes)`` runs after each settlement."""

    IDLE_SECONDS = 0.25  # also how often landed rows' records are forgotten when idle
    READ_SECONDS = 0.05  # the reader's wait for a reply; then it records what is pending
    READ_PAUSE = 0.002  # the reader's pause after replies

    def __init__(self, engine: Engine, settings: Settings, audit: AuditWriter, ledger: Ledger,
                 worker_id: str, *, release: Callable[[Sequence[Outcome]], None],
                 on_settled: Callable[[list[Outcome]], None],
                 on_start: Callable[[str], object] | None = None) -> None:
        self.ledger = ledger
        # successes are acked from the job thread as it finishes, replies read here
        self.stream = engine.ack_stream(worker_id)
        ledger.notify_done = self.stream is None  # else finished() wakes it for leftovers
        self.settler = Settler(engine, settings, audit, worker_id, release, on_start, self.stream)
        self.settler.lease_left = ledger.lease_left  # a refused ack's lease may have passed
        # final rows written during a Redis outage, on a thread of their own
        self.early = EarlyRows(audit, worker_id, ledger, settings.lease_ms)
        audit.after_write = self.settler.landed  # their settled records may go
        self.on_settled = on_settled
        self.backoff = QueueBackoff()
        self._stop = threading.Event()
        self._leading = threading.Lock()  # a job thread settling (``finished``)
        self._last_send = 0.0  # monotonic: the last streamed send of a job thread
        self._woken = False  # a job thread woke this thread for leftovers, not taken yet
        self._to_record: deque[Sent] = deque()  # settled in Redis, recorded by this thread
        self._unrecorded: set[str] = set()  # ids being settled by a round, not recorded yet
        self._recording = threading.Condition()
        self._threads: list[threading.Thread] = []  # settling, then the reader
        self._outage = OutageLog(logger, "settling finished jobs", quiet=OUTAGES)

    def start(self) -> None:
        self.early.start()
        for target, name in [(self._run, "delayq-settle")] + (
                [(self._read, "delayq-acks")] if self.stream is not None else []):
            self._threads.append(threading.Thread(target=target, name=name, daemon=True))
            self._threads[-1].start()

    def stop(self, timeout: float = 10.0) -> None:
        """Settle what is done, then end: the settling thread's last round settles with
        calls (nothing more goes through the stream), the reader then records the
        replies of what was streamed before, and what it hands back (an ack whose fate
        is unknown) is settled here."""
        self._stop.set()
        self.ledger.wake_settling()
        for thread in self._threads:  # the reader after the settling thread's last round
            thread.join(timeout)
        if self.stream is not None:
            self.stream.close()
            try:
                self.settle_once(stream=False)
            except Exception as exc:  # noqa: BLE001 - their leases expire; recovery settles
                logger.warning("could not settle %d finished job(s) at stop: %s",
                               self.ledger.done_count(), shown(exc))
            self.record_pending()
        self.early.stop(timeout)  # after the last rounds: what they could not settle

    def _read(self) -> None:
        """The ack stream's replies, in order: record what they settled; an ack whose
        fate is unknown goes back to the settling thread (``Engine.ack`` again). After
        replies it pauses ``READ_PAUSE``: a busy worker's replies are then read a few at
        a time, not one wake of this thread (and one hand-over of the interpreter) each.
        Replies left unread meanwhile cost nothing at a kill: the acks were sent whole
        (never corked), and Redis reads what it has received before the reset."""
        assert self.stream is not None
        while not (self._stop.is_set() and self.stream.in_flight() == 0):
            if replies := self.stream.read(self.READ_SECONDS):
                self._replied(replies)
            self.record_pending()
            if replies:  # the next replies gather meanwhile: one wake for several acks
                self._stop.wait(self.READ_PAUSE)

    def _replied(self, replies: list[AckReply]) -> None:
        """Replies of the stream: record what they settled; an error (or a failure here)
        hands a reply's outcomes back to be settled through ``Engine.ack``."""
        settled: list[Outcome] = []
        for reply in replies:
            queue, wins = reply.tag
            try:
                if reply.error is not None:
                    raise reply.error
                sent = self.settler.acked(queue, wins, reply.acked)
            except Exception as exc:  # noqa: BLE001 - never the reader thread
                logger.debug("ack stream: %s; settling %d job(s) again", shown(exc), len(wins))
                self.ledger.keep_unsettled(wins, wins)
                self.ledger.wake_settling()
                continue
            self._to_record.append(sent)
            settled += wins
        if settled:
            self.ledger.keep_unsettled([], settled)
            self.on_settled(settled)

    def _run(self) -> None:
        while True:
            stopping = self._stop.is_set()
            if not stopping and (self.stream is not None or not self._to_record):
                # cleared before the wait, which returns at once if any is done: a job
                # thread that saw it set left its outcome to a round still to come
                self._woken = False
                if self.ledger.wait_done(self._wait_seconds()) and self.stream is not None:
                    self._stop.wait(SEND_EVERY)  # a job thread may send them meanwhile
            try:
                self.settle_once(stream=not stopping)
            except Exception as exc:  # noqa: BLE001 - kept for the next round; never the thread
                if self._stop.wait(self._outage.backoff(exc)) and stopping:
                    return  # what was settled is recorded (finally)
                continue
            finally:
                if self.stream is None or stopping:  # else the stream's reader records
                    self.record_pending()
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
            self.settler.record(sent)

    def _wait_seconds(self) -> float:
        """Until the unsettled outcomes may be settled again: their queue's delay ends,
        and a sharded queue's set-aside shard's (the first of them) may be tried again."""
        wait_ms = self.IDLE_SECONDS * 1000
        engine, health = self.settler.engine, self.settler.engine.health
        for queue in self.ledger.unsettled_queues():  # settled once their delay ends
            shards = [health.remaining_ms(n) for n in engine.data_sets(queue) if health.down(n)]
            wait_ms = min(wait_ms, max(self.backoff.remaining_ms(queue), min(shards, default=0)))
        return max(wait_ms, 1.0) / 1000

    def settle_once(self, stream: bool = True) -> None:
        """One round: forget the records of landed rows, then settle what is done: the
        successes through the ack stream (sent, not waited for: the reader records them)
        unless ``stream`` is False, the rest with one call per queue, recorded at once.
        Safe on several threads at once: each outcome is taken by one round."""
        self.settler.forget_landed()
        outcomes = self.ledger.take_done()
        if stream and self.stream is not None and outcomes:
            outcomes = self._stream(outcomes)
        if not outcomes:
            return
        by_queue = grouped(outcomes, lambda o: o.job.queue)
        sent: Sent = []
        kept: list[Outcome] = []  # a sharded queue's outcomes whose shard failed
        ids = {o.job.id for o in outcomes}
        with self._recording:  # a retry of one of them waits until it is recorded
            self._unrecorded |= ids
        try:
            left = self.backoff.each(list(by_queue),
                                     lambda q: sent.extend(self.settler.send(by_queue[q], kept)))
        except BaseException as exc:
            self.ledger.keep_unsettled(outcomes, outcomes)
            if isinstance(exc, OUTAGES):  # Redis unreachable: their final rows now
                done = {id(o) for o, _ in sent}
                self.early.submit(o for o in outcomes if id(o) not in done)
            raise
        finally:
            try:
                self.settler.record(sent)  # never raises: they are settled all the same
            finally:
                with self._recording:
                    self._unrecorded -= ids
                    self._recording.notify_all()
        held = [o for q in left for o in by_queue[q]] + kept
        self.ledger.keep_unsettled(held, outcomes)
        if held:  # their queue or shard cannot reach Redis: their final rows now
            self.early.submit(held)
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
        and fewer than ``SEND_AT`` wait (then the next one takes them: a job thread's
        send costs it a wait for the interpreter, so a busy worker's acks leave batched,
        and an idle worker's at once; a kill finds at most ``SEND_AT - 1`` finished
        jobs unsent beside those of its threads); the settling thread sends what no job
        thread did and settles the rest. Without one (a cluster) it is settled now, on this thread,
        unless a round is under way on another one (that round's thread takes it next)."""
        if self.stream is not None:
            if (time.monotonic() - self._last_send < SEND_EVERY
                    and self.ledger.done_count() < SEND_AT):
                if not self._woken:  # once per round: it sends what is left within SEND_EVERY
                    self._woken = True
                    self.ledger.wake_settling()
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
                             "%s", shown(exc))
                self.ledger.wake_settling()
                return
            finally:
                self._leading.release()
            if not self.ledger.done_count():  # done while this round ran: settle them too
                return

    def _stream(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Send the successes among ``outcomes`` through the stream, each acked in the data
        set that holds it (``job.home``: its queue's, or a shard's), unless its queue backs
        off; returns the rest (all those not written when something failed here: settled
        the usual way; what was written is answered by the reader)."""
        assert self.stream is not None
        rest: list[Outcome] = []
        by_home: dict[tuple[str, str], list[Outcome]] = {}  # (queue, home) -> successes
        waiting: dict[str, bool] = {}  # queue -> backing off: settled the usual way
        written: set[int] = set()  # id() of the outcomes whose ack was written
        try:
            for o in outcomes:
                queue = o.job.queue
                if (held := waiting.get(queue)) is None:
                    held = waiting[queue] = self.backoff.waiting(queue)
                # the data set whose keys hold it (its claim's); "" when unknown and its
                # queue spans several (then Engine.ack finds it)
                home = o.job.home or (queue if self.stream.covers(queue) else "")
                if home and not held and o.kind in ACKED:
                    by_home.setdefault((queue, home), []).append(o)
                else:
                    rest.append(o)
            for (queue, home), wins in by_home.items():
                for part in (wins,) if len(wins) <= MAX_ACK else chunks(wins, MAX_ACK):
                    self.settler.note_sent(part)
                    if self.stream.send(home, *acks(part), (queue, part)):
                        written.update(id(o) for o in part)
                    else:
                        rest += part
        except Exception as exc:  # noqa: BLE001 - what was sent is answered by the reader
            logger.debug("ack stream send failed: %s", shown(exc))
            return [o for o in outcomes if id(o) not in written]
        return rest
