"""The passes after an outage (``core/outage.py``): rows left in the outbox reach Redis
seconds after it answers again, not after ``RECONCILE_GRACE_SECONDS``, whichever part of
the process saw the failure, however long its failing call hung before it failed."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from redis.exceptions import ConnectionError as RedisConnectionError

from django_delayq import schedule
from django_delayq.core import outage as outage_module
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.outage import BACKOFF_TAIL_SECONDS, OUTAGE_MARGIN_SECONDS, Outage
from django_delayq.core.reconcile import Reconciler
from django_delayq.engine import engine as plain_engine
from django_delayq.models import Job, JobAttempt
from django_delayq.worker.queue_backoff import QueueBackoff
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cfg(delayq_settings):  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "RECONCILE_GRACE_SECONDS": 3600}
    return delayq_settings


def _refused(*args: Any, **kwargs: Any) -> Any:
    raise RedisConnectionError("Error 111 connecting: Connection refused.")


def _outbox(monkeypatch: pytest.MonkeyPatch, n: int = 3) -> list[str]:
    """``n`` jobs whose send failed, out of sight of this process's engine (as another
    process's would): their rows stay in the outbox."""
    with monkeypatch.context() as patched:
        patched.setattr(get_engine(), "enqueue", _refused)
        ids = [schedule("tests.jobs.noop").id for _ in range(n)]
    assert {get_engine().inspect("default", i).place for i in ids} == {""}
    return ids


def _reconciler() -> Reconciler:
    reconciler = Reconciler(get_engine(), get_settings(), ("default",))
    assert reconciler.tick() == 0  # a look that works: the epochs known
    return reconciler


def _sent_by_ticks(reconciler: Reconciler, ids: list[str], timeout: float = 20) -> None:
    """Tick (as the keeper does) until every job of ``ids`` is in Redis, each once."""
    engine = get_engine()
    wait_until(lambda: reconciler.tick() >= 0 and all(
        engine.inspect("default", i).place == "pending" for i in ids), timeout=timeout, step=0.1)
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {0}
    assert not JobAttempt.objects.filter(job_id__in=ids).exists()  # never charged


def test_a_failure_of_another_part_of_the_process_between_two_looks(cfg, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Redis failed for the process's sends (a queue its worker backed off) and worked again
    between two of the reconciler's looks, which all worked: the rows of the sends that
    failed get the pass after an outage."""
    reconciler = _reconciler()
    with monkeypatch.context() as patched:  # the sends of this process fail, as a blip
        patched.setattr(plain_engine.Engine, "enqueue", _refused)  # under ShardHealth
        ids = [schedule("tests.jobs.noop").id for _ in range(3)]
    assert get_engine().health.failures >= 1
    get_engine().health.worked("default")  # answers again: tried at once
    began = time.monotonic()
    _sent_by_ticks(reconciler, ids)
    assert time.monotonic() - began < 15
    assert reconciler.stats.outage_passes >= 1


def test_the_worker_loops_failures_count_too(cfg, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The claims' per-queue backoff (``QueueBackoff``), handed to the reconciler by the
    worker: a queue that found its node unreachable is a sign of an outage; one that
    answered with an error is not."""
    backoff = QueueBackoff()
    reconciler = Reconciler(get_engine(), get_settings(), ("default",),
                            failures=lambda: backoff.failures)
    assert reconciler.tick() == 0
    ids = _outbox(monkeypatch)
    with pytest.raises(RedisConnectionError):
        backoff.each(["default"], _refused)
    assert backoff.failures == 1
    _sent_by_ticks(reconciler, ids)


def test_a_read_that_failed_before_its_retry_worked(cfg, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The epochs' read of every data set failed (a stalled node), and the reads one by
    one that follow it worked (it answered again meanwhile): an outage all the same."""
    reconciler = _reconciler()
    ids = _outbox(monkeypatch)
    engine, calls = get_engine(), []
    epochs = engine.epochs

    def first_fails(names: Any) -> Any:
        calls.append(names)
        if len(calls) == 1:
            raise RedisConnectionError("Timeout reading from socket")
        return epochs(names)

    monkeypatch.setattr(engine, "epochs", first_fails)
    reconciler._last_epoch = -1e18  # the next tick looks at the epochs
    assert reconciler.tick() == 0  # no error: the read one by one worked
    assert len(calls) == 2
    _sent_by_ticks(reconciler, ids)


def test_an_outage_is_dated_from_the_last_look_that_worked(cfg, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The look that failed hung longer than the margin before it did (a stalled node's
    reply timeouts): the rows the web processes wrote when it began are in the pass."""
    reconciler = _reconciler()
    ids = _outbox(monkeypatch)
    engine, calls = get_engine(), []
    epochs = engine.epochs
    monkeypatch.setattr(outage_module, "OUTAGE_MARGIN_SECONDS", 1.0)  # a shorter hang

    def hangs_then_fails(names: Any) -> Any:
        calls.append(names)
        if len(calls) == 1:  # the fault: a call that hangs, then fails (the others at once)
            time.sleep(outage_module.OUTAGE_MARGIN_SECONDS + 1)
        raise RedisConnectionError("Timeout reading from socket")

    monkeypatch.setattr(engine, "epochs", hangs_then_fails)
    reconciler._last_epoch = -1e18
    with pytest.raises(RedisConnectionError):
        reconciler.tick()
    monkeypatch.setattr(engine, "epochs", epochs)
    _sent_by_ticks(reconciler, ids)


def test_a_send_still_on_its_way_is_left_to_its_process(cfg, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The passes after an outage keep the second look: a row found missing whose own
    send lands before that look (its web process was slow) is not re-enqueued; the rows
    of the sends that failed are."""
    reconciler = _reconciler()
    with monkeypatch.context() as patched:  # a failed send: the outage
        patched.setattr(plain_engine.Engine, "enqueue", _refused)
        failed = [schedule("tests.jobs.noop").id]
    get_engine().health.worked("default")
    engine, held = get_engine(), []
    with monkeypatch.context() as patched:  # committed, its send held up
        patched.setattr(engine, "enqueue", lambda queue, jobs, *a: held.append((queue, jobs)))
        slow = schedule("tests.jobs.noop").id
    wait_until(lambda: reconciler.tick() >= 0 and slow in reconciler._suspects, timeout=20,
               step=0.05)  # found missing by a pass (first look)
    queue, jobs = held[0]
    engine.enqueue(queue, jobs)  # the send lands
    _sent_by_ticks(reconciler, failed)
    wait_until(lambda: reconciler.tick() >= 0 and slow not in reconciler._suspects, timeout=20)
    place = engine.presence("default", [slow])[0]
    assert place.waiting and place.reconciled_ms is None  # its own send, not a re-enqueue
    assert engine.presence("default", failed)[0].reconciled_ms is not None


class _Clocks:
    """A monotonic clock and this host's time, moved by hand."""

    def __init__(self) -> None:
        self.mono, self.wall = 1000.0, timezone.now()

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += timedelta(seconds=seconds)


def test_the_passes_last_until_no_web_process_can_still_back_off() -> None:
    """A pass once an enqueue in flight has landed, then one every grace until the
    longest backoff of a web process has ended, each over the rows since the last look
    that worked before the outage; none while it fails; an outage that begins again
    before its passes ran keeps the earlier one's rows."""
    clocks = _Clocks()
    outage = Outage(clock=lambda: clocks.mono, now=lambda: clocks.wall)
    margin = timedelta(seconds=OUTAGE_MARGIN_SECONDS)
    outage.worked()
    ok_at = clocks.wall
    clocks.advance(60)  # the failing look hung a minute
    outage.failed()
    clocks.advance(10)
    assert outage.take_pass() is None
    outage.worked()
    back, starts, since = clocks.mono, [], set()
    for _ in range(100):
        clocks.advance(0.5)
        if (start := outage.take_pass()) is not None:
            starts.append(clocks.mono - back)
            since.add(start)
            outage.done()
    assert since == {ok_at - margin}
    assert starts[0] == 2.0 and starts[-1] >= BACKOFF_TAIL_SECONDS + 2.0, starts
    assert all(b - a <= 2.0 for a, b in zip(starts, starts[1:])), starts
    assert outage.since is None  # the last one done: nothing owed
    outage.worked()
    first = clocks.wall
    clocks.advance(1)
    outage.failed()  # dated from ``first``
    clocks.advance(1)
    outage.worked()
    clocks.advance(1)
    outage.failed()  # again, before its passes ran
    clocks.advance(1)
    outage.worked()
    assert outage.take_pass() is None
    clocks.advance(2)
    assert outage.take_pass() == first - margin


def test_rows_of_a_stalls_start_are_in_the_pass_though_a_look_worked_after_it() -> None:
    """A stall begins as a row is written; this worker's looks that do not touch the
    stalled node go on working until a call on it fails, its reply timeout later (and it
    may have begun up to a 2 s poll after the stall): the pass covers that row."""
    clocks = _Clocks()
    outage = Outage(clock=lambda: clocks.mono, now=lambda: clocks.wall)
    row_written = clocks.wall  # the stall begins
    clocks.advance(2 + 5 - 0.1)  # a poll, then a call on the node that times out
    outage.worked()  # a look that did not touch the stalled node
    clocks.advance(0.1)
    outage.failed()
    clocks.advance(3)
    outage.worked()
    clocks.advance(3)
    start = outage.take_pass()
    assert start is not None and start <= row_written
