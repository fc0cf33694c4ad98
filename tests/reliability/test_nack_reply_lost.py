"""A nack whose reply is lost: Redis ran it (the job is retrying, dead), the worker's
client sends it again and Redis answers that send from the worker's nack record
(lua/nack.lua) with the first one's outcome: the failed attempt is recorded (row, its
``JobAttempt``, one signal), never taken for a lost lease. A real redis-server and a real
worker in this process: the reply is lost on the wire (a proxy that runs the nack and
drops the connection), or by a Redis stopped (SIGSTOP) past the client's timeout."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from django_delayq import schedule, signals
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile_state import DEAD_IN_REDIS, WORKER_LOST, settle_row
from django_delayq.engine import Engine, NackOutcome, scripts
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.worker.audit import AuditWriter
from django_delayq.worker.loop import Worker, WorkerOptions
from django_delayq.worker.outcome import Kind, Outcome
from django_delayq.worker.settle import Settler
from tests import jobs_chaos
from tests.helpers import point_at, wait_until
from tests.reliability.proxy import LossyProxy

pytestmark = pytest.mark.django_db(transaction=True)

NACK_SHA = scripts.load("nack").sha.encode()


@pytest.fixture
def failures() -> Iterator[list[tuple[str, str, int]]]:
    """(signal, job id, attempt) of every job_retrying / job_dead sent meanwhile."""
    seen: list[tuple[str, str, int]] = []

    def retrying(*, job_id: str, attempt: int, **kwargs: Any) -> None:
        seen.append(("job_retrying", job_id, attempt))

    def dead(*, job_id: str, attempt: int, **kwargs: Any) -> None:
        seen.append(("job_dead", job_id, attempt))

    signals.job_retrying.connect(retrying, weak=False)
    signals.job_dead.connect(dead, weak=False)
    yield seen
    signals.job_retrying.disconnect(retrying)
    signals.job_dead.disconnect(dead)


def _run(client: redis.Redis) -> tuple[Worker, threading.Thread]:
    s = get_settings()
    client.script_load(scripts.load("nack").source)  # the nack that is lost runs at once
    worker = Worker(Engine(client, s.prefix), s, WorkerOptions(queues=("default",),
                                                               concurrency=1))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def _recorded(job_id: str, status: JobStatus, failures: list[tuple[str, str, int]]) -> None:
    """The failed attempt 1 is on the row, in one JobAttempt and in one signal (sent once
    Redis settled it: a dead row may be written before, while Redis is unreachable)."""
    wait_until(lambda: Job.objects.get(pk=job_id).status == status, timeout=20)
    wait_until(lambda: JobAttempt.objects.filter(job_id=job_id).exists(), timeout=10)
    wait_until(lambda: any(f[1] == job_id for f in failures), timeout=20)
    row = Job.objects.get(pk=job_id)
    assert (row.attempts, row.error_type) == (1, "builtins.ValueError"), row.describe()
    assert list(JobAttempt.objects.filter(job_id=job_id).values_list("number", "outcome")) == [
        (1, status)]
    name = "job_dead" if status == JobStatus.DEAD else "job_retrying"
    assert [f for f in failures if f[1] == job_id] == [(name, job_id, 1)]


@pytest.mark.parametrize("attempts", [1, 2], ids=["dead", "retrying"])
def test_a_nack_whose_reply_is_lost_on_the_wire_is_recorded(
        settings: Any, fault_server: Any, exec_table: None, failures: list[Any],
        attempts: int) -> None:
    point_at(settings, fault_server)
    proxy = LossyProxy(fault_server.port)
    proxy.drop_reply_to(NACK_SHA)
    worker, thread = _run(redis.Redis.from_url(proxy.url))
    try:
        h = schedule("tests.jobs_chaos.always_raises", max_attempts=attempts, backoff=[3600])
        wait_until(lambda: proxy.dropped == 1, timeout=15)
        _recorded(h.id, JobStatus.DEAD if attempts == 1 else JobStatus.RETRYING, failures)
    finally:
        worker.request_stop()
        thread.join(15)
        proxy.close()
    assert len(jobs_chaos.executions(h.id)) == 1


class _Watched(redis.Connection):
    """A connection telling when a nack it sent timed out (its reply not read)."""

    timed_out = threading.Event()

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        super().send_packed_command(command, check_health)
        parts = [command] if isinstance(command, bytes | str) else command
        self._nack = any(NACK_SHA in (c.encode() if isinstance(c, str) else bytes(c))
                         for c in parts)  # (the sha is never split between parts)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except redis.TimeoutError:
            if getattr(self, "_nack", False):
                _Watched.timed_out.set()
            raise


def test_a_nack_sent_while_redis_is_stopped_is_recorded(
        settings: Any, fault_server: Any, exec_table: None, failures: list[Any]) -> None:
    """Redis SIGSTOPped while the job fails: the nack times out (0.3 s here), the client
    sends it again on a new connection; once Redis is continued it runs the first, then
    the others, answered from the record. The row ends dead (not running for ever)."""
    point_at(settings, fault_server, LEASE_SECONDS=10.0)
    jobs_chaos.reset_hung()
    _Watched.timed_out.clear()
    pool = redis.ConnectionPool(connection_class=_Watched, host="127.0.0.1",
                                port=fault_server.port, socket_timeout=0.3,
                                socket_connect_timeout=0.3)
    worker, thread = _run(redis.Redis(connection_pool=pool))
    pid = fault_server.proc.pid
    stopped = False
    try:
        h = schedule("tests.jobs_chaos.hang_then_raise", 30, max_attempts=1)
        wait_until(lambda: len(jobs_chaos.executions(h.id)) == 1, timeout=15)
        os.kill(pid, signal.SIGSTOP)
        stopped = True
        jobs_chaos.release_hung()  # fails now: its nack waits in Redis's socket
        wait_until(_Watched.timed_out.is_set, timeout=15)
        os.kill(pid, signal.SIGCONT)
        stopped = False
        _recorded(h.id, JobStatus.DEAD, failures)
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)
        jobs_chaos.reset_hung()
        worker.request_stop()
        thread.join(15)
    assert len(jobs_chaos.executions(h.id)) == 1


def _failed(job: Any, **fields: Any) -> Outcome:
    now = datetime.now(UTC)
    return Outcome(job=job, kind=Kind.DEAD, started_at=now, finished_at=now,
                   path="tests.jobs.noop", error_type="builtins.ValueError", error="always",
                   **fields)


def test_a_nack_answered_again_after_a_reconciler_recorded_its_attempt_is_not_recorded_twice(
        settings: Any, redis_server: Any, exec_table: None, failures: list[Any]) -> None:
    """The worker's dead-making nack ran, its reply lost, and the worker was cut off past
    its lease: a reconciler settled the row from Redis's dead set (attempt row, signal).
    Sent again and answered from the record, the nack records nothing more."""
    point_at(settings, redis_server)
    h = schedule("tests.jobs.noop", max_attempts=1)
    engine = get_engine()
    [job] = engine.claim("default", 1, 200).jobs  # a lease of 0.2 s: it passes
    Job.objects.filter(pk=h.id).update(status=JobStatus.RUNNING, attempts=1, worker_id="H")
    assert engine.nack("default", [(job.id, job.token, None)], holder="H") == [
        NackOutcome.DEAD]  # the send whose reply was lost
    assert settle_row(Job.objects.get(pk=h.id), JobStatus.DEAD, 1, DEAD_IN_REDIS,
                      error_type=WORKER_LOST)
    settler = Settler(engine, get_settings(), AuditWriter(), "H")
    wait_until(lambda: settler.lease_left(job) <= 0)
    settler.settle([_failed(job, nack_sent=True)])
    settler.audit.flush()
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list("number", "error_type")) == [
        (1, WORKER_LOST)]
    assert [f for f in failures if f[1] == h.id] == [("job_dead", h.id, 1)]


def test_a_nack_sent_again_is_recorded_once_when_nothing_else_recorded_it(
        settings: Any, redis_server: Any, exec_table: None, failures: list[Any]) -> None:
    """The same, the worker's lease passed (a stall of Redis past it), no reconciler: the
    answer is the first send's, recorded once."""
    point_at(settings, redis_server)
    h = schedule("tests.jobs.noop", max_attempts=1)
    engine = get_engine()
    [job] = engine.claim("default", 1, 200).jobs
    assert engine.nack("default", [(job.id, job.token, None)], holder="H") == [
        NackOutcome.DEAD]
    settler = Settler(engine, get_settings(), AuditWriter(), "H")
    wait_until(lambda: settler.lease_left(job) <= 0)
    settler.settle([_failed(job, nack_sent=True)])
    settler.audit.flush()
    assert list(JobAttempt.objects.filter(job_id=h.id).values_list("number", "outcome")) == [
        (1, JobStatus.DEAD)]
    assert [f for f in failures if f[1] == h.id] == [("job_dead", h.id, 1)]


def test_a_nack_under_a_childs_id_by_its_supervisor_is_not_answered_from_the_childs_record(
        settings: Any, redis_server: Any, exec_table: None) -> None:
    """A --processes child nacked a job, then died before telling its supervisor; the
    supervisor's take-back nacks it under the child's id: refused, as before (the
    child's own nack was recorded by the child), not answered from the child's record."""
    point_at(settings, redis_server)
    h = schedule("tests.jobs.noop", max_attempts=3)
    engine = get_engine()
    [job] = engine.claim("default", 1, 60_000).jobs
    assert engine.nack("default", [(job.id, job.token, 60_000)], holder="child") == [
        NackOutcome.RETRYING]
    taking_back = Settler(engine, get_settings(), AuditWriter(), "child")
    taking_back.answer_nacks = False  # as worker/processes/children.py builds it
    assert [status for _, status in taking_back.send([_failed(job)])] == [None]
    assert Job.objects.get(pk=h.id).status == JobStatus.SCHEDULED
