"""The send to Redis of the jobs a transaction scheduled: after its commit, one
``Engine.enqueue`` per queue for all of them, through Django's public ``on_commit`` only.

Each call (a ``schedule()``, a ``schedule_many()`` batch, the children a workflow
releases) registers its own ``transaction.on_commit`` callback, so Django decides which
jobs are sent: a callback registered inside a savepoint that rolls back is discarded with
it, a rolled-back transaction runs none. At commit each callback that runs adds its jobs
to its connection's pending jobs, and the last one to run sends them all, by queue (split
by the engine into script calls of ``scripts.MAX_ENQUEUE``). Which one is the last: the
connection keeps a weak reference to each callback, in the order registered; Django holds
the callbacks it will run and drops those it discards, so a callback sees whether one
registered after it is still alive (it will run, and send), else it sends.

On an interpreter that frees objects later than CPython does, a discarded callback can
look alive; and a hook registered before ours that raises stops Django's run of the
others. Then jobs can stay pending: the next send on that connection takes them, and
their rows (committed, ``scheduled``) are the reconciler's anyway, as after a failed send.
A callback of your own registered between two ``schedule()`` calls of one transaction
runs before either job is sent; one registered after the last call runs after the send.
``after_sends`` runs a function at commit after the jobs of the callbacks registered
before it are sent (a cancel in the transaction that scheduled the job).

``move_unsent``: a ``reschedule()`` or ``run_now()`` in the transaction that scheduled the
job, before its send. The connection keeps, by job id, a weak reference to the callback
that sends it (found in one dict lookup; alive: Django will run it at this commit). The
move is kept with a callback of its own: it stands if that one ran, or is still alive
when the send happens (a savepoint rolled back discards it, and its move with it); the
send gives the job the due time of its last move that stands.

In autocommit the rows are committed by their INSERT: the jobs are sent at once.

``send(queue, jobs)`` is the one send of committed jobs (at commit, or at once in
autocommit; ``api.enqueue_or_outbox``, the same function, serves Spark's sink): one
``Engine.enqueue`` of the current settings' engine, split by the engine into script calls
of ``scripts.MAX_ENQUEUE``. When it returns, the jobs are in Redis: ``schedule()`` in
autocommit returns with its job in Redis, and a worker, ``cancel()`` or a test helper of
the same process reading Redis next finds it there.

Eager mode (``DELAYQ["EAGER"]``) sends nothing: every way of scheduling runs its jobs at
commit (at once in autocommit), in its own callback, through ``eager_runner()``, the
runner ``django_delayq.testing`` plugs in when the app is ready (``set_eager_runner``: a
hook, this layer never imports it). Every job of the commit runs; the exceptions of
those that fail (their rows ``dead``) are kept on the connection, and the last eager
callback to run (found as the last sender is) raises the first: out of the commit, or of
``schedule()`` in autocommit. That callback is not ``robust``: Django runs none of the
on-commit callbacks registered after it, as with any callback of the user's that raises.

**Invariant: a job whose row committed reaches Redis, or the reconciler brings it
there.** The row is committed before the send; a send that fails (Redis down) is logged
and never fails the caller: its rows stay ``scheduled`` (the row is the outbox) and the
reconciler enqueues them.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction

from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine.logtext import shown
from django_delayq.engine.shard_health import OUTAGES

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import NewJob

logger = logging.getLogger(__name__)


class _Move:
    """A due time given to a job not sent yet: it stands once its callback ran at the
    commit, or while Django holds that callback (its savepoint was not rolled back)."""

    __slots__ = ("at_ms", "callback", "delay_ms")

    def __init__(self, at_ms: int | None, delay_ms: int) -> None:
        self.at_ms, self.delay_ms = at_ms, delay_ms
        self.callback: weakref.ref[Callable[[], None]] | None = None

    def stands(self) -> bool:
        return self.callback is None or self.callback() is not None


class _Pending:
    """One database connection's jobs whose callbacks ran and that are not sent yet, by
    queue, weak references to the callbacks registered, in their order, and (eager mode)
    the exceptions of the jobs run at this commit, for the last callback to raise. And,
    by job id, the callback that sends (eager: runs) each job of the open transaction
    (``unsent``) and the moves given to them (``moves``: ``move_unsent``)."""

    __slots__ = ("after_commit", "callbacks", "failures", "jobs", "moves", "ran", "running",
                 "unsent")

    def __init__(self) -> None:
        self.jobs: dict[str, list[NewJob]] = {}
        self.callbacks: list[weakref.ref[Callable[[], None]]] = []
        self.unsent: dict[str, weakref.ref[Callable[[], None]]] = {}
        self.moves: dict[str, list[_Move]] = {}
        self.failures: list[Exception] = []
        self.ran = False  # (eager) a callback ran since the last one was registered
        self.running = 0  # (eager) callbacks running now, one inside the other
        self.after_commit = False  # (eager) the one running runs after a real commit

    def add(self, queue: str, jobs: list[NewJob]) -> None:
        self.jobs.setdefault(queue, []).extend(jobs)

    def register(self, callback: Callable[[], None]) -> weakref.ref[Callable[[], None]]:
        self.forget_discarded()  # after a rollback: none is alive any more
        if not self.callbacks and (self.unsent or self.moves):  # none alive: none unsent
            self.unsent.clear()
            self.moves.clear()
        me = weakref.ref(callback)
        self.callbacks.append(me)
        return me

    def last(self, me: weakref.ref[Callable[[], None]]) -> bool:
        """Whether no callback registered after ``me`` is still registered (one that is
        runs later). Django dropped the discarded ones: their references are dead. The
        last forgets itself; those before it are dead once run, but for one still running
        up the stack (an eager job that scheduled ``me``): it is not the last."""
        self.forget_discarded()
        if self.callbacks and self.callbacks[-1] is not me:
            return False
        del self.callbacks[-1:]
        return True

    def forget_discarded(self) -> None:
        while self.callbacks and self.callbacks[-1]() is None:
            self.callbacks.pop()

    def send(self) -> None:
        jobs, self.jobs = self.jobs, {}
        self.unsent.clear()  # at (or after) the commit: no reschedule() finds them here
        for queue, queued in jobs.items():
            send(queue, [self.moved(job) for job in queued] if self.moves else queued)

    def moved(self, job: NewJob) -> NewJob:
        """``job`` due at its last move that stands, if any."""
        for move in reversed(self.moves.pop(job.id, ())):
            if move.stands():
                return replace(job, at_ms=move.at_ms, delay_ms=move.delay_ms)
        return job


# Keyed by Django's connection object: one per thread (or async context) and alias.
_by_connection: weakref.WeakKeyDictionary[Any, _Pending] = weakref.WeakKeyDictionary()


def enqueue_after_commit(using: str, queue: str, jobs: list[NewJob], conn: Any = None) -> None:
    """Send ``jobs`` to Redis once the transaction of ``using`` commits (at once in
    autocommit), in one send with the other jobs that transaction scheduled; in eager mode
    run them then instead (``_run_at_commit``). ``conn``: ``connections[using]``, when the
    caller has it."""
    if not jobs:
        return
    conn = conn or connections[using]
    pending = _by_connection.get(conn)
    if pending is None:
        pending = _by_connection[conn] = _Pending()
    if get_settings().eager:
        _run_at_commit(using, pending, [job.id for job in jobs], conn.get_autocommit())
        return
    if conn.get_autocommit():  # no transaction: the rows are committed already
        if not pending.jobs:  # schedule()'s usual case: these jobs alone
            send(queue, list(jobs))
            return
        pending.add(queue, jobs)  # jobs left pending go with these
        pending.send()
        return
    jobs = list(jobs)

    def send_at_commit() -> None:  # holds no reference to itself: freed when discarded
        pending.add(queue, jobs)
        if pending.last(me):
            pending.send()

    me = pending.register(send_at_commit)
    for job in jobs:
        pending.unsent[job.id] = me
    transaction.on_commit(send_at_commit, using=using, robust=True)  # its errors: logged


def _run_at_commit(using: str, pending: _Pending, job_ids: list[str],
                   autocommit: bool) -> None:
    """Eager mode: run the jobs inline, in order, when the transaction commits. Every job
    of a commit runs; a failing one ends ``dead`` and the last eager callback of the
    commit raises the commit's first failure, out of the commit: not ``robust``, so Django
    runs none of the on-commit callbacks registered after it, as with any callback that
    raises. The failures are the commit's (a list begun by its first eager callback: one
    left by a commit Django stopped short is dropped). In autocommit (a ``schedule()``
    outside a transaction, or by a job run at a commit) the jobs run at once and this call
    raises its own first failure."""
    run = eager_runner()  # at schedule() time: a job replaced before the commit is not run
    if autocommit:
        if failures := _run_all(run, job_ids):
            raise failures[0]
        return
    pending.forget_discarded()
    # the transaction's first: its own list of failures (a callback ran since the last
    # registration, none running now: a commit came between, whatever Django kept; or a
    # job run after a real commit opened a transaction of its own)
    if not pending.callbacks or (pending.ran and not pending.running) or (
            pending.running and pending.after_commit):
        pending.failures = []
    pending.ran = False
    failures = pending.failures
    connection = transaction.get_connection(using)

    def run_at_commit() -> None:  # holds no reference to itself: freed when discarded
        outer = pending.after_commit  # False under django_capture_on_commit_callbacks
        pending.ran, pending.running = True, pending.running + 1
        pending.after_commit = connection.get_autocommit()
        try:
            failures.extend(_run_all(run, job_ids))
        finally:
            pending.running -= 1
            pending.after_commit = outer
        if pending.last(me) and failures:
            first = failures[0]
            failures.clear()
            raise first

    me = pending.register(run_at_commit)
    for job_id in job_ids:
        pending.unsent[job_id] = me
    transaction.on_commit(run_at_commit, using=using)


def _run_all(run: Callable[[str], object], job_ids: list[str]) -> list[Exception]:
    """Run each job; the exceptions of those that failed (their rows are ``dead``)."""
    failures = []
    for job_id in job_ids:
        try:
            run(job_id)
        except Exception as exc:  # noqa: BLE001 - raised by the caller, once the others ran
            failures.append(exc)
    return failures


def after_sends(using: str, fn: Callable[[], object]) -> None:
    """Run ``fn`` after the commit of ``using``'s transaction (at once in autocommit), once
    the jobs of the callbacks registered before it are sent: a cancel of a job scheduled in
    the same transaction reaches Redis after the job."""

    def run() -> None:
        pending = _by_connection.get(connections[using])
        if pending is not None and pending.jobs:
            pending.send()
        fn()

    transaction.on_commit(run, using=using, robust=True)


def move_unsent(using: str, job_id: str, at_ms: int | None, delay_ms: int) -> bool:
    """Whether ``job_id`` is a job the open transaction of ``using`` scheduled, whose send
    (eager mode: its run) is still to come at its commit. If so that send gives it the due
    time ``at_ms`` (epoch ms) or ``delay_ms`` after the server's time then, as a ``NewJob``
    is due, unless the savepoint of this call rolls back; eager mode runs it at the commit
    anyway. False: sent already, or scheduled by another transaction (Redis's to move)."""
    conn = connections[using]
    pending = _by_connection.get(conn)
    sender = None if pending is None else pending.unsent.get(job_id)
    if pending is None or sender is None or sender() is None or conn.get_autocommit():
        return False
    if get_settings().eager:
        return True
    move = _Move(at_ms, delay_ms)

    def stands() -> None:  # holds no reference to itself: freed when discarded
        move.callback = None  # ran at the commit: its savepoint was not rolled back

    move.callback = weakref.ref(stands)
    pending.moves.setdefault(job_id, []).append(move)
    transaction.on_commit(stands, using=using, robust=True)
    return True


def send(queue: str, jobs: list[NewJob]) -> None:
    """Send committed jobs to Redis (the engine of the current settings)."""
    try:
        get_engine().enqueue(queue, jobs)  # a cluster client connects when it is made
    except OUTAGES as exc:  # a slot no node serves too: a warning, no traceback per call
        logger.warning("Redis unavailable; %d job(s) of queue %r stay in the outbox for the "
                       "reconciler: %s", len(jobs), queue, shown(exc))
    except Exception:  # noqa: BLE001 - the rows are committed: never fail the caller
        logger.exception("sending %d job(s) of queue %r to Redis failed; the reconciler "
                         "enqueues them", len(jobs), queue)


_eager: list[Callable[[str], object]] = []


def set_eager_runner(runner: Callable[[str], object]) -> None:
    """What runs a job inline when ``DELAYQ["EAGER"]`` is on: ``django_delayq.testing``
    plugs its runner in when the app is ready (a hook: this layer never imports it). It
    runs a job whose row is live, and skips one whose row is final (cancelled, or replaced
    by a later job of its key, before the commit that runs it), as a worker would."""
    _eager[:] = [runner]


def eager_runner() -> Callable[[str], object]:
    if not _eager:
        raise ImproperlyConfigured("DELAYQ['EAGER'] is on but no eager runner is set: is "
                                   "'django_delayq' in INSTALLED_APPS?")
    return _eager[0]

