"""Every Lua script call (and every MULTI) stays under 5 ms Redis-side with a
100,000-job backlog, end to end through the public API and a real worker.

On the session's private redis-server, with ``slowlog-log-slower-than 5000``:

(a) ``schedule_many`` schedules 100,000 jobs (SQLite; Redis gets them in enqueue
    calls of at most ``scripts.MAX_ENQUEUE``);
(b) a real ``Worker`` (this process, burst mode, events on) drains that 100,000-job due
    backlog: claims, acks, heartbeats, recovery passes, event writes and the
    reconciler's first-look pass over every live row;
(c) the engine alone (no Django) drains a 100,000-job backlog of *due* jobs with mixed
    priorities that all came due at once, so that every claim promotes (claim.lua's
    bound ``scripts.MAX_PROMOTE``), under queue limits (a 100,000-entry window log) and
    with every other script of the engine called along the way: nack, release, defer,
    extend, recover, cancel, move (reschedule, requeue), stats, inspect, purge, acquire and
    release_callable.

Then no call of one of our scripts may be in the SLOWLOG. A MULTI is not logged there
as a whole (Redis logs its commands one by one); the latency monitor (threshold 5 ms)
records it as a ``command`` spike, so a spike that no SLOWLOG entry explains is a
MULTI of ours that was too long. On failure the test prints what is there.

SLOWLOG measures wall time. So that the neighbours' CPU load is not counted as our
scripts' time, the redis-server runs with real-time priority during the test (where
permitted). A virtual machine can still stall for milliseconds now and then inside any
call (its host takes the CPU away: "steal" time), and a busy CI machine more often. So
the test judges the calls as a population, which no stall can fake and no oversized
script can hide in: the run makes at least ``MIN_CALLS`` calls of our scripts (each
``schedule_many`` chunk, claim and ack of 100,000 jobs), and at most ``SLOW_SHARE`` of
them may be slow, none over ``CEILING_US``. A script over its bound is slow call after
call (the unbounded calls this test was written against left over a hundred entries in
one run: events_add 10-28 ms, ack 16-33 ms on every large batch), and a single oversized
call (a whole backlog in one script) is far over the ceiling. A run judged over the rule
is measured once more (``twice``): a machine loaded enough to stall more than one call in
a hundred seldom does so twice running, while a script over its bound is slow in both.

Select it with ``-m script_bounds``; skip it with ``-m "not script_bounds"``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest

from django_delayq import schedule_many
from django_delayq.core import events
from django_delayq.core.api import JobSpec
from django_delayq.core.connection import get_engine
from django_delayq.engine import ClaimedJob, Engine, NewJob, scripts
from django_delayq.models import Job, JobStatus
from tests.conftest import unique_prefix
from tests.helpers import burst

pytestmark = [pytest.mark.script_bounds]

JOBS = 100_000
SLOW_US = 5000
CLAIM_BATCH = 100
# Calls of our scripts the run makes at the least: enqueue chunks, claims, acks.
MIN_CALLS = (JOBS // scripts.MAX_ENQUEUE + JOBS // CLAIM_BATCH + JOBS // scripts.MAX_ACK)
SLOW_SHARE = 0.01  # of MIN_CALLS: slow calls tolerated as stalls of the machine
CEILING_US = 50_000  # no call of ours, stalled or not, may take this long


def _ours(entry: dict[str, Any]) -> bool:
    """A call of one of our scripts (EVALSHA by SHA, EVAL by source; FCALL: none of
    ours are functions, so any FCALL is counted too)."""
    command = entry["command"] or b""
    name = command.split(b" ", 1)[0].upper()
    if name == b"EVALSHA":
        return any(scripts.load(n).sha.encode() in command[:60] for n in scripts.SCRIPT_NAMES)
    return name == b"FCALL" or (name == b"EVAL" and b"lib.lua" in command[:200])


def _describe(entry: dict[str, Any]) -> str:
    command = entry["command"] or b""
    sha = command[8:48]
    names = [n for n in scripts.SCRIPT_NAMES if scripts.load(n).sha.encode() == sha]
    return "%6.2f ms  %s%r" % (entry["duration"] / 1000, "/".join(names) + " " if names else "",
                               command[:120])


def _unexplained_spikes(client: Any, entries: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(unix second, ms) of latency-monitor ``command`` spikes with no SLOWLOG entry of at
    least that length within a second: commands the SLOWLOG does not log, i.e. EXEC."""
    history = client.execute_command("LATENCY", "HISTORY", "command") or []
    out = []
    for ts, ms in ((int(t), int(m)) for t, m in history):
        if not any(abs(int(e["start_time"]) - ts) <= 1 and e["duration"] >= (ms - 1) * 1000
                   for e in entries):
            out.append((ts, ms))
    return out


@contextmanager
def undisturbed(pid: int) -> Iterator[str]:
    """Keep neighbours' CPU load out of Redis's timings: SLOWLOG measures wall time, so a
    redis-server preempted in the middle of a 0.5 ms call logs the other process's slice
    as its own. Real-time scheduling (where permitted; else a higher priority) makes
    what is measured the call itself. Restored on exit."""
    policy, param = os.sched_getscheduler(pid), os.sched_getparam(pid)
    nice = os.getpriority(os.PRIO_PROCESS, pid)
    try:
        os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(1))
        how = "SCHED_FIFO"
    except PermissionError:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, -10)
            how = "nice -10"
        except PermissionError:
            how = "normal scheduling (no permission to raise it)"
    try:
        yield how
    finally:
        with suppress(PermissionError):
            os.sched_setscheduler(pid, policy, param)
            os.setpriority(os.PRIO_PROCESS, pid, nice)


@pytest.fixture
def watched(redis_server):  # type: ignore[no-untyped-def]
    """The session's redis-server with SLOWLOG at 5 ms and the latency monitor on."""
    client = redis_server.client()
    keep = {name: client.config_get(name)[name] for name in (
        "slowlog-log-slower-than", "slowlog-max-len", "latency-monitor-threshold")}
    client.config_set("slowlog-log-slower-than", SLOW_US)
    client.config_set("slowlog-max-len", 10_000)
    client.config_set("latency-monitor-threshold", SLOW_US // 1000)
    client.slowlog_reset()
    client.execute_command("LATENCY", "RESET")
    with undisturbed(redis_server.proc.pid) as how:
        print("redis-server scheduling:", how)
        yield client
    for name, value in keep.items():
        client.config_set(name, value)
    client.close()


@pytest.mark.django_db(transaction=True)
def test_no_script_or_multi_over_5ms_scheduling_and_draining_100k(
        delayq_settings, watched) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "EVENTS": True,
                              "LEASE_SECONDS": 60, "CLAIM_BATCH": CLAIM_BATCH}

    def run() -> int:
        events.reset()
        Job.objects.all().delete()
        started = time.monotonic()
        ids = schedule_many("tests.jobs.noop", (JobSpec() for _ in range(JOBS)))
        scheduled_s = time.monotonic() - started
        assert len(ids) == JOBS
        assert get_engine().stats("default").ready == JOBS
        assert burst(concurrency=4) == 0
        events.flush()
        print("scheduled %d in %.1fs, drained in %.1fs" % (
            JOBS, scheduled_s, time.monotonic() - started - scheduled_s))
        assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == JOBS
        get_engine().purge("default")
        return MIN_CALLS

    twice(watched, run)


def twice(watched: Any, run: Callable[[], int]) -> None:
    """``run()`` (it returns how many calls of our scripts it made at least) judged by
    ``_judge``; judged over the rule, run and judged once more (a loaded machine)."""
    for last in (False, True):
        watched.slowlog_reset()
        watched.execute_command("LATENCY", "RESET")
        calls = run()
        try:
            print(_judge(watched, calls))
            return
        except AssertionError as exc:
            if last:
                raise
            print("over the rule once, measured again (a loaded machine?):\n%s" % exc)


def _judge(watched: Any, calls: int) -> str:
    """Assert the population rule over the SLOWLOG since the fixture reset it; returns
    the report."""
    entries = watched.slowlog_get(10_000)
    ours = [e for e in entries if _ours(e)]
    spikes = _unexplained_spikes(watched, entries)
    allowed = int(calls * SLOW_SHARE)
    report = "\n".join(["SLOWLOG (%d entries, %d of our scripts; %d calls made, %d slow ones "
                         "allowed):" % (len(entries), len(ours), calls, allowed),
                         *map(_describe, entries[:50]),
                         "latency spikes no SLOWLOG entry explains (a MULTI): %r" % spikes])
    assert all(e["duration"] < CEILING_US for e in ours), report
    assert all(ms < CEILING_US // 1000 for _, ms in spikes), report
    assert len(ours) + len(spikes) <= allowed, report
    return report


class Counted:
    """An engine whose script calls are counted (the population the rule judges)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.engine, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return method(*args, **kwargs)

        return call


def _enqueue_due_backlog(e: Counted, now: int) -> None:
    """JOBS jobs due one ms apart until ``now``, priorities -3..3: enqueued before they
    were due, so claims have to promote every one of them."""
    for start in range(0, JOBS, scripts.MAX_ENQUEUE):
        batch = [NewJob(id="b%06d" % i, at_ms=now - JOBS + i, priority=i % 7 - 3)
                 for i in range(start, start + scripts.MAX_ENQUEUE)]
        e.enqueue("q", batch, now_ms=now - JOBS - 1)


def _exercise(e: Counted, jobs: list[ClaimedJob], now: int, round_: int) -> list[ClaimedJob]:
    """Settle a claimed batch with a mix of every settling and managing script; returns
    the jobs still leased (acked at the next round)."""
    first, rest = jobs[:4], jobs[4:]
    if round_ % 10 == 0 and first:
        a = first[0]
        e.nack("q", [(a.id, a.token, 0)], now_ms=now)  # back in line, due now
        e.release("q", first[1:2], now_ms=now)
        e.defer("q", [(j.id, j.token, now + 60_000) for j in first[2:3]], now_ms=now)
        e.reschedule("q", first[2].id if len(first) > 2 else a.id, delay_ms=0, now_ms=now)
        e.nack("q", [(j.id, j.token, None) for j in first[3:4]], now_ms=now)
        if len(first) > 3:
            e.requeue("q", first[3].id, now_ms=now)
        e.stats("q", now_ms=now)
        e.inspect("q", a.id)
        e.cancel("q", "b%06d" % (JOBS - 1 - round_))
        e.recover("q", limit=scripts.MAX_RECOVER, now_ms=now)
    else:
        rest = jobs
    for j in rest[:20]:
        e.acquire("tests.jobs.noop", j.id, lease_ms=60_000, rate=(10**9, 60_000),
                  concurrency=10**9, now_ms=now)
    e.release_callable("tests.jobs.noop", [j.id for j in rest[:20]])
    e.extend("q", [(j.id, j.token) for j in rest], 60_000, now_ms=now)
    return rest


def test_no_script_over_5ms_draining_100k_due_jobs_of_mixed_priorities(
        redis_server, watched) -> None:  # type: ignore[no-untyped-def]
    twice(watched, lambda: _drain_mixed(Counted(Engine(redis_server.client(),
                                                       prefix=unique_prefix()))))


def _drain_mixed(e: Counted) -> int:
    """The backlog of (c) drained; returns the script calls made."""
    now = 1_800_000_000_000
    _enqueue_due_backlog(e, now)
    e.set_queue_limit("q", rate=(10**9, 3_600_000), concurrency=10**9)
    started = time.monotonic()
    leased: list[ClaimedJob] = []
    claimed = rounds = 0
    while True:
        result = e.claim("q", CLAIM_BATCH, 60_000, now_ms=now)
        if not result.jobs and result.next_due_ms is None:
            break
        e.ack("q", [(j.id, j.token) for j in leased])
        claimed += len(result.jobs)
        leased = _exercise(e, result.jobs, now, rounds)
        rounds += 1
        assert rounds <= 10 * JOBS // CLAIM_BATCH  # no endless loop (jobs put back included)
    e.ack("q", [(j.id, j.token) for j in leased])
    while e.purge_pending("q"):
        pass
    print("claimed %d jobs in %d rounds, %d script calls, %.1fs" % (
        claimed, rounds, e.calls, time.monotonic() - started))
    assert claimed >= JOBS and e.stats("q", now_ms=now).inflight == 0
    e.purge("q")
    return e.calls
