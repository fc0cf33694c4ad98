"""Cancels of the jobs a worker holds for a thread, read again before they start.

A claimed job's row is read when it is claimed (``handover.py``: ``payloads.read``); one
whose cancel was asked by then ends cancelled without running. The others wait in the
worker for a free thread (the prefetch: what the threads start within
``claiming.PREFETCH_SECONDS`` at their pace; or behind a long job, a fixed prefetch's),
in flight in Redis: a cancel meanwhile finds them there (``cancel.lua`` answers
``ALREADY_RUNNING`` and marks the job: never retried) and sets the row's
``cancel_requested``. So that such a job does not start after all:

* a job thread about to take a job whose row was last read more than ``FRESH_S`` ago
  (``HeldCancels.check``, before ``Ledger.start``) first reads the ``cancel_requested`` of
  every job held unstarted again, in one query (``payloads.cancels_asked``); each job
  whose cancel was asked ends as one cancelled at its claim ends
  (``outcome.cancelled_unstarted``: nacked; Redis's cancel mark makes it ``cancelled``),
  and the others count as read when that query was sent (``Ledger.reread``). A thread
  therefore takes a job on a read of its row sent at most ``FRESH_S`` before, or, when
  it made that read itself, as soon as its answer returns: a cancel committed before the
  read was sent keeps the job from starting; one committed later (within ``FRESH_S``, or
  within that read's duration when the database answers slower) may not. The read
  failing (the database down), the job does not start: it is deferred (back to Redis,
  uncharged), and for ``FAILED_S`` after a failed read the other threads defer theirs
  without a query of their own (a down database costs one attempt, not one per thread).
* the main loop (``sweep``) reads them again the same way once one has waited ``SWEEP_S``
  since its row's last read (looking at most every ``SWEEP_S``): a job cancelled behind
  a long job ends ``cancelled`` within a second or two, not when a thread frees up. It
  never waits: while a thread's read runs it skips (that read reads every held job), and
  a read that fails is logged as a warning, at most one line every few seconds
  (``audit.OutageLog``), the loop's other work (time limits, drain) going on.

A job a thread takes within ``FRESH_S`` of its claim (a drain's: the prefetch holds
``PREFETCH_SECONDS`` of work) costs no query: the check is a dict look-up and a clock
read. One query reads every held job, so a worker whose jobs wait longer makes about one
such query per ``FRESH_S`` at most (one a thread waits for, under ``_lock``).

Start marks are sent without waiting (``settle.Settler.mark``), so Redis cannot tell a
held job from one whose run began and whose mark has not landed: ``cancel.lua`` answers
``ALREADY_RUNNING`` for both, and the worker, which knows, decides here.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from django.db import DatabaseError, close_old_connections

from django_delayq.core import payloads
from django_delayq.engine.logtext import shown
from django_delayq.worker.audit import OutageLog
from django_delayq.worker.outcome import cancelled_unstarted

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.ledger import Ledger

logger = logging.getLogger(__name__)

FRESH_S = 0.2  # a thread takes a job on a read of its row at most this old
SWEEP_S = 1.0  # the main loop reads again the rows of jobs held this long, looking this often
FAILED_S = 1.0  # after a failed read, jobs due a read are deferred this long without a query


class HeldCancels:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._lock = threading.Lock()  # one read at a time: the others wait for its answer
        self._next_sweep = 0.0  # monotonic
        self._failed_at: float | None = None  # the last read's failure (monotonic); None: it worked
        # under ``_lock``: a down database is one warning every few seconds, not one per job
        self._outage = OutageLog(logger, "reading the cancels of the jobs held for a thread "
                                 "(their starts deferred)", quiet=(DatabaseError,))
        self.reads = 0  # queries made (tests, benchmarks)

    def check(self, job: ClaimedJob) -> bool:
        """Before a thread takes ``job``: reads the held jobs' cancels again when its row's
        last read is older than ``FRESH_S`` (a job found cancelled is ended: ``start``
        then finds it gone). False: that read failed, or one failed less than
        ``FAILED_S`` ago: ``job`` must not start."""
        at = self.ledger.read_at(job)
        if at is None or time.monotonic() - at <= FRESH_S:  # not held, or read just now
            return True
        with self._lock:
            at = self.ledger.read_at(job)  # another thread may have read it meanwhile
            if at is None or time.monotonic() - at <= FRESH_S:
                return True
            if self._failing():  # a read just failed: no query of ours, deferred
                return False
            try:
                self._read_again()
            except Exception as exc:  # noqa: BLE001 - the database is down: not started
                logger.debug("job %s: not started, deferred: its cancel could not be read",
                             shown(job.id))
                self._outage.failed(exc, FAILED_S)
                return False
        return True

    def sweep(self) -> None:
        """The main loop's: reads the held jobs' cancels again when one has waited
        ``SWEEP_S`` since its row's last read. Never waits for a thread's read (it reads
        them all) nor raises: a failed read is logged (``_outage``), tried again later."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_S
        oldest = self.ledger.oldest_read()
        if oldest is None or now - oldest < SWEEP_S:
            return
        if not self._lock.acquire(blocking=False):  # a thread's read runs (a slow database)
            return
        try:
            if not self._failing():
                self._read_again()
        except Exception as exc:  # noqa: BLE001 - the main loop goes on (time limits, drain)
            self._outage.failed(exc, SWEEP_S)
        finally:
            self._lock.release()

    def _failing(self) -> bool:
        """A read failed less than ``FAILED_S`` ago (call holding ``_lock``)."""
        return self._failed_at is not None and time.monotonic() - self._failed_at < FAILED_S

    def _read_again(self) -> None:
        """One read of the cancels of every job held unstarted (call holding ``_lock``);
        raises what the read raises."""
        jobs = self.ledger.unstarted()
        if not jobs:
            return
        at = time.monotonic()  # before the query is sent: what it reads is at least this new
        try:
            asked = payloads.cancels_asked([job.id for job in jobs])
        except Exception:
            self._failed_at = time.monotonic()
            close_old_connections()  # a connection the database closed: a new one next time
            raise
        self._failed_at = None
        self._outage.ok()
        self.reads += 1
        for job in self.ledger.reread(jobs, at, asked, cancelled_unstarted):
            logger.info("job %s: cancelled while it waited for a thread; it does not start",
                        shown(job.id))
